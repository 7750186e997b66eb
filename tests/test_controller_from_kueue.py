"""A cluster Kueue v0.18 ran (tests/kueue_objects.py: its Workloads, admissions and Job edits), then
gpuqueue's controller started in its place (docs/migrate-from-kueue.md):

- the Jobs Kueue admitted keep running and count against the quota, the pending ones keep their
  Workloads, and no second Workload is made;
- Kueue's finalizer `kueue.x-k8s.io/resource-in-use` comes off a Workload once it is finished,
  and once it is being deleted, as Kueue takes it off, so a deleted Job's Workload goes;
- a Job Kueue started and gpuqueue preempts gets its pod template back as its Workload recorded
  it (Kueue's podset RestorePodSpec), not with Kueue's flavor nodeSelector left on."""

from __future__ import annotations

import copy

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from tests import kueue_objects as KO
from tests.controller_support import Harness, eventually

NS = "team-a"
CQ = FLAVOR = "gpus"
POOL = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}


def quota(gpus: int) -> list[dict]:
    return [
        {"apiVersion": KO.API_VERSION, "kind": "ResourceFlavor",
         "metadata": {"name": FLAVOR, "finalizers": [KO.FINALIZER]}, "spec": {"nodeLabels": POOL}},
        {"apiVersion": KO.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": CQ, "finalizers": [KO.FINALIZER]},
         "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                  "resourceGroups": [{"coveredResources": [KO.GPU], "flavors": [
                      {"name": FLAVOR, "resources": [{"name": KO.GPU, "nominalQuota": gpus}]}]}]}},
        {"apiVersion": KO.API_VERSION, "kind": "LocalQueue", "metadata": {"namespace": NS, "name": "team"},
         "spec": {"clusterQueue": CQ}},
        {"apiVersion": KO.API_VERSION, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 1000}]


def job(name: str, gpus: int, labels: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": NS, "name": name, "labels": {KO.QUEUE_LABEL: "team", **(labels or {})}},
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
                                                          "resources": {"limits": {KO.GPU: gpus}}}]}}}}


async def kueue_job(h: Harness, name: str, gpus: int, status: dict | None = None) -> dict:
    """A Job as Kueue's webhook leaves it, its Workload as Kueue makes it, with `status`."""
    body = job(name, gpus)
    body["spec"]["suspend"] = True
    created = await h.kube.create(K.JOBS, NS, body)
    wl = await h.kube.create(K.WORKLOADS, NS, KO.workload(created))
    if status:
        await h.kube.replace(K.WORKLOADS, {**wl, "status": status}, "status")
    return created


async def kueue_ran(h: Harness) -> dict[str, dict]:
    """4 GPUs; Kueue admitted and started `a` (2 GPUs) then `b` (2 GPUs); `c` (2 GPUs) waits."""
    for obj in quota(4):
        await h.apply(obj)
    jobs = {}
    for name, at in (("a", KO.now(-60)), ("b", KO.now(-30))):
        jobs[name] = await kueue_job(h, name, 2, KO.admitted_status(CQ, FLAVOR, 2, at=at))
        await h.kube.merge_patch(K.JOBS, NS, name, KO.started(jobs[name], CQ, POOL))
    jobs["c"] = await kueue_job(h, "c", 2, KO.pending_status(FLAVOR, 2))
    await eventually(lambda: all(h.job(NS, n).get("status", {}).get("active") for n in "ab"), what="a's and b's pods")
    return jobs


def stored_workload(h: Harness, job: dict) -> dict | None:
    return h.api.cluster.store.get("workloads.kueue.x-k8s.io", (NS, KO.wl_name(job)))


def workloads(h: Harness) -> list[dict]:
    return list(h.api.cluster.store.kind("workloads.kueue.x-k8s.io").values())


async def test_kueues_workloads_are_kept_and_its_finalizer_comes_off_as_kueue_takes_it_off():
    async with Harness() as h:
        jobs = await kueue_ran(h)
        await h.controller()
        late = await h.submit(job("d", 1))
        await eventually(lambda: h.workload_of(NS, "d") and "more needed" in str(h.workload_of(NS, "d").get("status")),
                         what="d waits: a and b hold the 4 GPUs")
        assert h.running(NS, "a") and h.running(NS, "b") and not h.running(NS, "c")
        assert sorted(wl["metadata"]["name"] for wl in workloads(h)) == sorted(
            [*(KO.wl_name(j) for j in jobs.values()), W.workload_name("d", late["metadata"]["uid"])])

        await h.finish_job(NS, "a")
        await eventually(lambda: h.running(NS, "c"), what="c admitted in a's room")
        await eventually(lambda: W.is_true(stored_workload(h, jobs["a"]), "Finished") and KO.FINALIZER not in (
            stored_workload(h, jobs["a"])["metadata"].get("finalizers") or ()), what="a finished, Kueue's finalizer off")
        assert not h.running(NS, "d")

        # deleted as kubectl deletes (background): the garbage collector's deletion is not held
        await h.kube.delete(K.JOBS, NS, "a")
        await eventually(lambda: stored_workload(h, jobs["a"]) is None, what="a's Workload deleted with its Job")
        # a running Job's Workload deleted by hand: it goes, and the Job is queued again in a new one (as Kueue does)
        first = stored_workload(h, jobs["b"])["metadata"]["uid"]
        await h.kube.delete(K.WORKLOADS, NS, KO.wl_name(jobs["b"]))
        await eventually(lambda: (stored_workload(h, jobs["b"]) or {"metadata": {"uid": first}})["metadata"]["uid"] != first,
                         what="b's Workload deleted and made again")
        assert KO.FINALIZER not in (stored_workload(h, jobs["b"])["metadata"].get("finalizers") or ())
        assert h.observer.violations == []


async def test_a_job_kueue_started_gets_its_template_back_when_preempted():
    async with Harness() as h:
        h.api.job_controller.keep_start_time_on_suspend = False  # 1.27+: the template may change again
        jobs = await kueue_ran(h)
        original = copy.deepcopy(stored_workload(h, jobs["b"])["spec"]["podSets"][0]["template"]["spec"])
        assert "nodeSelector" not in original and h.job(NS, "b")["spec"]["template"]["spec"]["nodeSelector"] == POOL
        await h.controller()
        await h.submit(job("urgent", 2, {"kueue.x-k8s.io/priority-class": "high"}))
        await eventually(lambda: h.running(NS, "urgent"), what="urgent admitted in b's room (b admitted last)")
        b = h.job(NS, "b")
        assert b["spec"]["suspend"] is True and h.running(NS, "a")
        assert "nodeSelector" not in b["spec"]["template"]["spec"], b["spec"]["template"]["spec"]
        assert h.observer.violations == []
