"""A hostile tenant against the controller (issue 19): every edit a tenant can make to its Jobs and
Workloads, on the API stand-in with its job controller making pods and no webhook in front (the
controller must hold without it). Each test asserts on what a user sees - pods, the Job's
suspension, the Workload's conditions and messages, Events - and on the quota over what runs
(PodObserver: the GPUs of existing pods, counted up to what gpuqueue reserved for their Workload,
never exceed a ClusterQueue's or cohort's quota; pods beyond a reservation last only until the
controller answers). Each failed on the controller before this change."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.jobframework.managed import ManagedJobsConfig
from tests.controller_support import FAST, Harness, eventually, flame_running, scenario
from tests.standin import resources as R

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
WAIT = 8.0
COHORT_FULL_MESSAGE = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                       "flavor gh200, {} more needed")


def gpu_job(ns: str, name: str, gpus: int = 1, *, parallelism: int | None = None, completions: int | None = None,
            queue: str | None = None, owner: dict | None = None, resources: dict | None = None,
            init_gpus: int | None = None) -> dict:
    meta: dict = {"namespace": ns, "name": name}
    if queue is not None:
        meta["labels"] = {QUEUE_NAME_LABEL: queue}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: dict = {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "worker", "image": "cuda", "resources": resources or {"limits": {"nvidia.com/gpu": gpus}}}]}}}
    if init_gpus is not None:
        spec["template"]["spec"]["initContainers"] = [
            {"name": "warmup", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": init_gpus}}}]
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


async def cron_owner(h: Harness, ns: str, name: str) -> dict:
    """A CronJob (no CronJob controller runs) to own a Job, as the ones it creates are owned."""
    await h.namespace(ns)
    cron = await h.kube.create(R.CRON_JOBS, ns, {"metadata": {"name": name}, "spec": {
        "schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "worker", "image": "cuda"}]}}}}}})
    return {"apiVersion": "batch/v1", "kind": "CronJob", "name": name, "uid": cron["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def suspended(h: Harness, ns: str, name: str) -> bool:
    job = h.job(ns, name)
    return job is not None and bool(job["spec"].get("suspend"))


def pods_of(h: Harness, ns: str, name: str) -> list[dict]:
    uid = h.job(ns, name)["metadata"]["uid"]
    return [p for p in h.api.cluster.store.kind(R.PODS.storage_key).values()
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or ())]


def reserved(h: Harness, ns: str, name: str) -> bool:
    wl = h.workload_of(ns, name)
    return W.is_true(wl, "QuotaReserved") and bool((wl.get("status") or {}).get("admission"))


def pending_message(h: Harness, ns: str, name: str) -> str | None:
    c = W.condition(h.workload_of(ns, name), "QuotaReserved")
    return c.get("message") if c and c.get("status") == "False" else None


def events(h: Harness, ns: str, name: str) -> list[tuple[str, str, str]]:
    return [(e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            for e in h.api.cluster.store.kind("events").values()
            if (e.get("involvedObject") or {}).get("name") == name and e["metadata"].get("namespace") == ns]


async def tenant_edit(h: Harness, ns: str, name: str, fn) -> dict:
    return await h.edit(K.JOBS, ns, name, fn)


def set_gpus(container: dict, gpus: int) -> None:
    container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}


def drop_label(job: dict) -> None:
    job["metadata"].get("labels", {}).pop(QUEUE_NAME_LABEL, None)


async def fill_cohort(h: Harness) -> None:
    """FLAME's six Jobs run on 6 of the 8 GPUs; c-fill takes the other 2."""
    await h.submit(gpu_job("team-c", "c-fill", 2))
    await eventually(lambda: h.running("team-c", "c-fill"), WAIT, "c-fill admitted")


