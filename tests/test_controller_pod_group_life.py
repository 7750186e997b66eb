"""A plain pod group through the controller against the stand-in (reporting 1.27), its pods
created as the pod webhook leaves them (gated, managed, Kueue's finalizer, the role hash): one
Workload named after the group, made only once the group's total count of pods exists, owned by
every pod and controlled by none, a pod set per role; admitted by ungating every pod with its
role's flavor; preempted by deleting every pod, the quota held until all have ended; finished
when as many pods succeeded as it counts; Kueue's finalizer removed. No quota violation at any
write (QuotaObserver, PodObserver)."""

from __future__ import annotations

import asyncio
import dataclasses

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.jobframework.kinds import pods
from gpuqueue.jobframework.registry import BY_FRAMEWORK, IntegrationsConfig
from tests.controller_support import FAST, Harness, eventually
from tests.test_controller_kinds import GH200, WORKLOADS, preemptor
from tests.test_controller_pods import FRAMEWORKS, create_marked, end_pod, plain_pod, pod_controller


def group_pod(name: str, group: str, gpus: int, total: int) -> dict:
    pod = plain_pod(name, gpus)
    pod["metadata"]["labels"][pods.GROUP_NAME_LABEL] = group
    pod["metadata"].setdefault("annotations", {})[pods.GROUP_TOTAL_COUNT] = str(total)
    pod["metadata"]["annotations"].pop(pods.ROLE_HASH, None)
    return pods.gated({**pod, "metadata": {**pod["metadata"]}}) or pod


class GroupLife:
    def __init__(self, h: Harness, group: str) -> None:
        self.h, self.group = h, group
        self.names: list[str] = []

    async def create(self, name: str, gpus: int, total: int) -> dict:
        self.names.append(name)
        return await self.h.kube.create(K.PODS, "team-a", group_pod(name, self.group, gpus, total))

    def pod(self, name: str) -> dict | None:
        return self.h.api.cluster.store.get("pods", ("team-a", name))

    def pods(self) -> list[dict]:
        return [p for p in (self.pod(n) for n in self.names) if p is not None]

    def workload(self) -> dict | None:
        return self.h.api.cluster.store.get(WORKLOADS, ("team-a", self.group))

    def all_ungated(self) -> bool:
        return len(self.pods()) == len(self.names) and not any(pods.is_gated(p) for p in self.pods())

    async def phase(self, name: str, phase: str) -> None:
        await end_pod(self.h, name, phase)

    async def preempted(self) -> None:
        """A Job needing every GPU preempts it: every pod deleted, the Job admitted only once the
        last of them ended (the kubelet's part played here, pod by pod)."""
        await self.h.submit(preemptor(4))
        await eventually(lambda: all(p["metadata"].get("deletionTimestamp") for p in self.pods()),
                         what="every pod of the preempted group deleted")
        assert W.condition(self.workload(), "Evicted")["reason"] == "Preempted"
        *first, last = [p["metadata"]["name"] for p in self.pods()]
        for name in first:
            await self.phase(name, "Failed")
        await asyncio.sleep(0.5)
        assert not self.h.running("team-a", "urgent"), "the preemptor waits for the group's last pod"
        await self.phase(last, "Failed")
        await eventually(lambda: self.h.running("team-a", "urgent"), what="the preemptor admitted")


def pod_events(h: Harness, name: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in h.api.cluster.store.kind("events").values()
            if e["involvedObject"].get("kind") == "Pod" and e["involvedObject"].get("name") == name]


async def no_violation(h: Harness, ctl) -> None:
    """No quota violation at any write, every pod beyond its reservation gone, nothing refused."""
    assert h.observer.violations == []
    await h.pods.held()
    assert ctl.job_steering.refused == []


