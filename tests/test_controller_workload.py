"""The pure pieces of the controller: Workload from a Job, admission both ways, conditions, the
pod template edits, queue status."""

from __future__ import annotations

from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.queues.status import cluster_queue_status, queue_counts, same_status
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import Admission, ClusterQueueSpec, FlavorSpec, Quota, ResourceGroupSpec
from gpuqueue.api.base import Toleration

JOB = {"metadata": {"namespace": "ml", "name": "train", "uid": "u-1",
                    "labels": {"kueue.x-k8s.io/queue-name": "default"}},
       "spec": {"parallelism": 3, "completions": 2, "suspend": True, "template": {"spec": {
           "nodeSelector": {"team": "ml"}, "containers": [{"name": "w", "image": "x"}]}}}}


def test_workload_from_job():
    wl = W.build_workload(JOB, 1000, {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}, "default")
    assert wl["metadata"]["name"] == W.workload_name("train", "u-1") and wl["metadata"]["name"].startswith("job-train-")
    assert W.workload_name("train", "u-2") != wl["metadata"]["name"]
    assert wl["metadata"]["ownerReferences"][0] == {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                                    "uid": "u-1", "controller": True, "blockOwnerDeletion": True}
    assert wl["spec"]["podSets"][0]["count"] == 2  # min(parallelism, completions)
    assert wl["spec"]["priority"] == 1000
    assert wl["spec"]["priorityClassRef"] == {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}
    assert wl["spec"]["queueName"] == "default"


def test_admission_round_trip():
    a = Admission("cq", {"main": {"cpu": "f1", "nvidia.com/gpu": "f2"}},
                  {("f1", "cpu"): 2500, ("f2", "nvidia.com/gpu"): 4}, {"main": 2}, False)
    status = W.admission_to_status(a)
    assert status == {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"cpu": "f1", "nvidia.com/gpu": "f2"},
         "resourceUsage": {"cpu": "2500m", "nvidia.com/gpu": "4"}, "count": 2}]}
    back = W.admission_from_status(status)
    assert (back.cluster_queue, back.flavors, back.usage, back.counts) == (a.cluster_queue, a.flavors, a.usage, a.counts)


def test_each_pod_set_of_an_admission_is_written_with_its_own_usage():
    """A JobSet's leader and workers on one flavor: each podSetAssignment carries what its own pods
    take (Kueue's resourceUsage), not the flavor's total - the extender enforces per-pod limits
    from it, and the controller compares a running workload's pods against it."""
    a = Admission("cq", {"leader": {"nvidia.com/gpu": "gh200"}, "workers": {"nvidia.com/gpu": "gh200"}},
                  {("gh200", "nvidia.com/gpu"): 9}, {"leader": 1, "workers": 4}, False,
                  pod_set_usage={"leader": {"nvidia.com/gpu": 1}, "workers": {"nvidia.com/gpu": 8}})
    status = W.admission_to_status(a)
    assert [(psa["name"], psa["resourceUsage"], psa["count"]) for psa in status["podSetAssignments"]] == [
        ("leader", {"nvidia.com/gpu": "1"}, 1), ("workers", {"nvidia.com/gpu": "8"}, 4)]
    back = W.admission_from_status(status)
    assert back.usage == a.usage and back.usage_of("leader") == {"nvidia.com/gpu": 1}
    assert W.admission_to_status(back) == status  # read back after a restart: written the same


def test_conditions_keep_their_transition_time_until_the_status_changes():
    conds = W.set_condition([], "QuotaReserved", "False", "Pending", "a", "t1")
    conds = W.set_condition(conds, "QuotaReserved", "False", "Pending", "b", "t2")
    assert conds[0]["lastTransitionTime"] == "t1" and conds[0]["message"] == "b"
    conds = W.set_condition(conds, "QuotaReserved", "True", "QuotaReserved", "c", "t3")
    assert conds[0]["lastTransitionTime"] == "t3"


