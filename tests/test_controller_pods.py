"""The pod integration through the controller against the stand-in (kubernetes-asyncio over HTTP):
plain pods created as the pod webhook leaves them (pods.gated: the scheduling gate, the managed
label, Kueue's finalizer), each queued as a Workload of its own `pod-<name>-<hash>` controlled by
the pod, admitted by removing the gate with its flavor's nodeSelector, preempted by deleting it
(a pod cannot be suspended) with its quota counted until it has terminated, finished with its
phase, and Kueue's finalizer removed once the pod holds nothing. The stand-in has no kubelet:
the test ends a deleted pod's containers (phase Failed) as the kubelet would."""

from __future__ import annotations

import asyncio
import dataclasses

from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.jobframework.kinds import pods
from gpuqueue.jobframework.names import workload_name
from gpuqueue.extender.controller.kinds.managed_kinds import kind_of
from gpuqueue.jobframework.registry import BY_FRAMEWORK, IntegrationsConfig
from tests.controller_support import FAST, Harness, eventually
from tests.test_controller_kinds import GH200, GPU, WORKLOADS, preemptor, quota_objects

FRAMEWORKS = IntegrationsConfig(("batch/job", "pod"))
REPLICA_SETS = K.Kind("replicasets", "apps", "v1", "replicasets", True, "ReplicaSet")


def plain_pod(name: str, gpus: int, queue: str = "default") -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "team-a", "name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"team": "a"}, "containers": [
            {"name": "c", "image": "x", "command": ["train"], "resources": {"limits": {GPU: str(gpus)}}}]}}
    return pods.gated(pod)


async def pod_controller(h: Harness, gpus: int = 4, frameworks: IntegrationsConfig = FRAMEWORKS,
                         bind: bool = True):
    """A ClusterQueue of `gpus` GPUs, the controller queueing the `frameworks`' kinds, and (`bind`)
    kube-scheduler's part played: an ungated pod gets a node."""
    if bind:
        h.bind_ungated_pods()
    for obj in quota_objects(gpus):
        await h.apply(obj)
    return await h.controller(dataclasses.replace(FAST, integrations=frameworks))


class PodLife:
    def __init__(self, h: Harness, name: str) -> None:
        self.h, self.name = h, name
        self.uid = ""

    async def create(self, gpus: int) -> dict:
        created = await self.h.kube.create(K.PODS, "team-a", plain_pod(self.name, gpus))
        self.uid = created["metadata"]["uid"]
        self.wl_name = workload_name("Pod", "", self.name, self.uid)
        return created

    def pod(self) -> dict | None:
        return self.h.api.cluster.store.get("pods", ("team-a", self.name))

    def workload(self) -> dict | None:
        return self.h.api.cluster.store.get(WORKLOADS, ("team-a", self.wl_name))

    def ungated(self) -> bool:
        pod = self.pod()
        return pod is not None and not pods.is_gated(pod)

    async def phase(self, phase: str) -> None:
        await end_pod(self.h, self.name, phase)


async def end_pod(h: Harness, name: str, phase: str) -> None:
    """The kubelet's part: the pod's containers ended."""
    await kubelet_writes(h, name, lambda status: {**status, "phase": phase})


async def kubelet_writes(h: Harness, name: str, change) -> None:
    """Like the kubelet, the pod's status written (`change(status)`) over the pod it last read and,
    on a conflict (the controller changed the pod in between), read again and retried."""
    for _ in range(20):
        pod = h.api.cluster.store.get("pods", ("team-a", name))
        try:
            await h.kube.replace(K.PODS, {**pod, "status": change(pod.get("status") or {})}, "status")
            return
        except ApiException as err:
            if err.status != 409:
                raise
    raise AssertionError(f"pod {name}: status write conflicted 20 times")


