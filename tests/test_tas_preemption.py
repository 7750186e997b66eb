"""Preemption for room on the nodes (Kueue's preemption with TAS): a workload that the quota would
take, but whose pods the nodes cannot hold now, evicts the fewest workloads its ClusterQueue's
policies allow whose going makes room for its topology - a lender reclaims its guarantee on a TAS
flavor though borrowers fill every node. Through the engine as the simulator drives it."""

from __future__ import annotations

from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.simulate.runner import Simulation
from gpuqueue.extender.simulate.scenario import load_scenario
from tests.test_simulate_tas import events, run

RACK = "example.com/rack"
REQUIRED = f"{{kueue.x-k8s.io/podset-required-topology: {RACK}}}"

WORLD = f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {{name: racks}}
spec: {{levels: [{{nodeLabel: {RACK}}}, {{nodeLabel: kubernetes.io/hostname}}]}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: gh200}}
spec: {{topologyName: racks}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: lender}}
spec:
  namespaceSelector: {{}}
  cohortName: pool
  preemption: {{reclaimWithinCohort: Any}}
  resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: gh200, resources: [{{name: nvidia.com/gpu, nominalQuota: 16}}]}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: borrower}}
spec:
  namespaceSelector: {{}}
  cohortName: pool
  resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: gh200, resources: [{{name: nvidia.com/gpu, nominalQuota: 0}}]}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: a, name: lq}}
