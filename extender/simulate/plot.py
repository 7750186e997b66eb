"""`--plot`: a picture of each ClusterQueue's usage against its quota over the whole run.

One panel per flavor shows every ClusterQueue's usage stacked (so no queue hides another) under
the flavor's capacity; then one panel per ClusterQueue and flavor shows its usage, its nominal
quota (usage above it is borrowed) and, on the right axis, how many of its jobs are pending.
Legends sit outside the panels, on the right, so they never cover a line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuqueue.extender.simulate.runner import Simulation

MAX_QUEUE_PANELS = 12  # beyond this, the stacked overview alone stays readable


class PlotError(Exception):
    """The picture cannot be written; the message says why."""


def check_plot(path: str) -> None:
    """Refuse before the run what would make writing the picture fail after it."""
    if not path.endswith((".png", ".svg")):
        raise PlotError("the file must end in .png or .svg")
    folder = Path(path).parent
    if not folder.is_dir():
        raise PlotError(f"directory {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise PlotError(f"directory {folder} is not writable")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError("needs matplotlib, which is not installed (pip install 'gpuqueue[plot]')") from None


def _scale(resource: str) -> tuple[float, str]:
    """Engine integers to the unit an axis shows."""
    if resource == "cpu":
        return 1000.0, "cpu (cores)"
    if resource in ("memory", "ephemeral-storage"):
        return float(2**30), f"{resource} (GiB)"
    return 1.0, resource


@dataclass
class PlotHistory:
    """What the picture needs, sampled after every step: usage and nominal quota per
    (ClusterQueue, flavor) of the pictured resource, and pending jobs per ClusterQueue."""

    times: list[float] = field(default_factory=list)
    usage: list[dict[tuple[str, str], int]] = field(default_factory=list)
    quota: list[dict[tuple[str, str], int]] = field(default_factory=list)
    capacity: list[dict[str, int]] = field(default_factory=list)
    pending: list[dict[str, int]] = field(default_factory=list)
    resource: str | None = None

    def record(self, sim: "Simulation", time: float) -> None:
        res = sim.pictured_resource()  # None while no ClusterQueue covers anything
        self.resource = res or self.resource
        usage, quota = {}, {}
        for cq in sim.cq_order if res else ():
            used = sim.usage_of(cq)
            for flavor in sim.flavor_order:
                usage[(cq, flavor)] = used.get((flavor, res), 0)
                quota[(cq, flavor)] = sim.nominal_quota(cq, flavor, res)
        self.times.append(time)
        self.usage.append(usage)
        self.quota.append(quota)
        self.capacity.append({f: sim.capacity(f, res) for f in sim.flavor_order} if res else {})
        self.pending.append(sim.pending_by_cluster_queue())


def write_plot(history: PlotHistory, path: str, end: float, title: str = "") -> None:
    """Draw `history` from 0 to `end` seconds into `path`; OSError when it cannot be written."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # an SVG keeps its words as text: searchable, smaller
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    res = history.resource or "nvidia.com/gpu"
    div, unit = _scale(res)
    times = history.times + [end]  # each sample holds until the next; the last until the end

    def series(samples, key, scale: float = div) -> list[float]:
        values = [s.get(key, 0) / scale for s in samples] or [0.0]
        return values + values[-1:]

    flavors = sorted({f for c in history.capacity for f, v in c.items() if v}
                     | {f for u in history.usage for (_, f), v in u.items() if v})
    queues = sorted({k for u, q in zip(history.usage, history.quota) for k in {**u, **q} if u.get(k) or q.get(k)})
    shown = queues if len(queues) <= MAX_QUEUE_PANELS else []
    cq_names = sorted({cq for cq, _ in queues} | {cq for p in history.pending for cq in p})
    rows = len(flavors) + len(shown) + 1
    fig, axes = plt.subplots(rows, 1, figsize=(10, 1.0 + 2.0 * rows), sharex=True, squeeze=False)
    axes = [a[0] for a in axes]
    colors = {cq: plt.get_cmap("tab10")(i % 10) for i, cq in enumerate(cq_names)}
    top = max([v / div for c in history.capacity for v in c.values()]
              + [v / div for u in history.usage for v in u.values()]
              + [v / div for q in history.quota for v in q.values()] + [1])

    for ax, flavor in zip(axes, flavors):
        ax.stackplot(times, *[series(history.usage, (cq, flavor)) for cq in cq_names], step="post",
                     colors=[colors[c] for c in cq_names], labels=cq_names, alpha=0.85, edgecolor="white",
                     linewidth=0.5)
        ax.step(times, series(history.capacity, flavor), where="post", color="black", linestyle="--",
                linewidth=1.2, label="capacity")
        ax.set_title(f"flavor {flavor}: {unit} in use, every ClusterQueue stacked", fontsize=10, loc="left")
        _axis(ax, top, unit, MaxNLocator)

    for ax, (cq, flavor) in zip(axes[len(flavors):], shown):
        used, quota = series(history.usage, (cq, flavor)), series(history.quota, (cq, flavor))
        # the quota as a hatched band, not a line: usage equal to it stays visible on its edge
        ax.fill_between(times, quota, step="post", facecolor="none", hatch="///", edgecolor="0.6",
                        linewidth=0, label="nominal quota")
        ax.fill_between(times, used, step="post", color=colors[cq], alpha=0.3, linewidth=0)
        ax.step(times, used, where="post", color=colors[cq], linewidth=2.2, label="in use")
        values = sorted({f"{q:g}" for q in quota}, key=float)
        ax.set_title(f"ClusterQueue {cq}, flavor {flavor}: nominal quota {' to '.join([values[0], values[-1]][:len(values)])}"
                     + ("; above it is borrowed" if max(u - q for u, q in zip(used, quota)) > 0 else ""),
                     fontsize=10, loc="left")
        _axis(ax, top, unit, MaxNLocator)

    ax = axes[-1]
    if cq_names:
        ax.stackplot(times, *[series(history.pending, cq, 1.0) for cq in cq_names], step="post",
                     colors=[colors[c] for c in cq_names], labels=cq_names, alpha=0.85, edgecolor="white",
                     linewidth=0.5)
    else:
        ax.annotate("no job waits in a ClusterQueue", (0.5, 0.5), xycoords="axes fraction", ha="center")
    most = max([sum(p.values()) for p in history.pending] + [1])
    _axis(ax, most, "jobs", MaxNLocator)
    ax.set_title("jobs pending, every ClusterQueue stacked", fontsize=10, loc="left")

    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    axes[-1].set_xlabel("simulated time (s)")
    axes[-1].set_xlim(0, end)
    if len(queues) > MAX_QUEUE_PANELS:
        axes[0].annotate(f"{len(queues)} ClusterQueue/flavor pairs: the panel of each is left out",
                         (0, 1.12), xycoords="axes fraction", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def _axis(ax, top: float, unit: str, locator) -> None:
    ax.set_ylim(-0.03 * top, top * 1.15)  # a line at zero stays clear of the frame
    ax.yaxis.set_major_locator(locator(integer=True))
    ax.set_ylabel(unit, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.tick_params(labelsize=8)
