"""A LeaderWorkerSet through the controller against the stand-in serving its CRD, as Kueue
queues one: its templates marked by its webhook, its pods made as the LWS controller makes them
(a leader per group, worker index 0, and its workers, labelled with the LeaderWorkerSet's name and
the group index, gated by the pod webhook). One Workload per group, named as
LeaderWorkerSet.workload_names names it, controlled by the LeaderWorkerSet, pod sets `leader` and
`worker`; made once the group's `size` pods exist; admitted by ungating the group's pods with the
flavor; preempted by deleting them, the quota held until the last ended. No quota violation at
any write (QuotaObserver, PodObserver)."""

from __future__ import annotations

import asyncio
import dataclasses

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.kinds.managed_kinds import kind_of
from gpuqueue.jobframework.integration import json_copy
from gpuqueue.jobframework.kinds import pods
from gpuqueue.jobframework.registry import BY_FRAMEWORK, IntegrationsConfig
from tests.controller_support import FAST, Harness, eventually
from tests.standin import resources as R
from tests.test_controller_kinds import GH200, quota_objects
from tests.test_controller_pod_group_life import GroupLife, no_violation
from tests.test_controller_pods import plain_pod

LWS = BY_FRAMEWORK["leaderworkerset.x-k8s.io/leaderworkerset"]
FRAMEWORKS = IntegrationsConfig(("batch/job", "pod", "leaderworkerset.x-k8s.io/leaderworkerset"))


def template(gpus: int) -> dict:
    spec = json_copy(plain_pod("x", gpus)["spec"])
    spec.pop("schedulingGates")
    return {"metadata": {"labels": {"app": "vllm"}}, "spec": spec}


def owner(obj: dict) -> list[dict]:
    meta = obj["metadata"]
    return [{"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", "Pod"), "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}]


def statefulset(name: str, template: dict, owners: list[dict]) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"namespace": "team-a", "name": name, "ownerReferences": owners},
            "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"app": "vllm"}},
                     "template": template}}


def lws_pod(lws: dict, sts: dict, group: int, worker: int) -> dict:
    """Pod `worker` of group `group` as the LWS controller makes it (the leader through the
    LeaderWorkerSet's StatefulSet, the workers through their leader's: `sts`) and the pod webhook
    gates it."""
    lwt = lws["spec"]["leaderWorkerTemplate"]
    tpl = lwt["leaderTemplate"] if worker == 0 else lwt["workerTemplate"]
    name = lws["metadata"]["name"]
    return pods.gated({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "team-a", "name": f"{name}-{group}" + (f"-{worker}" if worker else ""),
        "labels": {**(tpl["metadata"].get("labels") or {}), pods.LWS_NAME_LABEL: name,
                   pods.LWS_GROUP_INDEX_LABEL: str(group), pods.LWS_WORKER_INDEX_LABEL: str(worker)},
        "annotations": dict(tpl["metadata"].get("annotations") or {}), "ownerReferences": owner(sts)},
        "spec": json_copy(tpl["spec"])})


async def two_groups(h: Harness, identity: str = "controller") -> tuple:
    """A LeaderWorkerSet of two groups of three (leader 2 GPUs, workers 1) on a quota of 4 GPUs:
    group 0 admitted, group 1 waiting for it. Returns the controller and the two groups."""
    h.api.install_crds("leaderworkersets.leaderworkerset.x-k8s.io")
    h.bind_ungated_pods()
    for obj in quota_objects(4):
        await h.apply(obj)
    ctl = await h.controller(dataclasses.replace(FAST, integrations=FRAMEWORKS), identity=identity)
    marked = LWS.marked({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"namespace": "team-a", "name": "vllm", "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "leaderTemplate": template(2),
                                                           "workerTemplate": template(1)}}}, "default")
    lws = await h.kube.create(kind_of(LWS), "team-a", marked)
    names = LWS.workload_names(lws)
    group0, group1 = GroupLife(h, names[0]), GroupLife(h, names[1])

    lwt = lws["spec"]["leaderWorkerTemplate"]
    leaders = await h.kube.create(kind_of(BY_FRAMEWORK["statefulset"]), "team-a", statefulset("vllm", lwt["leaderTemplate"], owner(lws)))
    workers: dict[int, dict] = {}

    async def make(life: GroupLife, group: int, worker: int) -> None:
        if worker == 0:
            sts = leaders
        else:
            if group not in workers:
                leader = life.pod(f"vllm-{group}")
                workers[group] = await h.kube.create(
                    kind_of(BY_FRAMEWORK["statefulset"]), "team-a",
                    statefulset(f"vllm-{group}", lwt["workerTemplate"], owner(leader)))
            sts = workers[group]
        pod = lws_pod(lws, sts, group, worker)
        life.names.append(pod["metadata"]["name"])
        await h.kube.create(K.PODS, "team-a", pod)

    # group 0's leader and one worker: no Workload until its size of pods exists
    await make(group0, 0, 0)
    await make(group0, 0, 1)
    await asyncio.sleep(0.5)
    assert group0.workload() is None and all(pods.is_gated(p) for p in group0.pods())
    await make(group0, 0, 2)
    await eventually(lambda: group0.workload() is not None, what="group 0's Workload created")
    wl = group0.workload()
    controllers = [(r["kind"], r["name"], r["uid"]) for r in wl["metadata"]["ownerReferences"] if r.get("controller")]
    assert controllers == [("LeaderWorkerSet", "vllm", lws["metadata"]["uid"])]
    assert {ps["name"]: ps["count"] for ps in wl["spec"]["podSets"]} == {"leader": 1, "worker": 2}

    # admitted: its pods ungated with the flavor, each annotated with its pod set
    await eventually(group0.all_ungated, what="group 0's pods ungated")
    assert W.is_true(group0.workload(), "Admitted")
    assert all(p["spec"]["nodeSelector"] == {"team": "a", **GH200} for p in group0.pods())
    assert {p["metadata"]["name"]: p["metadata"]["annotations"][pods.ROLE_HASH] for p in group0.pods()} == {
        "vllm-0": "leader", "vllm-0-1": "worker", "vllm-0-2": "worker"}

    # group 1: its own Workload, waiting gated for the quota group 0 holds
    for worker in range(3):
        await make(group1, 1, worker)
    await eventually(lambda: group1.workload() is not None, what="group 1's Workload created")
    await asyncio.sleep(0.3)
    assert not W.is_true(group1.workload(), "QuotaReserved") and all(pods.is_gated(p) for p in group1.pods())
    return ctl, group0, group1


