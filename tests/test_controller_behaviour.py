"""The controller against the stand-in: the Together guide, inactive queues, pod templates on
1.24 and later, watch expiry, conflicts."""

from __future__ import annotations




from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from tests.standin import resources as R
from tests.controller_support import Harness, eventually, scenario

GUIDE_MESSAGE = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
                 "gpu-flavor, 4 more needed")


def gpu_job(ns: str, name: str, gpus: int = 1, queue: str = "default", priority_class: str | None = None) -> dict:
    spec = {"restartPolicy": "Never",
            "containers": [{"name": "w", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": ns, "name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"template": {"spec": spec}}}


def writes_to(h: Harness, ns: str, wl_name: str) -> list:
    return [w for w in h.writes if w.resource is R.WORKLOADS and w.namespace == ns and w.name == wl_name]


async def test_together_guide_walkthrough():
    objects, jobs, later = scenario("together-quota.yaml")
    async with Harness() as h:
        h.writes = []
        h.api.observe(h.writes.append)
        for obj in objects:
            await h.apply(obj)
        await h.controller()
        await h.submit(jobs[0])
        await eventually(lambda: h.running("default", "gpu-job-a"), what="gpu-job-a admitted")
        await h.submit(later[0])
        await eventually(lambda: W.condition(h.workload_of("default", "gpu-job-b"), "QuotaReserved") is not None,
                         what="gpu-job-b evaluated")
        # kubectl get "$WORKLOAD" -o jsonpath='{.status.conditions[?(@.type=="QuotaReserved")].message}'
        reserved = W.condition(h.workload_of("default", "gpu-job-b"), "QuotaReserved")
        assert reserved["message"] == GUIDE_MESSAGE
        assert reserved["status"] == "False" and reserved["reason"] == "WaitingForQuota"
        assert h.job("default", "gpu-job-b")["spec"]["suspend"] is True

        # the message is written once, not on every pass
        wl_b = h.workload_of("default", "gpu-job-b")["metadata"]["name"]
        before = len(writes_to(h, "default", wl_b))
        for i in range(3):
            await h.submit(gpu_job("default", f"other-{i}", gpus=5, queue="gpu-queue"))
        await eventually(lambda: all(W.condition(h.workload_of("default", f"other-{i}"), "QuotaReserved")
                                     for i in range(3)), what="others evaluated")
        assert len(writes_to(h, "default", wl_b)) == before

        # delete the first job: the queued one is admitted by itself
        wl_a = h.workload_of("default", "gpu-job-a")["metadata"]["name"]
        await h.kube.delete(K.JOBS, "default", "gpu-job-a")
        await eventually(lambda: h.running("default", "gpu-job-b"), what="gpu-job-b admitted after the delete")
        assert h.api.cluster.store.get(R.WORKLOADS.storage_key, ("default", wl_a)) is None
        wl = h.workload_of("default", "gpu-job-b")
        assert W.condition(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue gpu-cluster-queue"
        assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {
            "cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "6"}
        cq = h.cluster_queue("gpu-cluster-queue")
        await eventually(lambda: (h.cluster_queue("gpu-cluster-queue").get("status") or {}).get(
            "reservingWorkloads") == 1, what="status")
        assert h.observer.violations == []


async def test_missing_flavor_makes_the_cluster_queue_inactive_and_says_so():
    objects, jobs, _ = scenario("together-quota.yaml")
    async with Harness() as h:
        for obj in objects:
            if obj["kind"] != "ResourceFlavor":
                await h.apply(obj)
        await h.controller()
        await h.submit(jobs[0])
        await eventually(lambda: W.condition(h.workload_of("default", "gpu-job-a"), "QuotaReserved") is not None,
                         what="pending message")
        c = W.condition(h.workload_of("default", "gpu-job-a"), "QuotaReserved")
        assert c["message"] == "ClusterQueue gpu-cluster-queue is inactive"
        await eventually(lambda: W.condition(h.cluster_queue("gpu-cluster-queue"), "Active") is not None,
                         what="Active condition")
        active = W.condition(h.cluster_queue("gpu-cluster-queue"), "Active")
        assert (active["status"], active["reason"]) == ("False", "FlavorNotFound")
        assert "references missing ResourceFlavor(s): [gpu-flavor]" in active["message"]
        # the flavor appears: the queue becomes active and admits
        await h.apply(next(o for o in objects if o["kind"] == "ResourceFlavor"))
        await eventually(lambda: h.running("default", "gpu-job-a"), what="admitted once the flavor exists")
        await eventually(lambda: W.is_true(h.cluster_queue("gpu-cluster-queue"), "Active"), what="active")


def two_pool_objects(f2_quota: int) -> list[dict]:
    flavors = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"pool-{i}"},
                "spec": {"nodeLabels": {"pool": str(i)}}} for i in (1, 2)]
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"},
          "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                   "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                       {"name": "pool-1", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}]},
                       {"name": "pool-2", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": f2_quota}]}]}]}}
    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
          "metadata": {"namespace": "ml", "name": "default"}, "spec": {"clusterQueue": "q"}}
    pcs = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
           for n, v in (("low", 100), ("high", 1000))]
    return flavors + [cq, lq] + pcs


