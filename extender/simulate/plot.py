"""`--plot`: usage over time per ClusterQueue and flavor, as a step chart."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuqueue.extender.simulate.runner import Simulation, Step


def write_plot(history: list["Step"], sim: "Simulation", path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpuqueue.extender.placement.model import GPU_RESOURCE as GPU

    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    current: dict[tuple[str, str], float] = {}
    for step in history:
        for cq, flavors in step.usage.items():
            for key in [k for k in current if k[0] == cq]:
                current[key] = 0.0
            for flavor, resources in flavors.items():
                raw = resources.get(GPU)
                if raw is not None:
                    current[(cq, flavor)] = float(raw)
        for key, v in current.items():
            series.setdefault(key, []).append((step.time, v))
    fig, ax = plt.subplots(figsize=(8, 4))
    for (cq, flavor), points in sorted(series.items()):
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        ax.step(xs, ys, where="post", label=f"{cq} / {flavor}")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(GPU)
    ax.set_title("admitted usage per ClusterQueue and flavor")
    if series:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