spec: {{clusterQueue: lender}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: b, name: lq}}
spec: {{clusterQueue: borrower}}
"""

NODES = [f"r{r}-n{n}" for r in (0, 1) for n in (0, 1)]  # 2 racks x 2 nodes x 4 GPUs: 16 GPUs, the lender's quota


def node(name: str) -> str:
    return (f"apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}, "
            f"{RACK}: {name.split('-')[0]}}}}}\nstatus: {{allocatable: {{nvidia.com/gpu: \"4\"}}}}\n")


def submit(at: int, ns: str, name: str, gpus: int, pods: int = 1, count: int = 1, annotations: str = "") -> str:
    template_meta = f"metadata: {{annotations: {annotations}}}, " if annotations else ""
    return (f"- at: {at}\n  count: {count}\n  submit:\n    apiVersion: batch/v1\n    kind: Job\n"
            f"    metadata: {{namespace: {ns}, name: {name}, labels: {{kueue.x-k8s.io/queue-name: lq}}}}\n"
            f"    spec: {{parallelism: {pods}, template: {{{template_meta}spec: {{restartPolicy: Never, containers: "
            f"[{{name: w, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]}}}}}}\n")


def scenario(*submissions: str) -> str:
    return "---\n".join([WORLD, *(node(n) for n in NODES),
                         "apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n" + "".join(submissions)])


def preempted(lines: list[dict]) -> set[str]:
    return {e["job"] for s in lines if "events" in s for e in s["events"] if e["kind"] == "Preempted"}


def on(admitted: dict[str, dict], nodes: set[str], prefix: str = "b/") -> set[str]:
    return {k for k, e in admitted.items() if k.startswith(prefix) and set(e["nodes"]) <= nodes}


def test_a_lender_reclaims_a_whole_rack_from_borrowers_that_fill_every_node():
    lines = run(scenario(submit(0, "b", "borrow", 4, count=4), submit(10, "a", "train", 4, pods=2, annotations=REQUIRED)))
    admitted = events(lines, "Admitted")
    train = admitted["a/train-0"]
    racks = {n.split("-")[0] for n in train["nodes"]}
    assert len(racks) == 1 and sum(train["nodes"].values()) == 2
    rack = {n for n in NODES if n.split("-")[0] in racks}
    assert preempted(lines) == on(admitted, rack) and len(on(admitted, rack)) == 2  # those on the rack, no other


def test_the_victims_are_those_that_free_the_rack_not_those_the_quota_alone_would_pick():
    # Borrowers hold 14 GPUs in 2-GPU pods, rack r0 first; the lender then runs 2 GPUs itself on
    # rack r1. The quota needs any 4 borrowers gone (8 GPUs) and would take the 4 most recent (on
    # r1); the rack needs the 4 on r0, the oldest.
    lines = run(scenario(submit(0, "b", "borrow", 2, count=7), submit(1, "a", "own", 2),
                         submit(10, "a", "train", 4, pods=2, annotations=REQUIRED)))
    admitted = events(lines, "Admitted")
    assert set(admitted["a/own-0"]["nodes"]) <= {"r1-n0", "r1-n1"}
    assert set(admitted["a/train-0"]["nodes"]) == {"r0-n0", "r0-n1"}
    assert preempted(lines) == on(admitted, {"r0-n0", "r0-n1"}) == {f"b/borrow-{i}" for i in range(4)}


def test_on_a_placement_aware_flavor_too_the_lender_reclaims_whole_nodes():
    # gpuqueue's own placement-aware flavor (no Topology): 2-GPU borrowers fill every node; the
    # lender's two 4-GPU pods need two whole nodes, so the borrowers of two nodes go
    world = WORLD.replace("metadata: {name: gh200}\nspec: {topologyName: racks}",
                          "metadata: {name: gh200, annotations: {gpuqueue.io/placement-aware: \"true\"}}\nspec: {}")
    docs = "---\n".join([world, *(node(n) for n in NODES), "apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n"
                         + submit(0, "b", "borrow", 2, count=8) + submit(10, "a", "train", 4, pods=2)])
    lines = run(docs)
    admitted = events(lines, "Admitted")
    nodes = set(admitted["a/train-0"]["nodes"])
    assert len(nodes) == 2
    assert preempted(lines) == on(admitted, nodes) and len(on(admitted, nodes)) == 4


def test_no_preemption_when_no_victims_would_make_room():
    # three 4-GPU pods in one rack of two nodes: no eviction helps; the borrowers keep running
    docs = scenario(submit(0, "b", "borrow", 4, count=4), submit(10, "a", "train", 4, pods=3, annotations=REQUIRED))
    sim = Simulation(load_scenario(docs, "t.yaml"))
    list(sim.run())
    assert not sim.engine.preemption_count
    pending = sim.engine.pending["a/train-0"]
    assert pending.reason == d.TOPOLOGY_PLACEMENT_FAILED
    assert pending.message.startswith("couldn't assign flavors to pod set main: topology \"racks\"")


def test_a_queue_within_its_guarantee_is_not_a_victim_for_room_on_the_nodes():
    # 8 GPUs each. The borrower runs 6 within its guarantee (3 + 3 on rack r0), the lender 2 (on r1).
    # The quota takes the rack Job (borrowing 2), no rack has two free nodes, and reclaiming takes
    # only from queues that borrow: it waits, as Kueue's would, and nothing is evicted.
    world = WORLD.replace("nominalQuota: 16", "nominalQuota: 8").replace("nominalQuota: 0", "nominalQuota: 8")
    docs = "---\n".join([world, *(node(n) for n in NODES), "apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n"
                         + submit(0, "b", "borrow", 3, count=2) + submit(1, "a", "own", 2)
                         + submit(10, "a", "train", 4, pods=2, annotations=REQUIRED)])
    sim = Simulation(load_scenario(docs, "t.yaml"))
    list(sim.run())
    assert set(sim.engine.state.admitted) == {"b/borrow-0", "b/borrow-1", "a/own-0"}
    assert not sim.engine.preemption_count
    assert sim.engine.pending["a/train-0"].reason == d.TOPOLOGY_PLACEMENT_FAILED


# -- end to end: the controller on the API server stand-in, the extender over TLS, the stand-in kube-scheduler --

def cohort_world() -> list[dict]:
    from tests.test_tas_admission import KUEUE, GH200, GPU, NODES as TAS_NODES, TOPOLOGY, node as tas_node
    from tests.test_tas_admission import BLOCK, RACK as TAS_RACK

    def cq(name: str, gpus: int, **extra) -> dict:
        return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
            "namespaceSelector": {}, "cohortName": "pool", **extra, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                {"name": "gh200", "resources": [{"name": GPU, "nominalQuota": gpus}]}]}]}}

    def lq(ns: str, cluster_queue: str) -> dict:
        return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": "lq"},
                "spec": {"clusterQueue": cluster_queue}}

    return [TOPOLOGY, {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "gh200"},
                       "spec": {"nodeLabels": GH200, "topologyName": "default"}},
            cq("lender", 32, preemption={"reclaimWithinCohort": "Any"}), cq("borrower", 0),
            lq("team-a", "lender"), lq("team-b", "borrower"),
            *(tas_node(n, {BLOCK: b, TAS_RACK: r}) for n, b, r in TAS_NODES)]


async def test_end_to_end_the_lender_reclaims_a_block_and_its_pods_land_on_it(tmp_path):
    from tests.controller_support import eventually
    from tests.test_tas_admission import BLOCK, assignment, job, running

    def in_ns(j: dict, ns: str) -> dict:
        j["metadata"]["namespace"] = ns
        return j

    async with running(tmp_path, cohort_world()) as c:
        for i in range(8):  # 8 borrowed GPUs x 4: every node full
            await c.h.submit(in_ns(job(f"borrow-{i}", 1, 4), "team-b"))
        store = c.h.api.cluster.store

        def pods(ns: str, name: str) -> list[dict]:
            return [p for p in store.kind("pods").values() if p["metadata"]["namespace"] == ns
                    and (p["metadata"].get("labels") or {}).get("job-name") == name]

        def node_of(ns: str, name: str) -> set[str]:
            return {p["spec"].get("nodeName") for p in pods(ns, name)}

        await eventually(lambda: all(None not in node_of("team-b", f"borrow-{i}") and node_of("team-b", f"borrow-{i}")
                                     for i in range(8)), timeout=15, what="the borrowers' pods bound on every node")
        placed = {f"borrow-{i}": next(iter(node_of("team-b", f"borrow-{i}"))) for i in range(8)}

        await c.h.submit(job("train", 4, 4, {"kueue.x-k8s.io/podset-required-topology": BLOCK}))
        await eventually(lambda: c.condition("train", "Admitted").get("status") == "True", timeout=15,
                         what="the rack Job admitted by reclaiming a block")
        roots = assignment(c.h.workload_of("team-a", "train"))["slices"][0]["valuesPerLevel"][0]["roots"]
        block = roots[0].split("-")[0]
        assert sorted(roots) == sorted(n for n in placed.values() if n.startswith(block + "-"))
        # the borrowers on that block were suspended, the others run on
        evicted = {name for name in placed if c.h.job("team-b", name)["spec"].get("suspend")}
        assert evicted == {name for name, n in placed.items() if n.startswith(block + "-")}
        await eventually(lambda: len(pods("team-a", "train")) == 4 and None not in node_of("team-a", "train"),
                         timeout=15, what="the rack Job's 4 pods bound")
        assert node_of("team-a", "train") == set(roots)
