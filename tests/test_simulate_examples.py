"""The shared examples, checked the way the team checks them: simcheck over the JSON output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "extender" / "simulate" / "examples"
SIMCHECK = ROOT / "tests" / "tools" / "simcheck.py"


def gpuqueue_command(tmp_path: Path) -> str:
    """A `gpuqueue` executable for this interpreter, whether or not the package is installed."""
    script = tmp_path / "gq"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m gpuqueue \"$@\"\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("expect", sorted(p.name for p in EXAMPLES.glob("*.expect.yaml")))
def test_example_holds_its_expectations(expect: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, str(SIMCHECK), gpuqueue_command(tmp_path), str(EXAMPLES / expect)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    held, total = p.stdout.strip().splitlines()[-1].split()[0].split("/")
    assert held == total and int(total) > 5


def run_json(*args: str) -> list[dict]:
    p = subprocess.run([sys.executable, "-m", "gpuqueue", "simulate", "--output", "json", *args],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_default_run_is_the_bundled_flame_walkthrough() -> None:
    lines = run_json()
    assert [s["time"] for s in lines[:-1]] == [0.0, 100.0, 200.0]
    at100 = lines[1]["events"]
    preempted = [e for e in at100 if e["kind"] == "Preempted"]
    assert [(e["job"], e["reason"]) for e in preempted] == [
        ("team-c/c-4", "InCohortReclamation"), ("team-c/c-3", "InCohortReclamation")]
    # the preemption that makes room comes right before the admission it makes room for
    kinds = [(e["kind"], e["job"]) for e in at100]
    assert kinds.index(("Preempted", "team-c/c-4")) + 1 == kinds.index(("Admitted", "team-a/a-3"))
    # FLAME's 8 GPUs on two 4-GPU nodes are packed: node 1 fills before node 2 is used
    first = [e["nodes"] for e in lines[0]["events"] if e["kind"] == "Admitted"]
    assert first == [{"gh200-node-1": 1}] * 4 + [{"gh200-node-2": 1}] * 2


def test_text_output_draws_flame_figures() -> None:
    p = subprocess.run([sys.executable, "-m", "gpuqueue", "simulate"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "│ B │ B │ C │ C │ C │ C │ · │ · │" in out  # 1. borrowing idle capacity
    assert "│ A │ A │ A │ A │ B │ B │ C │ C │" in out  # 2. reclaim
    assert "A = group-a  B = group-b  C = group-c  · = idle" in out
    assert "Preempted    team-c/c-4 in group-c for team-a/a-3 (InCohortReclamation): suspended and requeued" in out


def test_same_scenario_same_bytes() -> None:
    a = subprocess.run([sys.executable, "-m", "gpuqueue", "simulate", "--output", "json",
                        str(EXAMPLES / "flame-fair-sharing.yaml")], capture_output=True, cwd=ROOT, timeout=60)
    b = subprocess.run([sys.executable, "-m", "gpuqueue", "simulate", "--output", "json",
                        str(EXAMPLES / "flame-fair-sharing.yaml")], capture_output=True, cwd=ROOT, timeout=60)
    assert a.returncode == 0 and a.stdout == b.stdout


def test_until_stops_the_timeline(tmp_path: Path) -> None:
    lines = run_json("--until", "150")
    assert [s["time"] for s in lines[:-1]] == [0.0, 100.0]
    assert lines[-1]["final"]["time"] == 150.0
    assert "team-a/a-1" in lines[-1]["final"]["admitted"]


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "usage.png"
    p = subprocess.run([sys.executable, "-m", "gpuqueue", "simulate", "--plot", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
