"""A pod kube-scheduler parked because the extender refused it before its workload was admitted (its
owner started the Job while it was pending or being evicted) is tried again once the admission is
written: the controller writes an annotation on it, an update of the pod itself, which moves it out
of the unschedulable pods on 1.24 and current alike (parked_pods.py). Without it the pod waits for an
unrelated cluster event or the five-minute flush. Against the stand-in kube-scheduler's queue."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.writes import parked_pods
from tests.controller_support import Harness, eventually
from tests.standin import resources as R
from tests.standin.schedqueue import CURRENT, V1_24, RealClock
from tests.standin.scheduler import Scheduler

GPU = "nvidia.com/gpu"


def gpu_pod(name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"containers": [{"name": "w", "image": "x", "resources": {"limits": {GPU: "1"}}}], **spec}}


@pytest.mark.parametrize("version", [V1_24, CURRENT])
async def test_a_refused_pod_is_bound_at_once_after_its_admission(version):
    admitted = False

    async def extender(verb: str, body: bytes) -> bytes:
        names = orjson.loads(body)["NodeNames"]
        if verb != "filter" or admitted:
            return orjson.dumps({"NodeNames": names} if verb == "filter" else [{"Host": n, "Score": 1} for n in names])
        return orjson.dumps({"NodeNames": [], "FailedNodes": {n: "gpuqueue: not admitted yet" for n in names}})

    async with Harness() as h:
        await h.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                       "status": {"allocatable": {GPU: "8", "cpu": "8", "memory": "8Gi", "pods": "110"}}})
        await h.namespace("team-a")
        scheduler = Scheduler(h.api.cluster, extender, version=version, clock=RealClock())
        scheduler.start()
        try:
            await h.kube.create(K.PODS, "team-a", gpu_pod("early"))

            def pod() -> dict:
                return h.api.cluster.store.get(R.PODS.storage_key, ("team-a", "early"))

            # refused, and parked (current tries it once more at once, moved by its own PodScheduled write)
            await eventually(lambda: scheduler.attempts >= (2 if version == CURRENT else 1) and any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in (pod().get("status") or {}).get("conditions") or ()), what="the pod refused")
            admitted = True
            await asyncio.sleep(1.5)  # past any backoff: parked, nothing moves it
            assert not pod()["spec"].get("nodeName")
            start = time.monotonic()
            assert await parked_pods.retry(h.kube, [pod()]) == 1
            await eventually(lambda: pod()["spec"].get("nodeName") == "n1", timeout=3, what="the pod bound")
            assert time.monotonic() - start < 1.0
            assert pod()["metadata"]["annotations"][parked_pods.RETRY_ANNOTATION]
        finally:
            await scheduler.stop()


async def test_only_pods_waiting_for_a_node_are_written():
    async with Harness() as h:
        await h.namespace("team-a")
        pods = [gpu_pod("waiting"), gpu_pod("bound", nodeName="n1"),
                gpu_pod("gated", schedulingGates=[{"name": "kueue.x-k8s.io/topology"}])]
        for p in pods:
            await h.kube.create(K.PODS, "team-a", p)
        stored = [h.api.cluster.store.get(R.PODS.storage_key, ("team-a", p["metadata"]["name"])) for p in pods]
        assert await parked_pods.retry(h.kube, stored) == 1
        assert await parked_pods.retry(h.kube, stored, limit=0) == 0  # a tenant's pods beyond the admission
        annotated = {p["metadata"]["name"] for p in h.api.cluster.store.kind(R.PODS.storage_key).values()
                     if parked_pods.RETRY_ANNOTATION in (p["metadata"].get("annotations") or {})}
        assert annotated == {"waiting"}


KUEUE = "kueue.x-k8s.io/v1beta2"
POOL = {"pool": "a"}


async def _quota(h: Harness, gpus: int) -> None:
    await h.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": POOL},
                   "status": {"allocatable": {GPU: "8", "cpu": "8", "memory": "8Gi", "pods": "110"}}})
    await h.apply({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "pool-a"},
                   "spec": {"nodeLabels": POOL}})
    await h.apply({"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": "pool-a", "resources": [{"name": GPU, "nominalQuota": gpus}]}]}]}})
    await h.apply({"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"namespace": "team-a", "name": "lq"},
                   "spec": {"clusterQueue": "cq"}})


def _job(name: str, pods: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": "team-a", "name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "w", "image": "x", "resources": {"limits": {GPU: "1"}}}]}}}}


@pytest.mark.parametrize("version", [V1_24, CURRENT])
async def test_a_new_leader_moves_the_pods_parked_while_no_leader_ran(version):
    """The leader admits a Job and dies; its pods are refused meanwhile (by the replica that died,
    or by a follower that had not seen the admission) and parked. The next leader writes nothing
    for a Workload already admitted, yet the pods must be bound at once once it leads."""
    down = True

    async def extender(verb: str, body: bytes) -> bytes:
        names = orjson.loads(body)["NodeNames"]
        if verb != "filter" or not down:
            return orjson.dumps({"NodeNames": names} if verb == "filter" else [{"Host": n, "Score": 1} for n in names])
        return orjson.dumps({"NodeNames": [], "FailedNodes": {n: "gpuqueue: not admitted yet" for n in names}})

    async with Harness() as h:
        await h.namespace("team-a")
        await _quota(h, 8)
        scheduler = Scheduler(h.api.cluster, extender, version=version, clock=RealClock())
        scheduler.start()
        try:
            first = await h.controller(identity="first")
            await h.submit(_job("j", 2))

            def pods() -> list[dict]:
                return [p for p in h.api.cluster.store.kind(R.PODS.storage_key).values()
                        if p["metadata"]["namespace"] == "team-a"]

            def refused(p: dict) -> bool:
                return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                           for c in (p.get("status") or {}).get("conditions") or ())

            await eventually(lambda: h.running("team-a", "j") and len(pods()) == 2 and all(map(refused, pods())),
                             what="the admitted Job's two pods refused")
            await h.kill(first)
            down = False
            await asyncio.sleep(1.5)  # past any backoff: parked, nothing moves them
            assert not any(p["spec"].get("nodeName") for p in pods())
            start = time.monotonic()
            await h.controller(identity="second")
            await eventually(lambda: all(p["spec"].get("nodeName") == "n1" for p in pods()), timeout=5,
                             what="the pods bound after the new leader took over")
            assert time.monotonic() - start < 2.0
        finally:
            await scheduler.stop()


async def test_a_new_leader_moves_no_more_pods_than_the_admission_leaves_room_for():
    """Admitted for 2 pods, one bound: of the Job's waiting pods (a tenant's extras made beside the
    Job controller's) the new leader moves one."""
    async with Harness() as h:
        await h.namespace("team-a")
        await _quota(h, 8)
        first = await h.controller(identity="first")
        await h.submit(_job("j", 2))
        await eventually(lambda: h.running("team-a", "j") and len(_job_pods(h)) == 2, what="two pods made")
        await h.kill(first)
        job = h.job("team-a", "j")
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"],
               "controller": True, "blockOwnerDeletion": True}
        one = _job_pods(h)[0]
        h.api.cluster.bind("team-a", one["metadata"]["name"], "n1", uid=one["metadata"]["uid"])
        for i in range(5):
            pod = gpu_pod(f"extra-{i}")
            pod["metadata"].update(ownerReferences=[ref], labels={"job-name": "j"})
            await h.kube.create(K.PODS, "team-a", pod)
        await h.controller(identity="second")
        await eventually(lambda: _annotated(h), what="a parked pod moved")
        await asyncio.sleep(0.5)
        assert len(_annotated(h)) == 1


