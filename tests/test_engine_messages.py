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
