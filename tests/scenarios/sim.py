"""Running scenario files through the simulator and reading its JSON Lines output.

The tests in tests/test_quota_*.py assert on exactly what `gpuqueue simulate --output json`
prints (SIMULATE.md), so the helper renders through the same code path and parses the lines.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gpuqueue.extender.simulate.output import render
from gpuqueue.extender.simulate.scenario import load_scenario

HERE = Path(__file__).parent


@dataclass
class Run:
    lines: list[str]
    steps: list[dict[str, Any]]
    final: dict[str, Any]

    # -- events --------------------------------------------------------------------------
    def events(self, kind: str | None = None, job: str | None = None, at: float | None = None) -> list[dict[str, Any]]:
        out = []
        for step in self.steps:
            if at is not None and step["time"] != at:
                continue
            for ev in step["events"]:
                if kind is not None and ev["kind"] != kind:
                    continue
                if job is not None and ev.get("job") != job:
                    continue
                out.append({**ev, "time": step["time"]})
        return out

    def admissions(self, job: str) -> list[dict[str, Any]]:
        return self.events("Admitted", job)

    def admitted_at(self, at: float) -> list[str]:
        return [e["job"] for e in self.events("Admitted", at=at)]

    def preempted_at(self, at: float) -> list[tuple[str, str]]:
        return [(e["job"], e["reason"]) for e in self.events("Preempted", at=at)]

    def last_pending_message(self, job: str) -> str | None:
        msgs = [e["message"] for e in self.events("Pending", job)]
        return msgs[-1] if msgs else None

    def final_pending(self) -> dict[str, str]:
        return {p["job"]: p["message"] for p in self.final["pending"]}

    def usage_at(self, at: float) -> dict[str, Any]:
        for step in self.steps:
            if step["time"] == at:
                return step["usage"]
        raise KeyError(at)


def scenario_text(name: str) -> str:
    return (HERE / name).read_text(encoding="utf-8")


def run_text(text: str, until: float | None = None, source: str = "<test>") -> Run:
    buf = io.StringIO()
    rc = render(load_scenario(text, source), "json", until, None, buf)
    assert rc == 0
    lines = buf.getvalue().splitlines()
    parsed = [orjson.loads(ln) for ln in lines]
    assert "final" in parsed[-1], "the last line is the summary"
    return Run(lines=lines, steps=parsed[:-1], final=parsed[-1]["final"])


def run(name: str, until: float | None = None) -> Run:
    return run_text(scenario_text(name), until, name)