async def test_a_plain_pods_whole_life_through_the_controller():
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h)
        notebook = PodLife(h, "notebook")
        await notebook.create(4)
        # its Workload: Kueue's name, controlled by the pod, one pod set `main` of 1
        await eventually(lambda: notebook.workload() is not None, what="its Workload created")
        wl = notebook.workload()
        assert wl["metadata"]["name"].startswith("pod-notebook-")
        assert wl["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "notebook",
                                                      "uid": notebook.uid, "controller": True,
                                                      "blockOwnerDeletion": True}]
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("main", 1)]
        # admitted: the gate removed, the flavor's nodeSelector added to its own
        await eventually(notebook.ungated, what="ungated on admission")
        assert W.is_true(notebook.workload(), "Admitted")
        assert notebook.pod()["spec"]["nodeSelector"] == {"team": "a", **GH200}
        assert notebook.pod()["spec"]["containers"][0]["command"] == ["train"], "written from a live read"

        # preempted by a Job needing every GPU: the pod is deleted, its quota counts until it ended
        await h.submit(preemptor(4))
        await eventually(lambda: (notebook.pod() or {}).get("metadata", {}).get("deletionTimestamp"),
                         what="the preempted pod deleted")
        assert W.condition(notebook.workload(), "Evicted")["reason"] == "Preempted"
        assert not h.running("team-a", "urgent"), "the preemptor waits for the pod to end"
        assert pods.MANAGED_LABEL in notebook.pod()["metadata"]["finalizers"], "kept until it ended"
        await notebook.phase("Failed")
        await eventually(lambda: h.running("team-a", "urgent"), what="the preemptor admitted")
        # Kueue: the pod ended Failed, its finalizer goes, the pod goes, its Workload with it
        await eventually(lambda: notebook.pod() is None and notebook.workload() is None, what="pod and Workload gone")

        # a pod waits gated while the quota is taken, and runs once it is free; finished with its phase
        train = PodLife(h, "train")
        await train.create(2)
        await eventually(lambda: train.workload() is not None, what="queued")
        assert not W.is_true(train.workload(), "QuotaReserved")
        assert pods.is_gated(train.pod())
        await h.kube.delete(K.JOBS, "team-a", "urgent")
        await eventually(train.ungated, what="admitted once the quota is free")
        await train.phase("Succeeded")
        await eventually(lambda: W.is_true(train.workload(), "Finished"), what="Workload Finished")
        assert W.condition(train.workload(), "Finished")["reason"] == "Succeeded"
        await eventually(lambda: pods.MANAGED_LABEL not in (train.pod()["metadata"].get("finalizers") or ()),
                         what="Kueue's finalizer removed")
        assert train.pod() is not None, "a finished pod stays until its owner deletes it"

        # a pod deleted while gated: its finalizer goes at once, and its Workload with it
        waiting = PodLife(h, "waiting")
        await waiting.create(8)  # more than the ClusterQueue has: never admitted
        await eventually(lambda: waiting.workload() is not None, what="queued")
        await h.kube.delete(K.PODS, "team-a", "waiting")
        await eventually(lambda: waiting.pod() is None and waiting.workload() is None,
                         what="the gated pod and its Workload gone")

        assert h.observer.violations == []
        await h.pods.held()
        assert ctl.job_steering.refused == []


async def test_a_pod_without_the_managed_label_is_not_queued():
    """Only what the webhook gated is the pod integration's (Kueue's managed label): a Job's pods,
    and a pod created before the integration, are not."""
    async with Harness(kubernetes_minor=27) as h:
        await pod_controller(h)
        pod = plain_pod("unmarked", 1)
        del pod["metadata"]["labels"][pods.MANAGED_LABEL]
        await h.kube.create(K.PODS, "team-a", pod)
        await h.submit(preemptor(1))
        await eventually(lambda: h.running("team-a", "urgent"), what="a Job queued")
        kinds = [w["metadata"]["ownerReferences"][0]["kind"] for w in h.api.cluster.store.kind(WORKLOADS).values()]
        assert kinds == ["Job"]