# -- Job changes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("owned_by", ["nothing", "CronJob"])
async def test_parallelism_raised_on_an_admitted_job_evicts_and_requeues_it(owned_by):
    """Issue 19 case 1: completions 8, parallelism 1 admitted (1 GPU), then parallelism 8."""
    async with Harness() as h:
        await flame_running(h)
        owner = await cron_owner(h, "team-c", "nightly") if owned_by == "CronJob" else None
        await h.submit(gpu_job("team-c", "c-wide", 1, completions=8, parallelism=1, owner=owner))
        await eventually(lambda: h.running("team-c", "c-wide") and len(pods_of(h, "team-c", "c-wide")) == 1,
                         WAIT, "c-wide running one pod")
        await tenant_edit(h, "team-c", "c-wide", lambda j: j["spec"].update(parallelism=8))

        await eventually(lambda: suspended(h, "team-c", "c-wide") and not pods_of(h, "team-c", "c-wide")
                         and pending_message(h, "team-c", "c-wide") == COHORT_FULL_MESSAGE.format(6)
                         and h.workload_of("team-c", "c-wide")["spec"]["podSets"][0]["count"] == 8, WAIT,
                         "c-wide evicted, requeued with 8 pods")
        wl = h.workload_of("team-c", "c-wide")
        assert "admission" not in wl["status"]
        evicted, requeued = W.condition(wl, "Evicted"), W.condition(wl, "Requeued")
        assert (evicted["status"], evicted["reason"]) == ("True", "NoMatchingWorkload")
        assert evicted["message"] == "The Job no longer matches its Workload: pod set main count 1 -> 8"
        assert (requeued["status"], requeued["reason"]) == ("True", "NoMatchingWorkload")
        await eventually(lambda: {("Normal", "Stopped"), ("Normal", "UpdatedWorkload")}
                         <= {(t, r) for t, r, _ in events(h, "team-c", "c-wide")}, WAIT, "its Events")  # writes of their own
        await h.pods.held()
        assert h.observer.violations == []


async def test_parallelism_lowered_on_an_admitted_job_is_requeued_too():
    """As in Kueue, any change of the pod count makes the Workload stale: requeued with count 2."""
    async with Harness() as h:
        await flame_running(h)
        await h.submit(gpu_job("team-c", "c-pair", 1, parallelism=2))
        await eventually(lambda: h.running("team-c", "c-pair"), WAIT, "c-pair running")
        await tenant_edit(h, "team-c", "c-pair", lambda j: j["spec"].update(parallelism=1))
        await eventually(lambda: W.is_true(h.workload_of("team-c", "c-pair"), "Requeued"), WAIT, "requeued")
        await eventually(lambda: h.running("team-c", "c-pair") and reserved(h, "team-c", "c-pair"), WAIT,
                         "admitted again with one pod")
        assert h.workload_of("team-c", "c-pair")["status"]["admission"]["podSetAssignments"][0]["count"] == 1
        await h.pods.held()
        assert h.observer.violations == []