async def test_a_leaderworkersets_group_through_the_controller():
    async with Harness(kubernetes_minor=27) as h:
        ctl, group0, group1 = await two_groups(h)

        # preempted by a Job needing every GPU: group 0's pods deleted, the quota held until all ended
        await group0.preempted()
        await eventually(lambda: not group0.pods(), what="group 0's pods gone (finalizers removed)")
        assert all(pods.is_gated(p) for p in group1.pods())

        # group 1 runs once the quota is free
        await h.kube.delete(K.JOBS, "team-a", "urgent")
        await eventually(group1.all_ungated, what="group 1 admitted once the quota is free")

        await no_violation(h, ctl)


async def test_a_restarted_controller_keeps_an_admitted_group_and_the_one_waiting():
    """Killed with group 0 admitted and group 1 waiting: the next controller rebuilds group 0's
    reservation from its Workload (its pods keep running, none gated or deleted), makes no second
    Workload for either group, keeps group 1 waiting on the quota group 0 holds, and admits it once
    group 0's pods have ended."""
    async with Harness(kubernetes_minor=27) as h:
        first, group0, group1 = await two_groups(h, identity="first")
        uids = {g.workload()["metadata"]["uid"] for g in (group0, group1)}
        await h.kill(first)
        second = await h.controller(dataclasses.replace(FAST, integrations=FRAMEWORKS), identity="second")
        await eventually(lambda: second.recovered, what="the second controller leading")
        assert len(second.engine.state.admitted) == 1
        await asyncio.sleep(0.5)
        assert group0.all_ungated() and len(group0.pods()) == 3 and W.is_true(group0.workload(), "Admitted")
        assert all(pods.is_gated(p) for p in group1.pods()) and not W.is_true(group1.workload(), "QuotaReserved")
        workloads = [w for w in h.api.cluster.store.kind(R.WORKLOADS.storage_key).values()]
        assert {w["metadata"]["uid"] for w in workloads} == uids

        for name in ("vllm-0", "vllm-0-1", "vllm-0-2"):  # group 0 ends: its pods succeed
            await group0.phase(name, "Succeeded")
        await eventually(lambda: W.is_true(group0.workload(), "Finished"), what="group 0 finished")
        await eventually(group1.all_ungated, what="group 1 admitted in the room group 0 left")
        await no_violation(h, second)


async def test_pods_are_listed_and_watched_once_with_every_pod_kind_enabled():
    """Single pods, pod groups and LeaderWorkerSet groups are all read from one cache of pods: one
    list and one watch of pods on the API server, not one per kind (each a whole copy of the
    cluster's pods in the controller)."""
    async with Harness(kubernetes_minor=27) as h:
        h.api.install_crds("leaderworkersets.leaderworkerset.x-k8s.io")
        ctl = await h.controller(dataclasses.replace(FAST, integrations=FRAMEWORKS))
        await eventually(lambda: ctl.ready, what="ready")

        def pod_reads() -> list[str]:
            return sorted("watch" if "watch=" in p else "list"
                          for m, p in h.api.requests if m == "GET" and p.split("?")[0] == "/api/v1/pods")

        await eventually(lambda: "watch" in pod_reads(), what="the pods watched")
        await asyncio.sleep(0.3)
        assert pod_reads() == ["list", "watch"]
