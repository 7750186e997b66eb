"""`gpuqueue simulate` at the command line: byte-identical output run after run, and the exit-2
contract for invalid scenarios (SIMULATE.md)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scenarios.sim import HERE, run

ROOT = Path(__file__).resolve().parent.parent


def simulate(path: str, hash_seed: str = "0", stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, "-m", "gpuqueue", "simulate", path, "--output", "json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, input=stdin, timeout=60)


def test_same_scenario_twice_gives_identical_bytes():
    # different hash seeds: no set or dict ordering may leak into the output
    scenario = str(HERE / "reclaim-within-cohort.yaml")
    a, b = simulate(scenario, "1"), simulate(scenario, "2")
    assert a.returncode == b.returncode == 0
    assert a.stdout.count("\n") >= 3
    assert a.stdout.splitlines() == b.stdout.splitlines()
    assert a.stderr == b.stderr == ""


def test_fair_sharing_run_is_deterministic_in_process():
    assert run("fair-hierarchy.yaml").lines == run("fair-hierarchy.yaml").lines


JOB = """apiVersion: batch/v1
kind: Job
metadata: {namespace: ns, name: j, labels: {kueue.x-k8s.io/queue-name: lq}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}}
"""
FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n"


@pytest.mark.parametrize("text, must_name", [
    ("kind: [unclosed\n", ["not valid YAML", "line 2, column 1"]),
    (FLAVOR + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Queue\nmetadata: {name: q}\n",
     ["document 2", "kind", "Queue"]),
    (FLAVOR + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {namespace: ns, name: lq}\nspec: {}\n",
     ["document 2", "LocalQueue ns/lq", "clusterQueue"]),
    (FLAVOR + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n"
     "  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - name: default\n"
     "      resources: [{name: cpu, nominalQuota: 12QQ}]\n",
     ["document 2", "ClusterQueue cq", "nominalQuota"]),
    pytest.param(
        JOB + "---\napiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n- {at: 5, finish: ns/never}\n",
        ["document 2", "events[0].finish", "ns/never"],
        id="finish-never-submitted"),
])
def test_invalid_scenario_exits_2_with_one_line(tmp_path, text, must_name):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    res = simulate(str(path))
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    for needle in must_name:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in res.stderr