@pytest.mark.parametrize("owned_by", ["nothing", "CronJob"])
async def test_requests_raised_on_a_pending_job_update_its_workload(owned_by):
    """Kubernetes 1.36 lets a suspended Job's container resources change: the Workload follows,
    and the Job is admitted for what its pods will ask, not for what it asked when created."""
    async with Harness(kubernetes_minor=36) as h:
        await flame_running(h)
        await fill_cohort(h)
        owner = await cron_owner(h, "team-c", "nightly") if owned_by == "CronJob" else None
        await h.submit(gpu_job("team-c", "c-grow", 1, owner=owner))
        await eventually(lambda: pending_message(h, "team-c", "c-grow") == COHORT_FULL_MESSAGE.format(1), WAIT,
                         "c-grow pending")
        await tenant_edit(h, "team-c", "c-grow",
                          lambda j: set_gpus(j["spec"]["template"]["spec"]["containers"][0], 3))
        await eventually(lambda: pending_message(h, "team-c", "c-grow") == COHORT_FULL_MESSAGE.format(3), WAIT,
                         "the pending message counts 3 GPUs")
        await eventually(lambda: ("Normal", "UpdatedWorkload") in [(t, r) for t, r, _ in events(h, "team-c", "c-grow")],
                         WAIT, "the UpdatedWorkload Event")
        resources = h.workload_of("team-c", "c-grow")["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
        assert resources["resources"] == {"limits": {"nvidia.com/gpu": 3}}

        await h.finish_job("team-c", "c-fill")  # 2 free: not enough for 3
        await eventually(lambda: pending_message(h, "team-c", "c-grow") == COHORT_FULL_MESSAGE.format(1), WAIT,
                         "still 1 short")
        assert not h.running("team-c", "c-grow")
        await h.finish_job("team-b", "b-1")
        await eventually(lambda: h.running("team-c", "c-grow"), WAIT, "admitted for 3")
        usage = h.workload_of("team-c", "c-grow")["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        assert usage == {"nvidia.com/gpu": "3"}
        await h.pods.held()
        assert h.observer.violations == []


@pytest.mark.parametrize("edit", ["init container raised", "requests dropped, limits raised"])
async def test_template_edits_of_a_pending_job_count_as_kubernetes_counts_them(edit):
    """What a pod asks for is Kubernetes' count (gpuqueue.api.podrequests): an init container
    runs alone, so its requests raise the pod's to their level; a limit with no request is the
    request."""
    async with Harness(kubernetes_minor=36) as h:
        await flame_running(h)
        await fill_cohort(h)
        if edit == "init container raised":
            await h.submit(gpu_job("team-c", "c-x", 1, init_gpus=1))
        else:
            await h.submit(gpu_job("team-c", "c-x", resources={"requests": {"nvidia.com/gpu": 1},
                                                                 "limits": {"nvidia.com/gpu": 1}}))
        await eventually(lambda: pending_message(h, "team-c", "c-x") == COHORT_FULL_MESSAGE.format(1), WAIT,
                         "c-x pending")

        def change(job):
            spec = job["spec"]["template"]["spec"]
            if edit == "init container raised":
                set_gpus(spec["initContainers"][0], 4)
            else:
                spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}

        await tenant_edit(h, "team-c", "c-x", change)
        await eventually(lambda: pending_message(h, "team-c", "c-x") == COHORT_FULL_MESSAGE.format(4), WAIT,
                         "counted as 4 GPUs a pod")
        for finished in (("team-c", "c-fill"), ("team-b", "b-1"), ("team-b", "b-2")):
            await h.finish_job(*finished)
        await eventually(lambda: h.running("team-c", "c-x"), WAIT, "admitted for 4")
        usage = h.workload_of("team-c", "c-x")["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        assert usage == {"nvidia.com/gpu": "4"}
        await h.pods.held()
        assert h.observer.violations == []


async def test_requests_raised_on_an_admitted_job_while_the_controller_is_down():
    """1.36: the owner suspends its admitted Job, waits for its pods to go, raises its requests and
    unsuspends it, all while no controller runs. The new leader compares the Job with the
    reservation it holds: evicted and requeued for 4 GPUs, not run on a reservation of 1."""
    async with Harness(kubernetes_minor=36) as h:
        h.api.job_controller.keep_start_time_on_suspend = False
        ctl, _ = await flame_running(h)
        await h.kill(ctl)
        await tenant_edit(h, "team-c", "c-1", lambda j: j["spec"].update(suspend=True))
        await eventually(lambda: not pods_of(h, "team-c", "c-1"), WAIT, "c-1's pods gone")
        await tenant_edit(h, "team-c", "c-1", lambda j: set_gpus(j["spec"]["template"]["spec"]["containers"][0], 4))
        await tenant_edit(h, "team-c", "c-1", lambda j: j["spec"].update(suspend=False))
        await h.controller(identity="second")
        await eventually(lambda: W.is_true(h.workload_of("team-c", "c-1"), "Requeued")
                         and pending_message(h, "team-c", "c-1") == COHORT_FULL_MESSAGE.format(1), WAIT,
                         "c-1 requeued for 4 GPUs")
        assert suspended(h, "team-c", "c-1") and not pods_of(h, "team-c", "c-1")
        assert W.condition(h.workload_of("team-c", "c-1"), "Evicted")["message"] == (
            "The Job no longer matches its Workload: pod set main nvidia.com/gpu per pod 1 -> 4")
        await h.pods.held()
        assert h.observer.violations == []


# -- the queue label ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("owned_by", ["nothing", "CronJob"])
async def test_queue_label_removed_while_suspended_keeps_the_job_managed(owned_by):
    """Issue 19 case 2: the label removed while the Job waits, then `suspend: false` in a second
    update. The Job stays in its queue until its Workload finishes: suspended again, admitted
    when there is room, and only then does it run. (On 1.36: a Job its owner started keeps its
    startTime on 1.24, which then refuses the flavor's nodeSelector - see docs/controller.md.)"""
    async with Harness(kubernetes_minor=36) as h:
        await flame_running(h)
        owner = await cron_owner(h, "team-c", "nightly") if owned_by == "CronJob" else None
        await h.submit(gpu_job("team-c", "c-big", 4, owner=owner))
        await eventually(lambda: pending_message(h, "team-c", "c-big") == COHORT_FULL_MESSAGE.format(2), WAIT,
                         "c-big pending")
        await tenant_edit(h, "team-c", "c-big", drop_label)
        await tenant_edit(h, "team-c", "c-big", lambda j: j["spec"].update(suspend=False))
        await eventually(lambda: suspended(h, "team-c", "c-big") and not pods_of(h, "team-c", "c-big"), WAIT,
                         "suspended again")
        wl = h.workload_of("team-c", "c-big")
        assert wl["spec"]["queueName"] == "default"
        assert pending_message(h, "team-c", "c-big") == COHORT_FULL_MESSAGE.format(2)

        for finished in (("team-b", "b-1"), ("team-b", "b-2")):
            await h.finish_job(*finished)
        await eventually(lambda: h.running("team-c", "c-big") and reserved(h, "team-c", "c-big"), WAIT,
                         "admitted in its queue without the label")
        await h.pods.held()
        assert h.observer.violations == []


async def test_queue_label_changed_on_a_pending_job_moves_it():
    """Issue 19 case 8: Kueue moves a pending Job to the LocalQueue its label now names."""
    async with Harness() as h:
        await flame_running(h)
        await h.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                       "metadata": {"name": "spare"}, "spec": {"namespaceSelector": {}, "resourceGroups": [
                           {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gh200", "resources": [
                               {"name": "nvidia.com/gpu", "nominalQuota": 4}]}]}]}})
        await h.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                       "metadata": {"namespace": "team-c", "name": "spare"}, "spec": {"clusterQueue": "spare"}})
        await h.submit(gpu_job("team-c", "c-big", 4))
        await h.submit(gpu_job("team-c", "c-lost", 4))
        await eventually(lambda: pending_message(h, "team-c", "c-lost") is not None, WAIT, "both pending")

        await tenant_edit(h, "team-c", "c-lost", lambda j: j["metadata"]["labels"].update({QUEUE_NAME_LABEL: "gone"}))
        await eventually(lambda: pending_message(h, "team-c", "c-lost") == "LocalQueue gone doesn't exist", WAIT,
                         "the new queue's message")
        assert h.workload_of("team-c", "c-lost")["spec"]["queueName"] == "gone"

        await tenant_edit(h, "team-c", "c-big", lambda j: j["metadata"]["labels"].update({QUEUE_NAME_LABEL: "spare"}))
        await eventually(lambda: h.running("team-c", "c-big"), WAIT, "admitted in the new queue")
        wl = h.workload_of("team-c", "c-big")
        assert wl["spec"]["queueName"] == "spare" and wl["status"]["admission"]["clusterQueue"] == "spare"
        await h.pods.held()
        assert h.observer.violations == []


