"""Kueue's pending messages, word for word (pkg/controller/core/workload_controller.go,
pkg/scheduler/scheduler.go nominate, pkg/scheduler/flavorassigner/flavorassigner.go)."""

from tests.scenarios.sim import run

MSG = "couldn't assign flavors to pod set main: "


def test_pending_messages():
    r = run("messages.yaml")
    assert r.final_pending() == {
        "ns/no-lq": "LocalQueue missing doesn't exist",
        "ns/inactive": "ClusterQueue cq-missing-flavor is inactive",
        "ns/ghost": "ClusterQueue cq-ghost doesn't exist",
        "ns/uncovered": MSG + "resource cpu unavailable in ClusterQueue",
        "ns/too-big": MSG + "insufficient quota for cpu in flavor default, previously considered podsets requests (0) + "
        "current podset request (7) > maximum capacity (6)",
        "ns/mem-2": MSG + "insufficient unused quota for cpu in flavor default, 500m more needed, "
        "insufficient unused quota for memory in flavor default, 512Gi more needed",
    }
    assert r.admitted_at(0.0) == ["ns/mem-1"]


def test_pending_event_leaves_out_the_cluster_queue_of_a_missing_local_queue():
    r = run("messages.yaml")
    (ev,) = r.events("Pending", "ns/no-lq")
    assert "clusterQueue" not in ev
    assert r.events("Pending", "ns/ghost")[0]["clusterQueue"] == "cq-ghost"


def test_workloads_equivalent_to_one_that_failed_are_not_evaluated():
    r = run("equivalent-workloads.yaml")
    quota = MSG + "insufficient unused quota for cpu in flavor default, 1 more needed"
    pending = {(e["time"], e["job"]): e["message"] for e in r.events("Pending")}
    assert pending == {
        (0.0, "ns/b"): quota,
        (0.0, "ns/c"): "Workload is pending evaluation in the scheduling queue",
        (5.0, "ns/d"): "Bypassed scheduling evaluation because an equivalent workload recently failed",
        (5.0, "ns/e"): MSG + "insufficient unused quota for cpu in flavor default, 500m more needed",
        (100.0, "ns/c"): quota,  # at the head now: judged
        (110.0, "ns/d"): quota,
    }


def test_condition_reasons_of_workloads_not_evaluated():
    # The Workload's QuotaReserved=False reason: the judged head's (WaitingForQuota), Kueue's
    # PendingEvaluation for one created with it, the failed head's for a bypassed one.
    from gpuqueue.extender.quota import decisions as d
    from tests.strategies.quota_oracle import run_history
    from tests.strategies.quota_world import Q, QueueW, Submit, World

    world = World(flavors=("f0",), cohorts=(), queues=(QueueW("cq-0", None, ((("cpu",), ("f0",)),), (Q("f0", "cpu", 1),)),))
    run = run_history(world, [Submit(queue=0, copies=3), Submit(queue=0, copies=1)])
    reasons = [(dec.key, dec.reason, dec.message) for step in run.steps for dec in step if isinstance(dec, d.Pending)]
    assert [(k, r) for k, r, _ in reasons] == [
        ("a/job-1", "WaitingForQuota"), ("a/job-2", "PendingEvaluation"), ("a/job-3", "WaitingForQuota")]
    assert reasons[2][2] == d.BYPASSED