def _job_pods(h: Harness) -> list[dict]:
    return [p for p in h.api.cluster.store.kind(R.PODS.storage_key).values() if p["metadata"]["namespace"] == "team-a"]


def _annotated(h: Harness) -> list[str]:
    return [p["metadata"]["name"] for p in _job_pods(h)
            if parked_pods.RETRY_ANNOTATION in (p["metadata"].get("annotations") or {})]


@pytest.mark.parametrize("version", [V1_24, CURRENT])
async def test_pods_failed_with_an_error_after_the_admission_are_moved_by_the_leader(version):
    """An admitted Job's pods that kube-scheduler failed with an `Error` (a call cut by a replica
    that died, a follower that waited out its caches) after the leader's last write for them: on
    1.24 they wait for a Node event or the five-minute flush. The leader sees kube-scheduler's
    PodScheduled=False for an Error and moves them, so they are bound within seconds once the
    extender answers again (1.24 writes them reason Unschedulable with the error as the message,
    current reason SchedulerError)."""
    failing = True

    async def extender(verb: str, body: bytes) -> bytes:
        names = orjson.loads(body)["NodeNames"]
        if verb == "filter" and failing:
            return orjson.dumps({"NodeNames": None, "Error": "gpuqueue: pod not in gpuqueue's pod cache (waited 1 s)"})
        return orjson.dumps({"NodeNames": names} if verb == "filter" else [{"Host": n, "Score": 1} for n in names])

    async with Harness() as h:
        await h.namespace("team-a")
        await _quota(h, 8)
        scheduler = Scheduler(h.api.cluster, extender, version=version, clock=RealClock())
        scheduler.start()
        try:
            await h.controller(identity="leader")
            await h.submit(_job("j", 2))

            def errored(p: dict) -> bool:  # 1.24 writes reason Unschedulable with the error as the message
                return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                           and "pod cache" in (c.get("message") or "")
                           for c in (p.get("status") or {}).get("conditions") or ())

            await eventually(lambda: h.running("team-a", "j") and len(_job_pods(h)) == 2
                             and all(map(errored, _job_pods(h))), what="the admitted Job's two pods failed with an Error")
            # failing on: the leader's first moves fail again, with the same condition, which
            # kube-scheduler does not write again (no event tells the leader)
            await asyncio.sleep(2.5)
            assert not any(p["spec"].get("nodeName") for p in _job_pods(h))
            failing = False
            start = time.monotonic()
            await eventually(lambda: all(p["spec"].get("nodeName") == "n1" for p in _job_pods(h)), timeout=15,
                             what="the pods bound once the extender answers again")
            assert time.monotonic() - start < 9.0  # the floor's cap (8 s) at worst, not the five-minute flush
        finally:
            await scheduler.stop()


def test_what_counts_as_kube_schedulers_error():
    from gpuqueue.extender.controller.reconcilers.scheduler_errors import failed_with_error

    def pod(reason: str, message: str, node: str | None = None) -> dict:
        return {"metadata": {}, "spec": {"nodeName": node} if node else {},
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message}]}}

    assert failed_with_error(pod("SchedulerError", "Post \"https://gpuqueue-extender/filter\": EOF"))
    assert failed_with_error(pod("Unschedulable", "gpuqueue: pod a/b (uid u) is not in gpuqueue's pod cache (waited 1 s for it)"))
    assert failed_with_error(pod("Unschedulable", "Post \"https://10.0.0.1:8443/filter\": dial tcp: connection refused"))
    assert not failed_with_error(pod("Unschedulable", "0/4 nodes are available: 4 gpuqueue: node has 0 GPUs free"))
    assert not failed_with_error(pod("Unschedulable", "no nodes available to schedule pods"))
    assert not failed_with_error(pod("SchedulerError", "boom", node="n1"))  # bound since