async def test_manage_jobs_without_queue_name_suspends_a_job_each_time_it_runs():
    """Issue 19 case 3: with manageJobsWithoutQueueName a Job without the label is suspended
    whenever it is seen running unadmitted, not only the first time."""
    opts = dataclasses.replace(FAST, managed_jobs=ManagedJobsConfig(manage_jobs_without_queue_name=True))
    async with Harness() as h:
        objects, _, _ = scenario("flame.yaml")
        for obj in objects:
            await h.apply(obj)
        await h.controller(opts)
        await h.namespace("team-x")
        await h.kube.create(K.JOBS, "team-x", {k: v for k, v in gpu_job("team-x", "free-ride", 2).items()})
        for _ in range(3):
            await eventually(lambda: suspended(h, "team-x", "free-ride") and not pods_of(h, "team-x", "free-ride"),
                             WAIT, "suspended")
            await tenant_edit(h, "team-x", "free-ride", lambda j: j["spec"].update(suspend=False))
        await eventually(lambda: suspended(h, "team-x", "free-ride") and not pods_of(h, "team-x", "free-ride"),
                         WAIT, "suspended once more")
        await h.pods.held()


# -- restarts -------------------------------------------------------------------------------------------------

async def test_restart_counts_a_reservation_whose_job_lost_its_label():
    """Issue 19 case 4: while no controller runs, the owner suspends admitted c-1, removes its
    label and unsuspends it. The new leader counts c-1's reservation: of three new Jobs, two fit."""
    async with Harness() as h:
        ctl, _ = await flame_running(h)
        await h.kill(ctl)
        await tenant_edit(h, "team-c", "c-1", lambda j: j["spec"].update(suspend=True))
        await tenant_edit(h, "team-c", "c-1", drop_label)
        await tenant_edit(h, "team-c", "c-1", lambda j: j["spec"].update(suspend=False))
        for name in ("c-5", "c-6", "c-7"):
            await h.submit(gpu_job("team-c", name, 1))
        await h.controller(identity="second")
        await eventually(lambda: sum(h.running("team-c", n) for n in ("c-5", "c-6", "c-7")) == 2
                         and sum(pending_message(h, "team-c", n) is not None for n in ("c-5", "c-6", "c-7")) == 1,
                         WAIT, "two of three admitted")
        assert h.running("team-c", "c-1") and reserved(h, "team-c", "c-1")
        await h.pods.held()
        assert h.observer.violations == []