async def test_a_pod_groups_whole_life_through_the_controller():
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h)
        sweep = GroupLife(h, "sweep")
        leader = await sweep.create("sweep-leader", 2, 3)
        await sweep.create("sweep-w0", 1, 3)
        # Kueue waits for the group's total count of pods before it makes a Workload, and tells
        # each pod why (a Warning Event, ErrWorkloadCompose), once
        await asyncio.sleep(0.5)
        assert sweep.workload() is None and all(pods.is_gated(p) for p in sweep.pods())
        waiting = ("Warning", "ErrWorkloadCompose", "'sweep' group has fewer runnable pods than expected")
        await eventually(lambda: all(pod_events(h, n) == [waiting] for n in ("sweep-leader", "sweep-w0")),
                         what="each pod told why it waits")
        await sweep.create("sweep-w1", 1, 3)
        await eventually(lambda: sweep.workload() is not None, what="the group's Workload created")
        wl = sweep.workload()
        assert sorted((r["name"], r.get("controller", False)) for r in wl["metadata"]["ownerReferences"]) == [
            ("sweep-leader", False), ("sweep-w0", False), ("sweep-w1", False)]
        assert wl["metadata"]["annotations"][pods.IS_GROUP_WORKLOAD] == "true"
        roles = {ps["name"]: ps["count"] for ps in wl["spec"]["podSets"]}
        assert roles == {leader["metadata"]["annotations"][pods.ROLE_HASH]: 1,
                         sweep.pod("sweep-w0")["metadata"]["annotations"][pods.ROLE_HASH]: 2}
        # admitted: every pod ungated with its role's flavor
        await eventually(sweep.all_ungated, what="every pod of the group ungated")
        assert W.is_true(sweep.workload(), "Admitted")
        assert all(p["spec"]["nodeSelector"] == {"team": "a", **GH200} for p in sweep.pods())
        assert pod_events(h, "sweep-w1") == [] and pod_events(h, "sweep-leader") == [waiting]  # complete: none more

        # preempted by a Job needing every GPU: every pod deleted, the quota held until all ended
        await sweep.preempted()
        await eventually(lambda: not sweep.pods() and sweep.workload() is None, what="the group and its Workload gone")

        # a group waits gated while the quota is taken, runs once it is free, finishes
        evals = GroupLife(h, "eval")
        await evals.create("eval-0", 1, 2)
        await evals.create("eval-1", 1, 2)
        await eventually(lambda: evals.workload() is not None, what="queued")
        assert not W.is_true(evals.workload(), "QuotaReserved")
        await h.kube.delete(K.JOBS, "team-a", "urgent")
        await eventually(evals.all_ungated, what="admitted once the quota is free")
        await evals.phase("eval-0", "Succeeded")
        await asyncio.sleep(0.3)
        assert not W.is_true(evals.workload(), "Finished"), "finished when every pod it counts succeeded"
        await evals.phase("eval-1", "Succeeded")
        await eventually(lambda: W.is_true(evals.workload(), "Finished"), what="Workload Finished")
        await eventually(lambda: all(pods.MANAGED_LABEL not in (p["metadata"].get("finalizers") or ())
                                     for p in evals.pods()), what="Kueue's finalizers removed")

        await no_violation(h, ctl)


