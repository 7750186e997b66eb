"""Reporting a simulation: JSON Lines (the contract) or text with FLAME-style GPU pictures."""

from __future__ import annotations

from typing import Any, TextIO

import orjson

from gpuqueue.extender.placement.model import GPU_RESOURCE as GPU
from gpuqueue.extender.simulate.runner import Simulation, Step
from gpuqueue.extender.simulate.scenario import Scenario


def render(scenario: Scenario, mode: str, until: float | None, plot: str | None, out: TextIO) -> int:
    sim = Simulation(scenario)
    history: list[Step] = []
    text = TextReport(sim) if mode == "text" else None
    last = 0.0
    for step in sim.run(until):
        last = step.time
        if plot:
            history.append(step)
        if text is None:
            out.write(orjson.dumps({"time": step.time, "events": step.events, "usage": step.usage}).decode() + "\n")
        else:
            out.write(text.step(step))
    summary = sim.summary(until if until is not None and until > last else last)
    if text is None:
        out.write(orjson.dumps(summary).decode() + "\n")
    else:
        out.write(text.summary(summary))
    if plot:
        from gpuqueue.extender.simulate.plot import write_plot

        write_plot(history, sim, plot)
    return 0


class TextReport:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def labels(self) -> dict[str, str]:
        """One character per ClusterQueue: the last letter or digit of its name when those are
        unique (group-a -> A), else A, B, C, ... in order of definition."""
        names = list(self.sim.cq_order)
        tails = [n.rstrip("-_.")[-1:].upper() for n in names]
        if len(set(tails)) == len(tails) and all(t.isalnum() for t in tails):
            return dict(zip(names, tails))
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        return {n: letters[i] if i < len(letters) else "?" for i, n in enumerate(names)}

    def step(self, step: Step) -> str:
        lines = [f"t={_fmt_time(step.time)}"]
        for ev in step.events:
            lines.append("  " + _event_line(ev))
        lines.extend("  " + ln for ln in self.picture())
        return "\n".join(lines) + "\n\n"

    def _capacity(self, flavor: str, resource: str) -> int:
        state = self.sim.engine.state
        roots = {id(n.root()): n.root() for n in state.cq_nodes.values()}
        return sum(r.subtree_quota.get((flavor, resource), 0) for r in roots.values())

    def _resource(self) -> str | None:
        specs = self.sim.engine.state.cq_specs.values()
        covered = [r for s in specs for rg in s.resource_groups for r in rg.covered_resources]
        if GPU in covered:
            return GPU
        return covered[0] if covered else None

    def picture(self) -> list[str]:
        res = self._resource()
        if res is None:
            return []
        labels = self.labels()
        out: list[str] = []
        used_labels: set[str] = set()
        unit = 1000 if res == "cpu" else 1
        for flavor in self.sim.flavor_order:
            cells: list[str] = []
            for cq in self.sim.cq_order:
                n = self.sim.usage_of(cq).get((flavor, res), 0) // unit
                cells.extend([labels[cq]] * n)
                if n:
                    used_labels.add(cq)
            capacity = self._capacity(flavor, res) // unit
            if capacity == 0 and not cells:
                continue
            cells.extend(["·"] * max(0, capacity - len(cells)))
            if len(cells) > 64:
                counts = ", ".join(f"{labels[c]} {self.sim.usage_of(c).get((flavor, res), 0) // unit}" for c in self.sim.cq_order)
                out.append(f"{flavor} ({capacity} {res}): {counts}, idle {cells.count('·')}")
                continue
            out.append(f"{flavor} ({capacity} {res}):")
            out.append("┌" + "┬".join("───" for _ in cells) + "┐")
            out.append("│" + "│".join(f" {c} " for c in cells) + "│")
            out.append("└" + "┴".join("───" for _ in cells) + "┘")
        if out:
            legend = "  ".join(f"{labels[cq]} = {cq}" for cq in self.sim.cq_order)
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


def _event_line(ev: dict[str, Any]) -> str:
    kind, job = ev["kind"], ev["job"]
    cq = ev.get("clusterQueue")
    if kind == "Admitted":
        flavors = ", ".join(f"{r}: {f}" for r, f in ev["flavors"].items())
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