async def test_restart_counts_a_reservation_whose_job_is_gone_until_its_pods_are():
    """While no controller runs, the owner deletes admitted c-1 orphaning its pod (and its
    Workload): the pod still runs, so the new leader counts the reservation until the pod is
    gone, then gives it back."""
    async with Harness() as h:
        ctl, _ = await flame_running(h)
        await h.kill(ctl)
        wl_name = h.workload_of("team-c", "c-1")["metadata"]["name"]
        (pod,) = pods_of(h, "team-c", "c-1")
        await h.kube.request("DELETE", K.JOBS.path("team-c", "c-1"),
                             {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"})
        for name in ("c-5", "c-6", "c-7"):
            await h.submit(gpu_job("team-c", name, 1))
        await h.controller(identity="second")
        names = ("c-5", "c-6", "c-7")
        await eventually(lambda: sum(h.running("team-c", n) for n in names) == 2
                         and sum(pending_message(h, "team-c", n) is not None for n in names) == 1,
                         WAIT, "two of three admitted")
        assert h.api.cluster.store.get(R.WORKLOADS.storage_key, ("team-c", wl_name)) is not None

        body = copy.deepcopy(h.api.cluster.store.get(R.PODS.storage_key, ("team-c", pod["metadata"]["name"])))
        body["status"] = {**body.get("status", {}), "phase": "Succeeded"}
        h.api.cluster.update(R.PODS, "team-c", pod["metadata"]["name"], body, subresource="status", verb="kubelet")
        await eventually(lambda: all(h.running("team-c", n) for n in names), WAIT, "the third admitted")
        assert h.api.cluster.store.get(R.WORKLOADS.storage_key, ("team-c", wl_name)) is None
        await h.pods.held()
        assert h.observer.violations == []


# -- forged Workload status ----------------------------------------------------------------------------------

async def test_a_reservation_forged_on_a_pending_workload_is_set_back():
    async with Harness() as h:
        await flame_running(h)
        await fill_cohort(h)
        await h.submit(gpu_job("team-c", "c-x", 1))
        await eventually(lambda: pending_message(h, "team-c", "c-x") == COHORT_FULL_MESSAGE.format(1), WAIT,
                         "c-x pending")
        wl = h.workload_of("team-c", "c-x")
        forged = copy.deepcopy(wl)
        now = W.now_rfc3339()
        forged["status"]["admission"] = {"clusterQueue": "group-c", "podSetAssignments": [
            {"name": "main", "flavors": {"nvidia.com/gpu": "gh200"}, "resourceUsage": {"nvidia.com/gpu": "1"},
             "count": 1}]}
        forged["status"]["conditions"] = W.set_condition(
            W.set_condition(wl["status"]["conditions"], "QuotaReserved", "True", "QuotaReserved",
                            "Quota reserved in ClusterQueue group-c", now), "Admitted", "True", "Admitted",
            "The workload is admitted", now)
        await h.kube.replace(K.WORKLOADS, forged, "status")
        await eventually(lambda: pending_message(h, "team-c", "c-x") == COHORT_FULL_MESSAGE.format(1)
                         and "admission" not in h.workload_of("team-c", "c-x")["status"], WAIT, "set back")
        assert not W.is_true(h.workload_of("team-c", "c-x"), "Admitted")
        assert suspended(h, "team-c", "c-x")
        await eventually(lambda: ("Warning", "WorkloadStatusReverted") in [(t, r) for t, r, _ in events(
            h, "team-c", "c-x")], what="the WorkloadStatusReverted Event")  # Events are sent in the background

        await tenant_edit(h, "team-c", "c-x", lambda j: j["spec"].update(suspend=False))
        await eventually(lambda: suspended(h, "team-c", "c-x") and not pods_of(h, "team-c", "c-x"), WAIT,
                         "suspended again")
        await h.pods.held()


async def test_an_admission_edited_on_an_admitted_workload_is_set_back():
    """The tenant makes its reservation look smaller (a record that undercounts lets a new
    leader admit more) and its pod count larger."""
    async with Harness() as h:
        await flame_running(h)
        before = h.workload_of("team-c", "c-1")["status"]["admission"]
        forged = copy.deepcopy(h.workload_of("team-c", "c-1"))
        forged["status"]["admission"]["podSetAssignments"][0].update(count=8,
                                                                      resourceUsage={"nvidia.com/gpu": "0"})
        await h.kube.replace(K.WORKLOADS, forged, "status")
        await eventually(lambda: h.workload_of("team-c", "c-1")["status"]["admission"] == before, WAIT, "set back")
        assert reserved(h, "team-c", "c-1") and h.running("team-c", "c-1")
        await h.pods.held()
        assert h.observer.violations == []


@pytest.mark.parametrize("restart", [False, True])
async def test_finished_forged_on_an_admitted_workload_is_set_back(restart):
    """A Finished Workload counts for nothing (a new leader, the quota's record): the tenant
    declares its running c-1's Workload Finished - and, for the restart, removes c-1's label too
    while no controller runs. Only the Job's end finishes a Workload."""
    async with Harness() as h:
        ctl, _ = await flame_running(h)
        if restart:
            await h.kill(ctl)
        wl = copy.deepcopy(h.workload_of("team-c", "c-1"))
        wl["status"]["conditions"] = W.set_condition(wl["status"]["conditions"], "Finished", "True", "Succeeded",
                                                     "Job finished successfully", W.now_rfc3339())
        await h.kube.replace(K.WORKLOADS, wl, "status")
        if restart:
            await tenant_edit(h, "team-c", "c-1", drop_label)
            await h.submit(gpu_job("team-c", "c-extra", 3))
            await h.controller(identity="second")
        await eventually(lambda: W.condition(h.workload_of("team-c", "c-1"), "Finished") is None, WAIT, "set back")
        assert reserved(h, "team-c", "c-1") and h.running("team-c", "c-1")
        if restart:
            await eventually(lambda: pending_message(h, "team-c", "c-extra") == COHORT_FULL_MESSAGE.format(1), WAIT,
                             "c-extra waits: c-1 still counts")
        await h.pods.held()


async def test_a_second_workload_with_a_forged_reservation_is_deleted():
    """A tenant makes a Workload of its own for its pending Job and gives it a reservation:
    one Workload per Job, gpuqueue's; Kueue deletes the others too."""
    async with Harness() as h:
        await flame_running(h)
        await fill_cohort(h)
        job = await h.submit(gpu_job("team-c", "c-x", 1))
        await eventually(lambda: pending_message(h, "team-c", "c-x") is not None, WAIT, "c-x pending")
        mine = copy.deepcopy(h.workload_of("team-c", "c-x"))
        mine["metadata"] = {"name": "mine", "namespace": "team-c", "labels": mine["metadata"]["labels"],
                            "ownerReferences": mine["metadata"]["ownerReferences"]}
        mine.pop("status")
        created = await h.kube.create(K.WORKLOADS, "team-c", mine)
        created["status"] = {"admission": {"clusterQueue": "group-c", "podSetAssignments": [
            {"name": "main", "flavors": {"nvidia.com/gpu": "gh200"}, "resourceUsage": {"nvidia.com/gpu": "1"},
             "count": 1}]}, "conditions": W.set_condition([], "QuotaReserved", "True", "QuotaReserved",
                                                          "Quota reserved in ClusterQueue group-c", W.now_rfc3339())}
        await h.kube.replace(K.WORKLOADS, created, "status")
        await eventually(lambda: h.api.cluster.store.get(R.WORKLOADS.storage_key, ("team-c", "mine")) is None, WAIT,
                         "deleted")
        # the Event is a write of its own after the deletion: it may reach the API a moment later
        await eventually(lambda: ("Normal", "DeletedWorkload", "Deleted not matching Workload: team-c/mine")
                         in events(h, "team-c", "c-x"), WAIT, "the deletion's Event")
        assert suspended(h, "team-c", "c-x") and job["metadata"]["uid"] == h.job("team-c", "c-x")["metadata"]["uid"]
        await h.pods.held()


# -- suspend races ------------------------------------------------------------------------------------------------

async def reclaim_held(h: Harness) -> list[str]:
    """FLAME's reclaim phase with no kubelet: the victims' pods stay Terminating, so the
    admissions of A's Jobs that need their room wait. Returns those Jobs' names."""
    await flame_running(h)
    for name in ("a-1", "a-2", "a-3", "a-4"):
        await h.submit(gpu_job("team-a", name, 1))
    await eventually(lambda: sum(suspended(h, "team-c", f"c-{i}") for i in range(1, 5)) == 2, WAIT,
                     "two victims suspended")
    await eventually(lambda: sum(h.running("team-a", f"a-{i}") for i in range(1, 5)) == 2, WAIT,
                     "two of A's Jobs in the free room")
    return [f"a-{i}" for i in range(1, 5) if not h.running("team-a", f"a-{i}")]


def release_terminating_pods(h: Harness) -> None:
    for pod in list(h.api.cluster.store.kind(R.PODS.storage_key).values()):
        if pod["metadata"].get("deletionTimestamp"):
            h.api.cluster.delete(R.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], grace_period=0,
                                 verb="kubelet")


async def test_owner_unsuspends_a_job_whose_admission_waits_for_its_victims():
    async with Harness(pod_deletion_delay=None, kubernetes_minor=36) as h:
        waiting = await reclaim_held(h)
        assert len(waiting) == 2 and not any(reserved(h, "team-a", n) for n in waiting)
        for name in waiting:
            await tenant_edit(h, "team-a", name, lambda j: j["spec"].update(suspend=False))
        await eventually(lambda: all(suspended(h, "team-a", n) for n in waiting), WAIT,
                         "suspended again while the victims' pods are still there")
        assert not any(reserved(h, "team-a", n) for n in waiting)
        release_terminating_pods(h)
        await eventually(lambda: all(h.running("team-a", n) and reserved(h, "team-a", n) for n in waiting), WAIT,
                         "admitted once the victims' pods are gone")
        release_terminating_pods(h)
        await h.pods.held(max_span=2.0)
        assert h.observer.violations == []


async def test_owner_unsuspends_a_victim_during_its_eviction():
    async with Harness(pod_deletion_delay=None) as h:
        waiting = await reclaim_held(h)
        victims = [f"c-{i}" for i in range(1, 5) if suspended(h, "team-c", f"c-{i}")]
        for name in victims:
            await tenant_edit(h, "team-c", name, lambda j: j["spec"].update(suspend=False))
        await eventually(lambda: all(suspended(h, "team-c", n) for n in victims), WAIT, "victims suspended again")
        release_terminating_pods(h)
        await eventually(lambda: all(W.is_true(h.workload_of("team-c", n), "Requeued") for n in victims), WAIT,
                         "evictions completed")
        await eventually(lambda: all(h.running("team-a", n) for n in waiting), WAIT, "preemptors running")
        assert not any(h.running("team-c", n) for n in victims)
        release_terminating_pods(h)
        await h.pods.held(max_span=2.0)
        assert h.observer.violations == []