async def _preempt_low(h: Harness) -> None:
    await h.submit(gpu_job("ml", "low", priority_class="low"))
    await eventually(lambda: h.running("ml", "low"), what="low admitted")
    assert h.job("ml", "low")["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "1"}
    await h.submit(gpu_job("ml", "high", priority_class="high"))
    await eventually(lambda: h.running("ml", "high") and W.is_true(h.workload_of("ml", "low"), "Requeued"),
                     what="high admitted, low requeued")
    preempted = W.condition(h.workload_of("ml", "low"), "Preempted")
    assert preempted["reason"] == "InClusterQueue"
    assert "due to prioritization in the ClusterQueue; preemptor path: /q; preemptee path: /q" in preempted["message"]


async def test_a_workload_names_the_class_its_priority_comes_from_as_kueue_v1beta2_does():
    """spec.priorityClassRef (group, kind, name), which the v1beta2 CRD keeps; the v1beta1 fields
    priorityClassName/priorityClassSource are pruned by a real API server serving that CRD (and by
    the stand-in, which serves manifests/crds), so nothing would show where the priority came from."""
    wpc = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"},
           "value": 5000}
    async with Harness() as h:
        for obj in two_pool_objects(f2_quota=0) + [wpc]:
            await h.apply(obj)
        await h.controller()
        await h.submit(gpu_job("ml", "by-pod-class", priority_class="high"))
        labelled = gpu_job("ml", "by-workload-class", priority_class="low")
        labelled["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
        await h.submit(labelled)
        await eventually(lambda: h.workload_of("ml", "by-pod-class") and h.workload_of("ml", "by-workload-class"),
                         what="both Workloads")
        assert (h.workload_of("ml", "by-pod-class")["spec"]["priorityClassRef"], h.workload_of(
            "ml", "by-pod-class")["spec"]["priority"]) == (
            {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}, 1000)
        assert (h.workload_of("ml", "by-workload-class")["spec"]["priorityClassRef"], h.workload_of(
            "ml", "by-workload-class")["spec"]["priority"]) == (
            {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "urgent"}, 5000)


async def test_preempted_job_gets_its_template_back_where_kubernetes_allows_it():
    async with Harness() as h:
        h.api.job_controller.keep_start_time_on_suspend = False  # 1.27+: startTime cleared on suspend
        for obj in two_pool_objects(f2_quota=0):
            await h.apply(obj)
        await h.controller()
        await _preempt_low(h)
        job = h.job("ml", "low")
        assert "nodeSelector" not in job["spec"]["template"]["spec"]
        assert W.ORIGINAL_SCHEDULING_ANNOTATION not in (job["metadata"].get("annotations") or {})
        # room in the other pool: it is admitted there, with that pool's selector
        await h.edit(K.CLUSTER_QUEUES, None, "q", lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][1][
            "resources"][0].update(nominalQuota=1))
        await eventually(lambda: h.running("ml", "low"), what="low admitted to pool-2")
        assert h.job("ml", "low")["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "2"}
        assert h.observer.violations == []


async def test_on_1_24_a_preempted_job_waits_for_the_flavor_its_template_keeps():
    """1.24 refuses to restore a started Job's template: it keeps pool-1's selector, and the
    engine, which follows the Job's template while it waits, looks for room in pool-1 only
    (rather than admitting it to pool-2 for the API to refuse)."""
    async with Harness() as h:
        for obj in two_pool_objects(f2_quota=0):
            await h.apply(obj)
        ctl = await h.controller()
        await _preempt_low(h)
        assert h.job("ml", "low")["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "1"}  # restore refused
        await h.edit(K.CLUSTER_QUEUES, None, "q", lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][1][
            "resources"][0].update(nominalQuota=1))
        await eventually(lambda: "doesn't match" in (W.condition(h.workload_of("ml", "low"), "QuotaReserved") or {})
                         .get("message", ""), what="pending on its own pool only")
        job = h.job("ml", "low")
        assert job["spec"]["suspend"] is True and job["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "1"}
        assert "admission" not in h.workload_of("ml", "low")["status"]
        assert ctl.job_steering.refused == []
        # its pool frees up: it runs again there
        await h.finish_job("ml", "high")
        await eventually(lambda: h.running("ml", "low"), what="low back on pool-1")
        assert h.job("ml", "low")["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "1"}
        assert h.observer.violations == []


async def test_on_1_24_a_job_its_owner_started_cannot_take_a_flavor_and_says_why():
    """A Job started before its admission (created unsuspended with no webhook in front) keeps
    its startTime once suspended: 1.24 refuses the flavor's nodeSelector. The quota is given back,
    the Job waits, suspended, with a message that says why."""
    async with Harness() as h:
        for obj in two_pool_objects(f2_quota=0):
            await h.apply(obj)
        ctl = await h.controller()
        await h.kube.create(K.JOBS, "ml", gpu_job("ml", "early"))
        await eventually(lambda: "ml/early" in ctl.job_steering.refused, timeout=15, what="refusal seen")
        await eventually(lambda: "the API refused the change of the Job's pod template" in (W.condition(
            h.workload_of("ml", "early"), "QuotaReserved") or {}).get("message", ""), timeout=15, what="pending, saying why")
        assert h.job("ml", "early")["spec"]["suspend"] is True
        assert "admission" not in h.workload_of("ml", "early")["status"]
        # (Events are sent in the background, after the condition's write)
        await eventually(lambda: any(e["reason"] == "AdmissionRefused" for e in h.api.cluster.store.kind("events").values()),
                         what="the AdmissionRefused Event")
        await h.pods.held()
        assert h.observer.violations == []


async def test_watch_expiry_and_dropped_connections_are_survived():
    objects, jobs, _ = scenario("flame.yaml")
    async with Harness(history_size=5) as h:
        for obj in objects:
            await h.apply(obj)
        ctl = await h.controller()
        await h.submit(jobs[0])
        await eventually(lambda: h.running(*_key(jobs[0])), what="first job")
        lists_before = ctl.informers["jobs"].lists
        # the watch history is forgotten and every connection is cut: informers must relist
        h.api.compact()
        h.api.drop_watches()
        for job in jobs[1:4]:
            await h.submit(job)
        await eventually(lambda: all(h.running(*_key(j)) for j in jobs[:4]), timeout=8, what="jobs after relist")
        assert ctl.informers["jobs"].lists > lists_before
        # a Job deleted while nobody watches is noticed through the relist, and its quota freed
        h.api.drop_watches()
        h.api.compact()
        await h.kube.delete(K.JOBS, *_key(jobs[0]))
        for job in jobs[4:]:
            await h.submit(job)
        await eventually(lambda: all(h.running(*_key(j)) for j in jobs[4:]), timeout=8, what="the rest")
        assert h.observer.violations == []


async def test_conflicts_are_retried_from_a_fresh_read():
    objects, jobs, _ = scenario("flame.yaml")
    async with Harness() as h:
        for obj in objects:
            await h.apply(obj)
        await h.controller()
        conflicts = [h.api.faults.add(r"/workloads/[^/]+/status$", method="PATCH", status=409, times=4),
                     h.api.faults.add(r"/jobs/[^/]+$", method="PATCH", status=409, times=4)]
        for job in jobs[:3]:
            await h.submit(job)
        await eventually(lambda: all(h.running(*_key(j)) for j in jobs[:3]), what="admitted despite conflicts")
        assert all(f.times == 0 for f in conflicts)
        for job in jobs[:3]:
            assert W.is_true(h.workload_of(*_key(job)), "QuotaReserved")


def _key(job: dict) -> tuple[str, str]:
    return job["metadata"]["namespace"], job["metadata"]["name"]





async def test_workload_deleted_by_hand_is_recreated_and_the_job_requeued():
    objects, jobs, _ = scenario("together-quota.yaml")
    async with Harness() as h:
        for obj in objects:
            await h.apply(obj)
        await h.controller()
        await h.submit(jobs[0])
        await eventually(lambda: h.running("default", "gpu-job-a"), what="admitted")
        old = h.workload_of("default", "gpu-job-a")
        await h.kube.delete(K.WORKLOADS, "default", old["metadata"]["name"])
        await eventually(lambda: (h.workload_of("default", "gpu-job-a") or {}).get("metadata", {}).get("uid")
                         not in (None, old["metadata"]["uid"]) and h.running("default", "gpu-job-a")
                         and W.is_true(h.workload_of("default", "gpu-job-a"), "QuotaReserved"),
                         what="a new Workload, admitted again")
        assert h.observer.violations == []


async def test_hold_and_drain_evicts_and_requeues():
    objects, jobs, _ = scenario("together-quota.yaml")
    async with Harness() as h:
        for obj in objects:
            await h.apply(obj)
        await h.controller()
        await h.submit(jobs[0])
        await eventually(lambda: h.running("default", "gpu-job-a"), what="admitted")
        await h.edit(K.CLUSTER_QUEUES, None, "gpu-cluster-queue", lambda cq: cq["spec"].update(stopPolicy="HoldAndDrain"))
        await eventually(lambda: W.is_true(h.workload_of("default", "gpu-job-a"), "Requeued"), what="drained")
        wl = h.workload_of("default", "gpu-job-a")
        evicted = W.condition(wl, "Evicted")
        assert (evicted["status"], evicted["reason"]) == ("True", "ClusterQueueStopped")
        assert W.condition(wl, "Preempted") is None
        assert h.job("default", "gpu-job-a")["spec"]["suspend"] is True
        await eventually(lambda: (W.condition(h.cluster_queue("gpu-cluster-queue"), "Active") or {}).get(
            "reason") == "Stopped", what="queue says it is stopped")
        await h.edit(K.CLUSTER_QUEUES, None, "gpu-cluster-queue", lambda cq: cq["spec"].update(stopPolicy="None"))
        await eventually(lambda: h.running("default", "gpu-job-a"), what="resumed when the queue runs again")
