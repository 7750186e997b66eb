"""Kueue's deactivation (Workload spec.active false) in the engine: an admitted workload is evicted
with reason Deactivated and gives its quota back; a pending one leaves its queue; neither is admitted
until reactivated, when it is queued again at its deactivation time."""

import pytest

from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import (ClusterQueueSpec, FlavorSpec, LocalQueueSpec, PodSetSpec, Quota,
                                           ResourceGroupSpec, WorkloadSpec)

GPU = "nvidia.com/gpu"


def _engine() -> QuotaEngine:
    e = QuotaEngine()
    e.set_flavor(FlavorSpec("gpu"))
    e.set_cluster_queue(ClusterQueueSpec("cq", namespace_selector={},
                                         resource_groups=(ResourceGroupSpec((GPU,), ("gpu",)),),
                                         quotas={("gpu", GPU): Quota(4)}))
    e.set_local_queue(LocalQueueSpec("ns", "lq", "cq"))
    return e


def _submit(e: QuotaEngine, name: str, gpus: int, created: float) -> None:
    e.submit(WorkloadSpec(f"ns/{name}", "ns", "lq", (PodSetSpec("main", 1, {GPU: gpus}),), created=created))


def _admitted(decisions) -> list[str]:
    return [x.key for x in decisions if isinstance(x, d.Admitted)]


# Each case: what runs first (name, GPUs), what is submitted after, the workload deactivated, and
# the outcome: the decision deactivate() returns, what the next pass admits, what is then held out;
# after reactivation, what the pass after that admits.
CASES = [
    pytest.param([("a", 4)], [("b", 4)], "a",
                 d.Evicted("ns/a", "cq", "Deactivated", "The workload is deactivated"), ["ns/b"], ["ns/a"], [],
                 id="admitted: evicted with reason Deactivated, its quota goes to the pending one"),
    pytest.param([("a", 4)], [("b", 4)], "b", None, [], ["ns/b"], [],
                 id="pending: taken out of the queue, never admitted while inactive"),
    pytest.param([("a", 4)], [], "a",
                 d.Evicted("ns/a", "cq", "Deactivated", "The workload is deactivated"), [], ["ns/a"], ["ns/a"],
                 id="admitted alone: not requeued while inactive, admitted again once reactivated"),
]


@pytest.mark.parametrize("first, later, target, evicted, admitted_next, held_out, admitted_after", CASES)
def test_deactivation(first, later, target, evicted, admitted_next, held_out, admitted_after):
    e = _engine()
    for i, (name, gpus) in enumerate(first):
        _submit(e, name, gpus, float(i))
    assert _admitted(e.schedule(10.0)) == [f"ns/{n}" for n, _ in first]
    for i, (name, gpus) in enumerate(later):
        _submit(e, name, gpus, 10.0 + i)
    e.schedule(11.0)
    assert e.deactivate(f"ns/{target}", 20.0) == evicted
    assert e.deactivate(f"ns/{target}", 21.0) is None  # once only
    assert _admitted(e.schedule(22.0)) == admitted_next
    assert sorted(e.inactive) == held_out and all(e.is_inactive(k) for k in held_out)
    assert f"ns/{target}" not in e.pending and not e.is_admitted(f"ns/{target}")
    assert _admitted(e.schedule(23.0)) == []  # nothing frees it by itself
    assert e.reactivate(f"ns/{target}")
    assert _admitted(e.schedule(24.0)) == admitted_after
    assert not e.is_inactive(f"ns/{target}")


def test_a_requeue_while_inactive_is_held_out_too():
    # A path that hands the workload back (a resubmission after the API refused a change, an
    # eviction) keeps it out of the queue while inactive.
    e = _engine()
    _submit(e, "a", 1, 0.0)
    e.deactivate("ns/a", 1.0)
    e.delete("ns/a")  # forgotten with its deactivation (its Workload is gone)
    assert not e.is_inactive("ns/a")
    e.deactivate("ns/b", 2.0)  # not known yet: inactive when it comes
    _submit(e, "b", 1, 3.0)
    assert _admitted(e.schedule(4.0)) == [] and "ns/b" in e.inactive and "ns/b" not in e.pending
    assert e.reactivate("ns/b") and _admitted(e.schedule(5.0)) == ["ns/b"]
    assert not e.reactivate("ns/b")  # active already


def test_a_reactivated_workload_queues_at_its_deactivation_time():
    e = _engine()
    _submit(e, "a", 4, 0.0)
    e.schedule(1.0)
    _submit(e, "b", 4, 2.0)
    _submit(e, "c", 4, 5.0)
    e.schedule(6.0)
    e.deactivate("ns/b", 7.0)  # b, created before c, comes back behind it
    e.reactivate("ns/b")
    e.finish("ns/a")
    assert _admitted(e.schedule(8.0)) == ["ns/c"]