def statefulset_pod(sts: dict, i: int) -> dict:
    """Pod `i` of the StatefulSet, as its controller makes it from the marked template and the pod
    webhook gates it."""
    template = sts["spec"]["template"]
    meta = template["metadata"]
    return pods.gated({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "team-a", "name": f"{sts['metadata']['name']}-{i}",
        "labels": {**(meta.get("labels") or {}), "apps.kubernetes.io/pod-index": str(i)},
        "annotations": dict(meta.get("annotations") or {}),
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts["metadata"]["name"],
                             "uid": sts["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": template["spec"]})


async def test_a_statefulsets_pods_are_one_group_through_the_controller():
    """As Kueue: the StatefulSet's template marked by its webhook (group name, total count, fast
    admission); its pods are one group, queued from its first pod for the whole count, ungated
    as they come; preempted, every pod is deleted and the quota held until all ended; the pods
    its controller makes again wait gated for quota, and run once it is free."""
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h, frameworks=IntegrationsConfig(("batch/job", "pod", "statefulset")))
        sts = await create_marked(h, "statefulset", {
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"namespace": "team-a", "name": "shard", "labels": {"kueue.x-k8s.io/queue-name": "default"}},
            "spec": {"replicas": 2, "serviceName": "shard", "selector": {"matchLabels": {"app": "shard"}},
                     "template": {"metadata": {"labels": {"app": "shard"}}, "spec": plain_pod("x", 2)["spec"]}}})
        group = sts["spec"]["template"]["metadata"]["labels"][pods.GROUP_NAME_LABEL]
        assert group == BY_FRAMEWORK["statefulset"].workload_name(sts)
        shard = GroupLife(h, group)

        async def make(i: int) -> None:
            shard.names.append(f"shard-{i}")
            await h.kube.create(K.PODS, "team-a", statefulset_pod(sts, i))

        # its controller makes pod 0 first (OrderedReady): queued at once for the whole count
        await make(0)
        await eventually(lambda: shard.workload() is not None, what="the group's Workload from its first pod")
        assert [ps["count"] for ps in shard.workload()["spec"]["podSets"]] == [2]
        await eventually(shard.all_ungated, what="pod 0 ungated on admission")
        await make(1)
        await eventually(shard.all_ungated, what="pod 1 ungated as it joins the admitted group")
        assert all(p["spec"]["nodeSelector"] == {"team": "a", **GH200} for p in shard.pods())

        # preempted: every pod deleted, the quota held until both ended
        await shard.preempted()
        await eventually(lambda: not shard.pods(), what="the pods gone (finalizers removed)")

        # its controller makes them again: queued afresh, gated while the quota is taken
        shard.names.clear()
        await make(0)
        await make(1)
        await eventually(lambda: shard.workload() is not None and not W.is_true(shard.workload(), "Finished"),
                         what="queued again")
        await asyncio.sleep(0.3)
        assert all(pods.is_gated(p) for p in shard.pods())
        await h.kube.delete(K.JOBS, "team-a", "urgent")
        await eventually(shard.all_ungated, what="running again once the quota is free")

        await no_violation(h, ctl)


async def test_an_admitted_group_is_kept_across_a_controller_restart():
    """A new leader rebuilds the group from its pods and finds its Workload by the group: the
    admission stands (no second Workload, no pod gated again), and a preemption after the
    restart still waits for every pod of the group."""
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h)
        options = dataclasses.replace(FAST, integrations=FRAMEWORKS)  # the next leader's
        sweep = GroupLife(h, "sweep")
        for i in range(2):
            await sweep.create(f"sweep-{i}", 2, 2)
        await eventually(sweep.all_ungated, what="admitted and ungated")
        admitted = sweep.workload()["metadata"]["uid"]
        await h.kill(ctl)
        ctl = await h.controller(options, identity="next")
        await eventually(lambda: ctl.recovered, what="the new controller leads")
        await asyncio.sleep(0.5)
        assert sweep.workload()["metadata"]["uid"] == admitted and W.is_true(sweep.workload(), "Admitted")
        assert [w["metadata"]["name"] for w in h.api.cluster.store.kind(WORKLOADS).values()] == ["sweep"]
        assert sweep.all_ungated()

        await sweep.preempted()
        assert h.observer.violations == []
        await h.pods.held()


