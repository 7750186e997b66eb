"""Priority and queue order, queueing strategies, namespaceSelector, stopPolicy
(Kueue docs: concepts/cluster_queue.md "Queueing strategy", "Namespace selector", "StopPolicy";
concepts/workload_priority_class.md)."""

from tests.scenarios.sim import run

MSG = "couldn't assign flavors to pod set main: "


def test_priority_sources_and_fifo_order():
    r = run("priority-order.yaml")
    order = [(e["time"], e["job"]) for e in r.events("Admitted")]
    assert order == [
        (0.0, "ns/blocker"),
        (10.0, "ns/high"),  # WorkloadPriorityClass label, 100
        (20.0, "ns/mid"),  # pod PriorityClass, 50
        (30.0, "ns/low"),  # neither: 0
        (40.0, "ns/low-later"),  # 0, created later
        (50.0, "ns/neg"),  # WorkloadPriorityClass -5
        (60.0, "ns/both"),  # the label (-5) wins over the PriorityClass (50); created after neg
    ]


def test_preempted_workload_requeued_at_its_eviction_time():
    r = run("requeue-at-eviction.yaml")
    assert r.preempted_at(10.0) == [("ns/low-a", "InClusterQueue")]
    assert [(e["time"], e["job"]) for e in r.events("Admitted")] == [
        (0.0, "ns/low-a"), (10.0, "ns/high"), (20.0, "ns/low-b"), (30.0, "ns/low-a")
    ]


def test_strict_fifo_head_blocks_smaller_workloads():
    r = run("strict-fifo.yaml")
    assert [(e["time"], e["job"]) for e in r.events("Admitted")] == [
        (0.0, "ns/blocker"), (10.0, "ns/big"), (20.0, "ns/small")
    ]


def test_best_effort_fifo_lets_smaller_workloads_pass():
    r = run("best-effort-fifo.yaml")
    assert [(e["time"], e["job"]) for e in r.events("Admitted")] == [
        (0.0, "ns/blocker"), (2.0, "ns/small"), (12.0, "ns/big")
    ]


def test_namespace_selector_including_a_missing_one():
    r = run("namespace-selector.yaml")
    assert sorted(r.admitted_at(0.0)) == ["ns-a/a", "undeclared/u"]
    mismatch = "workload namespace doesn't match ClusterQueue selector"  # Kueue v0.18's wording
    # no namespaceSelector at all is Kueue's "nothing" selector (no namespace eligible)
    assert r.final_pending() == {"ns-b/b": mismatch, "ns-a/nil": mismatch}
    assert {e["job"]: e["clusterQueue"] for e in r.events("Pending")} == {"ns-b/b": "cq", "ns-a/nil": "cq-nil"}


def _stop_policy_timeline(name: str, inactive: str, reason: str, message: str) -> None:
    r = run(name)
    assert r.admitted_at(0.0) == ["ns/running"]
    # Hold: what runs keeps running, nothing new is admitted
    assert r.events("Evicted", at=5.0) == [] and r.events("Evicted", at=6.0) == []
    assert r.events("Pending", "ns/held") == [{"kind": "Pending", "job": "ns/held", "clusterQueue": "cq", "message": inactive, "time": 6.0}]
    # HoldAndDrain: what runs is evicted (not failed) and waits
    (ev,) = r.events("Evicted")
    assert (ev["time"], ev["job"], ev["reason"], ev["message"]) == (10.0, "ns/running", reason, message)
    assert r.usage_at(10.0) == {"cq": {}}
    # back to None: both admitted
    assert sorted(r.admitted_at(20.0)) == ["ns/held", "ns/running"]
    assert r.final["pending"] == []


def test_cluster_queue_stop_policy():
    _stop_policy_timeline("stop-policy-clusterqueue.yaml", "ClusterQueue cq is inactive", "ClusterQueueStopped", "The ClusterQueue is stopped")


def test_local_queue_stop_policy():
    _stop_policy_timeline("stop-policy-localqueue.yaml", "LocalQueue lq is inactive", "LocalQueueStopped", "The LocalQueue is stopped")
