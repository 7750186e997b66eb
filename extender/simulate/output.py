"""Reporting a simulation: JSON Lines (the contract) or text with FLAME-style GPU pictures."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import orjson

from gpuqueue.extender.simulate.plot import PlotHistory, write_plot
from gpuqueue.extender.simulate.runner import Simulation, Step
from gpuqueue.extender.simulate.scenario import Scenario


def render(scenario: Scenario, mode: str, until: float | None, plot: str | None, out: TextIO) -> int:
    sim = Simulation(scenario)
    history = PlotHistory() if plot else None
    text = TextReport(sim) if mode == "text" else None
    last = 0.0
    for step in sim.run(until):
        last = step.time
        if history is not None:
            history.record(sim, step.time)
        if text is None:
            out.write(orjson.dumps({"time": step.time, "events": step.events, "usage": step.usage}).decode() + "\n")
        else:
            out.write(text.step(step))
    summary = sim.summary(until if until is not None and until > last else last)
    if text is None:
        out.write(orjson.dumps(summary).decode() + "\n")
    else:
        out.write(text.summary(summary))
    if history is not None:
        # to --until, or a little past the last step so that the final state shows as a stretch
        end = until if until is not None and until > 0 else last + max(1.0, 0.1 * last)
        out.flush()
        write_plot(history, plot, end, f"gpuqueue simulate {Path(scenario.source).name}")
    return 0


class TextReport:
    LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        # One character per ClusterQueue, in order of the names of all those the scenario defines
        # (so a letter never changes during a run); the legend under each picture maps them.
        names = sim.scenario.cluster_queue_names()
        self.letters = {n: self.LETTERS[i] if i < len(self.LETTERS) else "?" for i, n in enumerate(names)}

    def labels(self) -> dict[str, str]:
        return {cq: self.letters.get(cq, "?") for cq in self.sim.cq_order}

    def step(self, step: Step) -> str:
        lines = [f"t={_fmt_time(step.time)}"]
        for ev in step.events:
            lines.append("  " + _event_line(ev))
            lines.extend("               " + ln for ln in _topology_lines(ev))
        lines.extend("  " + ln for ln in self.picture())
        return "\n".join(lines) + "\n\n"

    def picture(self) -> list[str]:
        res = self.sim.pictured_resource()
        if res is None:
            return []
        labels = self.labels()
        out: list[str] = []
        used_labels: set[str] = set()
        unit = 1000 if res == "cpu" else 1
        for flavor in self.sim.flavor_order:
            cells: list[str] = []
            for cq in sorted(self.sim.cq_order):
                n = self.sim.usage_of(cq).get((flavor, res), 0) // unit
                cells.extend([labels[cq]] * n)
                if n:
                    used_labels.add(cq)
            capacity = self.sim.capacity(flavor, res) // unit
            if capacity == 0 and not cells:
                continue
            cells.extend(["·"] * max(0, capacity - len(cells)))
            if len(cells) > 64:
                counts = ", ".join(f"{labels[c]} {self.sim.usage_of(c).get((flavor, res), 0) // unit}" for c in sorted(self.sim.cq_order))
                out.append(f"{flavor} ({capacity} {res}): {counts}, idle {cells.count('·')}")
                continue
            out.append(f"{flavor} ({capacity} {res}):")
            out.append("┌" + "┬".join("───" for _ in cells) + "┐")
            out.append("│" + "│".join(f" {c} " for c in cells) + "│")
            out.append("└" + "┴".join("───" for _ in cells) + "┘")
        if out:
            legend = "  ".join(f"{labels[cq]} = {cq}" for cq in sorted(self.sim.cq_order))
            out.append(f"{legend}  · = idle")
        return out

    def summary(self, summary: dict[str, Any]) -> str:
        f = summary["final"]
        lines = [f"final at t={_fmt_time(f['time'])}: {len(f['admitted'])} admitted, {len(f['finished'])} finished, "
                 f"{len(f['pending'])} pending, {f['preemptions']} preemptions"]
        for p in f["pending"]:
            lines.append(f"  pending {p['job']}: {p['message']}")
        fair = self.sim.engine.fair_sharing
        if fair is not None:
            for cq, share in fair.weighted_shares(self.sim.engine.state).items():
                lines.append(f"  weightedShare {cq}: {share}")
        return "\n".join(lines) + "\n"


def _fmt_time(t: float) -> str:
    return f"{t:g}s"


def _topology_lines(ev: dict[str, Any]) -> list[str]:
    """Under an admission to a TAS flavor: each pod set's topology assignment, its domains (their
    values at the assignment's levels, joined by /) with their pod counts."""
    out = []
    for ps, ta in (ev.get("topologyAssignment") or {}).items():
        domains = ", ".join(f"{'/'.join(d['values'])}×{d['count']}" for d in ta["domains"])
        out.append(f"topology of {ps} ({', '.join(ta['levels'])}): {domains}")
    return out


def _event_line(ev: dict[str, Any]) -> str:
    kind, job = ev["kind"], ev["job"]
    cq = ev.get("clusterQueue")
    if kind == "Admitted":
        flavors = ", ".join(f"{r}: {f}" for r, f in ev["flavors"].items())
        if "podSets" in ev:
            flavors = "; ".join(f"{ps} ×{p['count']}: " + ", ".join(f"{r}: {f}" for r, f in p["flavors"].items())
                                for ps, p in ev["podSets"].items())
        extra = " borrowing" if ev.get("borrowing") else ""
        nodes = ev.get("nodes")
        where = (" on " + ", ".join(f"{n}×{c}" for n, c in nodes.items())) if nodes else ""
        return f"Admitted     {job} in {cq} ({flavors}){extra}{where}"
    if kind == "Preempted":
        return f"Preempted    {job} in {cq} for {ev['preemptor']} ({ev['reason']}): suspended and requeued"
    if kind == "Pending":
        return f"Pending      {job}{' in ' + cq if cq else ''}: {ev['message']}"
    if kind in ("Finished", "Deleted"):
        return f"{kind:<12} {job}{' in ' + cq if cq else ''}"
    return f"{kind:<12} {job}: {ev.get('message', '')}"