def test_flavor_injection_and_restore():
    """Through the Job's integration, as the controller edits Jobs (managed_kinds.ManagedKind)."""
    from gpuqueue.jobframework.podset import PodSetInfo

    def run(job, flavors):
        return W.BATCH_JOB.run(job, {"main": PodSetInfo.from_flavors("main", flavors)})

    flavor = FlavorSpec("gh200", (("nvidia.com/gpu.product", "GH200"),),
                        tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),))
    admitted = run(JOB, [flavor])
    spec = admitted["spec"]["template"]["spec"]
    assert admitted["spec"]["suspend"] is False
    assert spec["nodeSelector"] == {"team": "ml", "nvidia.com/gpu.product": "GH200"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # admitted again (another flavor): starts from the Job's own template, not the injected one
    again = run(dict(admitted, spec=dict(admitted["spec"], suspend=True)), [FlavorSpec("h100", (("p", "h"),))])
    assert again["spec"]["template"]["spec"]["nodeSelector"] == {"team": "ml", "p": "h"}
    assert "tolerations" not in again["spec"]["template"]["spec"]
    restored = W.BATCH_JOB.restore(W.BATCH_JOB.suspend(admitted))
    assert restored["spec"]["template"] == JOB["spec"]["template"]
    assert W.ORIGINAL_SCHEDULING_ANNOTATION not in restored["metadata"]["annotations"]


def test_preemption_message_is_kueues():
    assert W.preemption_message("w", "j", "InClusterQueue", "/q", "/q") == (
        "Preempted to accommodate a workload (UID: w, JobUID: j) due to prioritization in the ClusterQueue; "
        "preemptor path: /q; preemptee path: /q")


def test_cluster_queue_status_with_a_missing_flavor():
    e = QuotaEngine()
    e.set_cluster_queue(ClusterQueueSpec("cq", resource_groups=(ResourceGroupSpec(("nvidia.com/gpu",), ("gone",)),),
                                         quotas={("gone", "nvidia.com/gpu"): Quota(4)}))
    status = cluster_queue_status(e, "cq", queue_counts(e).cq.get("cq"), {})
    active = status["conditions"][0]
    assert (active["status"], active["reason"]) == ("False", "FlavorNotFound")
    assert active["message"] == "Can't admit new workloads: references missing ResourceFlavor(s): [gone]."
    assert status["flavorsReservation"] == [{"name": "gone", "resources": [
        {"name": "nvidia.com/gpu", "total": "0", "borrowed": "0"}]}]
    assert same_status(status, dict(status, conditions=[dict(active, lastTransitionTime="later")]))


def test_cluster_queue_status_publishes_the_weighted_share_under_fair_sharing():
    from gpuqueue.extender.quota.fairsharing import FairSharing
    from gpuqueue.extender.quota.model import CohortSpec, LocalQueueSpec, PodSetSpec, WorkloadSpec

    e = QuotaEngine(fair_sharing=FairSharing())
    e.set_flavor(FlavorSpec("gh200"))
    e.set_cohort(CohortSpec("pool", quotas={("gh200", "nvidia.com/gpu"): Quota(8)}))
    for name in ("a", "b"):
        e.set_cluster_queue(ClusterQueueSpec(name, cohort="pool", namespace_selector={},
                                             resource_groups=(ResourceGroupSpec(("nvidia.com/gpu",), ("gh200",)),),
                                             quotas={("gh200", "nvidia.com/gpu"): Quota(0)}))
        e.set_local_queue(LocalQueueSpec(name, "lq", name))
    e.submit(WorkloadSpec("a/j", "a", "lq", (PodSetSpec("main", 1, {"nvidia.com/gpu": 2}),)))
    e.schedule(0.0)
    status = cluster_queue_status(e, "a", queue_counts(e).cq.get("a"), {})
    assert status["fairSharing"] == {"weightedShare": 250}  # 2 of 8 lendable GPUs borrowed
    assert cluster_queue_status(e, "b", queue_counts(e).cq.get("b"), {})["fairSharing"] == {"weightedShare": 0}
    assert "fairSharing" not in cluster_queue_status(QuotaEngine(), "a", None, {})


def test_the_weighted_share_metric_names_the_cohort_as_kueues_does():
    """Kueue v0.14+: kueue_cluster_queue_weighted_share{cluster_queue, cohort}."""
    from gpuqueue.extender.controller.serving.metrics import Metrics
    from gpuqueue.extender.quota.fairsharing import FairSharing
    from gpuqueue.extender.quota.model import CohortSpec, LocalQueueSpec, PodSetSpec, WorkloadSpec

    e = QuotaEngine(fair_sharing=FairSharing())
    e.set_flavor(FlavorSpec("gh200"))
    e.set_cohort(CohortSpec("pool", quotas={("gh200", "nvidia.com/gpu"): Quota(8)}))
    e.set_cluster_queue(ClusterQueueSpec("a", cohort="pool", namespace_selector={},
                                         resource_groups=(ResourceGroupSpec(("nvidia.com/gpu",), ("gh200",)),),
                                         quotas={("gh200", "nvidia.com/gpu"): Quota(0)}))
    e.set_local_queue(LocalQueueSpec("a", "lq", "a"))
    e.submit(WorkloadSpec("a/j", "a", "lq", (PodSetSpec("main", 1, {"nvidia.com/gpu": 2}),)))
    e.schedule(0.0)
    m = Metrics(local_queue_metrics=False)
    m.update(e, queue_counts(e), [])
    share = m.registry.get_sample_value("kueue_cluster_queue_weighted_share", {"cluster_queue": "a", "cohort": "pool"})
    assert share == e.fair_sharing.share(e.state.cq_nodes["a"]) and share > 0
