"""Workloads of several pod sets (a JobSet's replicated jobs, a PyTorchJob's master and workers):
admitted all together or not at all, each pod set with its own flavor assignment, the pod sets
considered in order with what the earlier ones took counted (Kueue's flavorassigner), and Kueue's
message naming the pod set that does not fit. Table tests over the pure engine: each case a
starting state, an incoming workload and the exact outcome."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import (ClusterQueueSpec, FlavorSpec, LocalQueueSpec, PodSetSpec, PreemptionSpec,
                                           Quota, ResourceGroupSpec, WorkloadSpec)

GPU = "nvidia.com/gpu"
GH200 = FlavorSpec("gh200", (("nvidia.com/gpu.product", "GH200"),))
H100 = FlavorSpec("h100", (("nvidia.com/gpu.product", "H100"),))


def cq(name: str, quotas: dict[tuple[str, str], int], flavors=("gh200", "h100"), covered=(GPU,), cohort=None,
       preemption=PreemptionSpec()) -> ClusterQueueSpec:
    return ClusterQueueSpec(name, cohort, (ResourceGroupSpec(tuple(covered), tuple(flavors)),),
                            {fr: Quota(v) for fr, v in quotas.items()}, namespace_selector={},
                            preemption=preemption)


def ps(name: str, count: int, gpus: int = 0, cpu: int = 0, product: str | None = None) -> PodSetSpec:
    per_pod = {r: v for r, v in ((GPU, gpus), ("cpu", cpu)) if v}
    return PodSetSpec(name, count, per_pod, node_selector=((("nvidia.com/gpu.product", product),) if product else ()))


def workload(name: str, *pod_sets: PodSetSpec, queue: str = "lq", priority: int = 0) -> WorkloadSpec:
    return WorkloadSpec(f"ns/{name}", "ns", queue, tuple(pod_sets), priority=priority)


@dataclass
class Case:
    name: str
    queues: list[ClusterQueueSpec]
    running: list[WorkloadSpec]  # admitted first, in order
    incoming: WorkloadSpec
    admitted: dict[str, dict[str, str]] | None = None  # pod set -> resource -> flavor; None: not admitted
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # pod set -> resource -> its pods' usage
    message: str | None = None
    preempted: list[str] = field(default_factory=list)


CASES = [
    Case("each pod set gets its own flavor",
         [cq("cq", {("gh200", GPU): 4, ("h100", GPU): 8})], [],
         workload("js", ps("driver", 1, gpus=1), ps("workers", 8, gpus=1)),
         admitted={"driver": {GPU: "gh200"}, "workers": {GPU: "h100"}},
         usage={"driver": {GPU: 1}, "workers": {GPU: 8}}),
    Case("a pod set's nodeSelector picks its flavor, the other pod set takes the first that fits",
         [cq("cq", {("gh200", GPU): 8, ("h100", GPU): 8})], [],
         workload("ptj", ps("master", 1, gpus=1, product="H100"), ps("worker", 3, gpus=2)),
         admitted={"master": {GPU: "h100"}, "worker": {GPU: "gh200"}},
         usage={"master": {GPU: 1}, "worker": {GPU: 6}}),
    Case("all or nothing: the first pod set fits, the second does not, nothing is admitted",
         [cq("cq", {("gh200", GPU): 4}, flavors=("gh200",))], [workload("other", ps("main", 1, gpus=1))],
         workload("js", ps("driver", 1, gpus=1), ps("workers", 3, gpus=1)),
         message="couldn't assign flavors to pod set workers: insufficient unused quota for nvidia.com/gpu in flavor "
                 "gh200, 1 more needed"),
    Case("pod sets are considered in order, counting what the earlier ones took",
         [cq("cq", {("gh200", GPU): 4}, flavors=("gh200",))], [],
         workload("ptj", ps("master", 1, gpus=3), ps("worker", 1, gpus=2)),
         message="couldn't assign flavors to pod set worker: insufficient quota for nvidia.com/gpu in flavor gh200, "
                 "previously considered podsets requests (3) + current podset request (2) > maximum capacity (4)"),
    Case("two pod sets sharing one flavor: each pod set's usage is its own",
         [cq("cq", {("gh200", GPU): 8}, flavors=("gh200",))], [],
         workload("ptj", ps("master", 1, gpus=2), ps("worker", 3, gpus=2)),
         admitted={"master": {GPU: "gh200"}, "worker": {GPU: "gh200"}},
         usage={"master": {GPU: 2}, "worker": {GPU: 6}}),
    Case("a pod set asking for a resource the ClusterQueue does not cover is named",
         [cq("cq", {("gh200", GPU): 8}, flavors=("gh200",))], [],
         workload("ray", ps("head", 1, cpu=2000), ps("gpu-group", 2, gpus=4)),
         message="couldn't assign flavors to pod set head: resource cpu unavailable in ClusterQueue"),
    Case("a multi-pod-set workload reclaims from a borrower with every pod set's usage",
         [cq("team-a", {("gh200", GPU): 4}, flavors=("gh200",), cohort="flame",
             preemption=PreemptionSpec(reclaim_within_cohort="Any")),
          cq("team-c", {("gh200", GPU): 0}, flavors=("gh200",), cohort="flame")],
         [workload("c-1", ps("main", 1, gpus=2), queue="lq-c"), workload("c-2", ps("main", 1, gpus=2), queue="lq-c")],
         workload("js", ps("leader", 1, gpus=1), ps("workers", 1, gpus=2)),
         admitted={"leader": {GPU: "gh200"}, "workers": {GPU: "gh200"}},
         usage={"leader": {GPU: 1}, "workers": {GPU: 2}},
         preempted=["ns/c-2", "ns/c-1"]),
]


def engine_for(case: Case) -> QuotaEngine:
    e = QuotaEngine()
    for f in (GH200, H100):
        e.set_flavor(f)
    for q in case.queues:
        e.set_cluster_queue(q)
    e.set_local_queue(LocalQueueSpec("ns", "lq", case.queues[0].name))
    if len(case.queues) > 1:
        e.set_local_queue(LocalQueueSpec("ns", "lq-c", case.queues[1].name))
    for i, wl in enumerate(case.running):
        wl.created = float(i)
        e.submit(wl)
        e.schedule(float(i))
        assert e.is_admitted(wl.key), wl.key
    return e


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_multi_pod_set_admission(case):
    e = engine_for(case)
    before = {q.name: e.usage(q.name) for q in case.queues}
    case.incoming.created = 100.0
    e.submit(case.incoming)
    decisions = e.schedule(100.0)
    key = case.incoming.key
    assert [x.key for x in decisions if isinstance(x, d.Preempted)] == case.preempted
    if case.admitted is None:
        assert not e.is_admitted(key)
        assert e.pending_message(key) == case.message
        assert {q.name: e.usage(q.name) for q in case.queues} == before  # nothing taken, not even in part
        return
    admission = e.admission(key)
    assert admission.flavors == case.admitted
    assert {name: admission.usage_of(name) for name in case.admitted} == case.usage
    assert admission.counts == {p.name: p.count for p in case.incoming.pod_sets}
    total: dict[tuple[str, str], int] = {}
    for name, flavors in case.admitted.items():
        for res, v in case.usage[name].items():
            total[(flavors[res], res)] = total.get((flavors[res], res), 0) + v
    assert {fr: v for fr, v in admission.usage.items() if fr[1] != "pods"} == total


def test_a_single_pod_set_admission_read_without_a_per_pod_set_record_keeps_its_usage():
    from gpuqueue.extender.quota.model import Admission
    a = Admission("cq", {"main": {GPU: "gh200", "cpu": "default"}}, {("gh200", GPU): 4, ("default", "cpu"): 2000},
                  {"main": 2}, False)
    assert a.usage_of("main") == {GPU: 4, "cpu": 2000}