async def test_the_pod_integration_is_refused_on_a_server_older_than_1_27(caplog):
    """Kueue's message, once; the API server drops scheduling gates there, so the webhook gates
    nothing and the controller queues no pod (a GPU one is refused a node by the extender)."""
    caplog.set_level("INFO", logger="gpuqueue.controller")
    async with Harness() as h:  # the stand-in reports v1.24.0+0
        for obj in quota_objects(4):
            await h.apply(obj)
        ctl = await h.controller(dataclasses.replace(FAST, integrations=FRAMEWORKS))
        refused = [r.getMessage() for r in caplog.records if "1.27 or newer" in r.getMessage()]
        assert refused == ["pod integration only supported in Kubernetes 1.27 or newer (this API server is "
                           "v1.24.0+0): pods are not queued; a GPU pod is refused a node by the extender"]
        assert [k.kind.kind for k in ctl.kinds] == ["Job"]
        await h.kube.create(K.PODS, "team-a", plain_pod("notebook", 1))
        await h.submit(preemptor(1))
        await eventually(lambda: h.running("team-a", "urgent"), what="a Job still queued")
        kinds = [w["metadata"]["ownerReferences"][0]["kind"] for w in h.api.cluster.store.kind(WORKLOADS).values()]
        assert kinds == ["Job"]


async def create_marked(h: Harness, framework: str, obj: dict) -> dict:
    """A parent of queued pods (Deployment, StatefulSet) as its webhook leaves it: its pod template
    marked for queue "default"; the gate is put on its pods by the pod webhook, not on the template."""
    marked = BY_FRAMEWORK[framework].marked(obj, "default")
    marked["spec"]["template"]["spec"].pop("schedulingGates")
    return await h.kube.create(kind_of(BY_FRAMEWORK[framework]), "team-a", marked)


def deployment_pod(template: dict, rs: dict, name: str) -> dict:
    """A pod of the Deployment's ReplicaSet, as its controller makes it from the marked template
    and the pod webhook gates it."""
    meta = template["metadata"]
    return pods.gated({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "team-a", "name": name, "labels": dict(meta.get("labels") or {}),
        "annotations": dict(meta.get("annotations") or {}),
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
                             "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": template["spec"]})


async def test_a_deployments_pods_are_each_a_workload_of_their_own():
    """As Kueue: the Deployment's template marked by the webhook, each of its pods queued as a
    plain pod; a preempted one is deleted, its replacement waits gated for quota."""
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h, 8, IntegrationsConfig(("batch/job", "pod", "deployment")))
        deployment = await create_marked(h, "deployment", {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": "team-a", "name": "serve", "labels": {"kueue.x-k8s.io/queue-name": "default"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "serve"}}, "template": {
                "metadata": {"labels": {"app": "serve"}}, "spec": plain_pod("x", 4)["spec"]}}})
        rs = await h.kube.create(REPLICA_SETS, "team-a", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
                "namespace": "team-a", "name": "serve-1", "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve", "controller": True,
                     "uid": deployment["metadata"]["uid"]}]},
            "spec": {"replicas": 2, "selector": deployment["spec"]["selector"],
                     "template": deployment["spec"]["template"]}})
        template = deployment["spec"]["template"]
        lives = [PodLife(h, f"serve-1-{i}") for i in range(2)]
        for life in lives:
            life.uid = (await h.kube.create(K.PODS, "team-a", deployment_pod(template, rs, life.name)))["metadata"]["uid"]
            life.wl_name = workload_name("Pod", "", life.name, life.uid)
        await eventually(lambda: all(life.ungated() for life in lives), what="both admitted and ungated")
        assert all(W.is_true(life.workload(), "Admitted") for life in lives)
        assert all(life.pod()["spec"]["nodeSelector"] == {"team": "a", **GH200} for life in lives)

        await h.submit(preemptor(4))
        await eventually(lambda: any((life.pod() or {}).get("metadata", {}).get("deletionTimestamp")
                                     for life in lives), what="one pod deleted")
        victim = next(life for life in lives if life.pod()["metadata"].get("deletionTimestamp"))
        assert not h.running("team-a", "urgent")
        await victim.phase("Failed")
        await eventually(lambda: h.running("team-a", "urgent"), what="the preemptor admitted")
        await eventually(lambda: victim.pod() is None and victim.workload() is None, what="the victim gone")
        # the ReplicaSet's replacement waits gated until the preemptor is gone
        again = PodLife(h, "serve-1-2")
        again.uid = (await h.kube.create(K.PODS, "team-a", deployment_pod(template, rs, again.name)))["metadata"]["uid"]
        again.wl_name = workload_name("Pod", "", again.name, again.uid)
        await eventually(lambda: again.workload() is not None, what="the replacement queued")
        assert pods.is_gated(again.pod())
        await h.kube.delete(K.JOBS, "team-a", "urgent")
        await eventually(again.ungated, what="the replacement admitted")
        owners = sorted(w["metadata"]["ownerReferences"][0]["kind"] for w in h.api.cluster.store.kind(WORKLOADS).values())
        assert owners == ["Pod", "Pod"]
        assert h.observer.violations == []
        await h.pods.held()
        assert ctl.job_steering.refused == []