async def test_a_pod_of_a_pending_group_ungated_by_its_tenant_is_deleted():
    """The webhook lets only the controller lift the gate; with it bypassed, a pod of a group whose
    Workload holds no reservation runs without an admission: the controller stops the group (a
    pod cannot be suspended: its pods are deleted), as it stops a single pod."""
    async with Harness(kubernetes_minor=27) as h:
        await pod_controller(h)
        big = GroupLife(h, "big")
        for i in range(2):
            await big.create(f"big-{i}", 4, 2)  # 8 GPUs: more than the ClusterQueue has
        await eventually(lambda: big.workload() is not None, what="queued")
        live = big.pod("big-0")
        await h.kube.replace(K.PODS, pods.ungated(live, None))
        await eventually(lambda: (big.pod("big-0") or {}).get("metadata", {}).get("deletionTimestamp"),
                         what="the ungated pod deleted by the controller")
        assert not W.is_true(big.workload(), "QuotaReserved")
        assert h.observer.violations == []


async def test_a_preempted_group_whose_pods_never_got_a_node_frees_its_quota_at_once():
    """Admitted (ungated) but not bound, then preempted: its pods, deleted, can never run, so their
    finalizers go at once and the preemptor is admitted without waiting for a kubelet."""
    async with Harness(kubernetes_minor=27) as h:
        await pod_controller(h, bind=False)
        sweep = GroupLife(h, "sweep")
        for i in range(2):
            await sweep.create(f"sweep-{i}", 2, 2)
        await eventually(sweep.all_ungated, what="admitted")
        await h.submit(preemptor(4))
        await eventually(lambda: h.running("team-a", "urgent"), what="the preemptor admitted")
        await eventually(lambda: not sweep.pods() and sweep.workload() is None, what="the group and its Workload gone")
        await no_violation(h, ctl=h.controllers[0])



async def test_a_group_that_does_not_retry_is_finished_once_every_pod_ended():
    """`kueue.x-k8s.io/retriable-in-group: "false"`: no failed pod is replaced, so once every pod of
    the group has ended its Workload is finished (Kueue's words: the count that succeeded) and its
    quota goes to the next - it was held for as long as the ended pods existed."""
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h)
        once = GroupLife(h, "once")
        for i in range(2):
            pod = group_pod(f"once-{i}", "once", 2, 2)
            pod["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"] = "false"
            once.names.append(pod["metadata"]["name"])
            await h.kube.create(K.PODS, "team-a", pod)
        await eventually(once.all_ungated, what="admitted")
        waiting = preemptor(4)
        waiting["metadata"]["name"] = "next"
        del waiting["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]  # not above the group: it waits
        await h.submit(waiting)
        await asyncio.sleep(0.3)
        assert not h.running("team-a", "next")
        await once.phase("once-0", "Succeeded")
        await once.phase("once-1", "Failed")
        await eventually(lambda: W.is_true(once.workload(), "Finished"), what="the group's Workload finished")
        finished = W.condition(once.workload(), "Finished")
        assert (finished["reason"], finished["message"]) == ("Succeeded", "Pods succeeded: 1/2.")
        await eventually(lambda: h.running("team-a", "next"), what="the next Job admitted in its room")
        await no_violation(h, ctl)


async def test_a_failed_pod_of_a_running_group_is_replaced_within_its_admission():
    """Retriable (Kueue's default): a pod of an admitted group fails and its owner makes another;
    the new pod joins the group's Workload and is ungated with its flavor, the quota unchanged."""
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h)
        train = GroupLife(h, "train")
        for i in range(2):
            await train.create(f"train-{i}", 2, 2)
        await eventually(train.all_ungated, what="admitted")
        await train.phase("train-1", "Failed")
        await train.create("train-1b", 2, 2)
        await eventually(lambda: train.pod("train-1b") and not pods.is_gated(train.pod("train-1b")),
                         what="the replacement ungated")
        assert train.pod("train-1b")["spec"]["nodeSelector"] == {"team": "a", **GH200}
        # the Workload gains the new owner in a write of its own, which may land after the ungating
        await eventually(lambda: "train-1b" in {r["name"] for r in train.workload()["metadata"]["ownerReferences"]},
                         what="the replacement an owner of the Workload")
        assert W.is_true(train.workload(), "Admitted") and not W.is_true(train.workload(), "Finished")
        await no_violation(h, ctl)
