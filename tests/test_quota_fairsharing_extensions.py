"""gpuqueue's opt-in fair-sharing extensions: usage history with a half-life, and a minimum
admitted time before a borrower can be preempted to even out shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuqueue.extender.simulate.runner import Simulation
from gpuqueue.extender.simulate.scenario import ScenarioError, load_scenario

EXAMPLES = Path(__file__).resolve().parent.parent / "extender" / "simulate" / "examples"

POOL = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
{extra}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gh200}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: pool}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: gh200, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}]
""" + "".join(f"""---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {q}}}
spec:
  cohortName: pool
  namespaceSelector: {{}}
  preemption: {{reclaimWithinCohort: Any}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: gh200, resources: [{{name: nvidia.com/gpu, nominalQuota: 0}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: {q}, name: default}}
spec: {{clusterQueue: {q}}}
""" for q in ("x", "y"))


def job(ns: str, name: str, runtime: int | None = None) -> str:
    ann = f", annotations: {{gpuqueue.io/runtime-seconds: '{runtime}'}}" if runtime else ""
    return (f"{{apiVersion: batch/v1, kind: Job, metadata: {{namespace: {ns}, name: {name}{ann}}}, spec: {{template: "
            f"{{spec: {{restartPolicy: Never, containers: [{{name: w, image: i, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}}}}}}}")


def scenario(extra: str, events: list[str]) -> str:
    return POOL.replace("{extra}", extra) + "---\napiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n" + "".join(events)


def run(text: str) -> tuple[list, dict]:
    sim = Simulation(load_scenario(text))
    steps = list(sim.run())
    return steps, sim.summary(steps[-1].time)["final"]


def running_at(steps, t: float) -> dict[str, set[str]]:
    running: dict[str, str] = {}
    for s in steps:
        if s.time > t:
            break
        for e in s.events:
            if e["kind"] == "Admitted":
                running[e["job"]] = e["clusterQueue"]
            elif e["kind"] in ("Preempted", "Finished", "Deleted"):
                running.pop(e["job"], None)
    out: dict[str, set[str]] = {}
    for j, cq in running.items():
        out.setdefault(cq, set()).add(j)
    return out


# x borrows the whole pool for 1000 s; at 1000 both queues ask for all of it at once.
BURST = [f"- at: 0\n  submit: {job('x', f'old-{i}', 1000)}\n" for i in range(4)] + [
    f"- at: 1000\n  submit: {job(ns, f'{ns}-{i}')}\n" for i in range(4) for ns in ("x", "y")
]


def test_without_history_the_pool_is_split_evenly() -> None:
    steps, _ = run(scenario("", BURST))
    at = running_at(steps, 1000)
    assert len(at["x"]) == 2 and len(at["y"]) == 2


def test_usage_history_favours_the_queue_that_was_idle() -> None:
    steps, _ = run(scenario("  usageHalfLifeTime: 1000s", BURST))
    at = running_at(steps, 1000)
    # x's recent borrowing (half of 4 GPUs after one half-life) counts against it
    assert len(at["y"]) == 3 and len(at["x"]) == 1


def test_history_fades_with_the_half_life() -> None:
    late = [e.replace("at: 1000", "at: 20000") for e in BURST]
    steps, _ = run(scenario("  usageHalfLifeTime: 1000s", late))
    at = running_at(steps, 20000)
    assert len(at["x"]) == 2 and len(at["y"]) == 2  # 19 half-lives later x is a newcomer again


def flame_fair(extra: str, tail: str = "") -> str:
    text = (EXAMPLES / "flame-fair-sharing.yaml").read_text()
    text = text.replace("  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]\n",
                        f"  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]\n{extra}")
    return text + tail


def test_minimum_admitted_time_spares_fresh_borrowers_then_rebalances() -> None:
    steps, final = run(flame_fair("  minimumAdmittedTime: 300s\n"))
    times = [s.time for s in steps]
    assert 300.0 in times  # the engine wakes up when the protection ends, without any event
    at100 = next(s for s in steps if s.time == 100.0)
    assert not [e for e in at100.events if e["kind"] == "Preempted"]
    at300 = next(s for s in steps if s.time == 300.0)
    preempted = [e for e in at300.events if e["kind"] == "Preempted"]
    assert len(preempted) == 3 and {e["reason"] for e in preempted} == {"InCohortFairSharing"}
    at = running_at(steps, 300)
    assert len(at["group-c"]) == 3 and len(at["group-d"]) == 3 and len(at["group-b"]) == 2
    assert final["preemptions"] == 3


def test_minimum_admitted_time_off_is_kueue_behaviour() -> None:
    steps, final = run(flame_fair(""))
    at100 = next(s for s in steps if s.time == 100.0)
    assert len([e for e in at100.events if e["kind"] == "Preempted"]) == 3


@pytest.mark.parametrize("field, value", [("usageHalfLifeTime", "a week"), ("minimumAdmittedTime", "-5m")])
def test_bad_durations_are_named(field: str, value: str) -> None:
    with pytest.raises(ScenarioError, match=f"fairSharing.{field}"):
        load_scenario(scenario(f"  {field}: '{value}'", []))