async def test_a_running_pod_deleted_by_its_owner_holds_its_quota_until_it_ended():
    """Its Workload goes with it, but another pod is admitted to its GPUs only once its containers
    ended (Kueue's finalizer keeps it until then; the controller removes it)."""
    async with Harness(kubernetes_minor=27) as h:
        await pod_controller(h)
        first, second = PodLife(h, "first"), PodLife(h, "second")
        await first.create(4)
        await eventually(first.ungated, what="the first admitted")
        await h.kube.delete(K.PODS, "team-a", "first")
        await second.create(4)
        await eventually(lambda: second.workload() is not None, what="the second queued")
        for _ in range(20):  # a while: the second stays gated as long as the first runs
            assert pods.is_gated(second.pod()), "admitted while the deleted pod still ran"
            await asyncio.sleep(0.02)
        assert pods.MANAGED_LABEL in first.pod()["metadata"]["finalizers"]
        await first.phase("Failed")
        await eventually(second.ungated, what="the second admitted once the first ended")
        await eventually(lambda: first.pod() is None and first.workload() is None, what="the first gone")
        assert h.observer.violations == []
        await h.pods.held()


async def test_a_preempted_pod_that_never_got_a_node_frees_its_quota_at_once():
    """Admitted (ungated) but not bound - no node had room for it - then preempted: deleted, it can
    never run (the API server binds no pod being deleted), so Kueue's finalizer goes at once and
    the preemptor is admitted without waiting for a kubelet that will never act on it (the pod
    stayed Terminating for ever, holding its quota, and the preemptor waited for ever)."""
    async with Harness(kubernetes_minor=27) as h:
        await pod_controller(h, bind=False)
        stuck = PodLife(h, "stuck")
        await stuck.create(4)
        await eventually(stuck.ungated, what="admitted")
        assert not stuck.pod()["spec"].get("nodeName")
        await h.submit(preemptor(4))
        await eventually(lambda: h.running("team-a", "urgent"), what="the preemptor admitted")
        await eventually(lambda: stuck.pod() is None and stuck.workload() is None, what="the pod and its Workload gone")
        assert h.observer.violations == []
        await h.pods.held()


async def test_a_pod_that_ended_while_no_controller_ran_is_finished_and_released():
    """The next leader finishes its Workload and removes Kueue's finalizer from what it lists."""
    async with Harness(kubernetes_minor=27) as h:
        ctl = await pod_controller(h)
        options = dataclasses.replace(FAST, integrations=FRAMEWORKS)  # the next leader's
        life = PodLife(h, "notebook")
        await life.create(4)
        await eventually(life.ungated, what="admitted")
        await h.kill(ctl)
        await life.phase("Succeeded")
        await h.controller(options)
        await eventually(lambda: W.is_true(life.workload(), "Finished"), what="Workload Finished")
        await eventually(lambda: pods.MANAGED_LABEL not in (life.pod()["metadata"].get("finalizers") or ()),
                         what="Kueue's finalizer removed by the next leader")
        assert h.observer.violations == []
