"""TAS and flavor fungibility (issue 25, part 3), through the engine as the simulator drives it:
a pod set is matched to a flavor as Kueue matches it for TAS (one that asks for a topology skips
flavors without one, one that asks for none skips TAS flavors unless the ClusterQueue has only
those), and when the chosen flavor's nodes do not hold the pods the search resumes at the next
flavor of the resource group, as Kueue's next scheduling cycle does (LastTriedFlavorIdx). When no
flavor holds them the workload waits with the last one's message and Kueue's reason
TopologyPlacementFailed, which the controller writes on the Workload."""

from __future__ import annotations

from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.simulate.runner import Simulation
from gpuqueue.extender.simulate.scenario import load_scenario
from tests.controller_support import eventually
from tests.test_simulate_tas import events, run
from tests.test_tas_admission import RACK as CLOUD_RACK, TAS_WORLD, job as cluster_job, running

RACK = "example.com/rack"
REQUIRED = f"kueue.x-k8s.io/podset-required-topology: {RACK}"


def flavor(name: str, topology: str | None) -> str:
    spec = f"nodeLabels: {{pool: {name}}}" + (f", topologyName: {topology}" if topology else "")
    return f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: {name}}}\nspec: {{{spec}}}\n"


def topology(name: str) -> str:
    return (f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {{name: {name}}}\n"
            f"spec: {{levels: [{{nodeLabel: {RACK}}}, {{nodeLabel: kubernetes.io/hostname}}]}}\n")


def queue(*flavors: str) -> str:
    entries = ", ".join(f"{{name: {f}, resources: [{{name: nvidia.com/gpu, nominalQuota: 32}}]}}" for f in flavors)
    return (f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  namespaceSelector: {{}}\n"
            f"  resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{entries}]}}]\n---\n"
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {namespace: ns, name: lq}\nspec: {clusterQueue: cq}\n")


def nodes(pool: str, racks: int, per_rack: int) -> list[str]:
    out = []
    for r in range(racks):
        for n in range(per_rack):
            name = f"{pool}-r{r}-n{n}"
            out.append(f"apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}, "
                       f"{RACK}: {pool}-r{r}, pool: {pool}}}}}\nstatus: {{allocatable: {{nvidia.com/gpu: \"4\"}}}}\n")
    return out


def job(name: str, pods: int, annotation: str = "") -> str:
    ann = f"metadata: {{annotations: {{{annotation}}}}}, " if annotation else ""
    return (f"apiVersion: batch/v1\nkind: Job\nmetadata: {{namespace: ns, name: {name}, labels: {{kueue.x-k8s.io/queue-name: lq}}}}\n"
            f"spec: {{parallelism: {pods}, template: {{{ann}spec: {{restartPolicy: Never, containers: "
            f"[{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 4}}}}}}]}}}}}}\n")


def test_a_job_whose_first_flavors_racks_are_too_small_is_admitted_on_the_next_flavor():
    lines = run(topology("small"), topology("big"), flavor("small", "small"), flavor("big", "big"), queue("small", "big"),
                *nodes("small", 4, 2), *nodes("big", 1, 4), job("train", 4, REQUIRED))
    ev = events(lines, "Admitted")["ns/train"]
    assert ev["flavors"] == {"nvidia.com/gpu": "big"}
    assert ev["nodes"] == {f"big-r0-n{i}": 1 for i in range(4)}
    assert "ns/train" not in events(lines, "Pending")  # the fallback is within the pass, as Kueue's at-once requeue


def test_when_no_flavor_holds_it_the_last_ones_message_and_kueues_reason():
    docs = [topology("a"), topology("b"), flavor("a", "a"), flavor("b", "b"), queue("a", "b"),
            *nodes("a", 2, 2), *nodes("b", 2, 3), job("train", 4, REQUIRED)]
    sim = Simulation(load_scenario("---\n".join(docs), "t.yaml"))
    list(sim.run())
    pending = sim.engine.pending["ns/train"]
    assert pending.message == ('couldn\'t assign flavors to pod set main: topology "b" allows to fit only 3 out of 4 pod(s)')
    assert pending.reason == d.TOPOLOGY_PLACEMENT_FAILED


def test_a_pod_set_that_asks_for_a_topology_skips_a_flavor_without_one():
    lines = run(topology("t"), flavor("plain", None), flavor("tas", "t"), queue("plain", "tas"),
                *nodes("plain", 1, 4), *nodes("tas", 1, 4), job("train", 2, REQUIRED))
    ev = events(lines, "Admitted")["ns/train"]
    assert ev["flavors"] == {"nvidia.com/gpu": "tas"} and "topologyAssignment" in ev


def test_a_pod_set_that_asks_for_none_skips_a_tas_flavor_unless_every_flavor_is_one():
    lines = run(topology("t"), flavor("tas", "t"), flavor("plain", None), queue("tas", "plain"),
                *nodes("plain", 1, 4), *nodes("tas", 1, 4), job("plain-job", 2))
    ev = events(lines, "Admitted")["ns/plain-job"]
    assert ev["flavors"] == {"nvidia.com/gpu": "plain"} and "topologyAssignment" not in ev
    only = run(topology("t"), flavor("tas", "t"), queue("tas"), *nodes("tas", 1, 4), job("plain-job", 2))
    assert "topologyAssignment" in events(only, "Admitted")["ns/plain-job"]  # implied: placed as unconstrained


def test_kueues_words_when_no_flavor_matches_the_request():
    lines = run(topology("t"), flavor("plain", None), queue("plain"), *nodes("plain", 1, 4), job("train", 2, REQUIRED))
    assert events(lines, "Pending")["ns/train"]["message"] == (
        'couldn\'t assign flavors to pod set main: Flavor "plain" does not support TopologyAwareScheduling')
    lines = run(topology("t"), flavor("tas", "t"), queue("tas"), *nodes("tas", 1, 4),
                job("train", 2, "kueue.x-k8s.io/podset-required-topology: example.com/block"))
    assert events(lines, "Pending")["ns/train"]["message"] == (
        'couldn\'t assign flavors to pod set main: Flavor "tas" does not contain the requested level')


async def test_the_controller_writes_kueues_reason_on_the_workload(tmp_path):
    async with running(tmp_path, TAS_WORLD, scheduler=False) as c:
        await c.h.submit(cluster_job("rack", 4, 4, {"kueue.x-k8s.io/podset-required-topology": CLOUD_RACK}))
        await eventually(lambda: c.condition("rack", "QuotaReserved").get("reason") == d.TOPOLOGY_PLACEMENT_FAILED,
                         what="QuotaReserved=False with reason TopologyPlacementFailed")
        cond = c.condition("rack", "QuotaReserved")
        assert cond["status"] == "False"
        assert cond["message"] == 'couldn\'t assign flavors to pod set main: topology "default" allows to fit only 2 out of 4 pod(s)'
