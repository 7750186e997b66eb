"""The controller's cache transforms (extender/controller/client/cached_fields.py) drop nothing a reader
uses: recorded Kubernetes 1.24 objects (shared/fixtures/k8s-1.24), and variants of them carrying
the fields a pod may have (init containers, sidecars, overhead, a custom scheduler, deletion,
affinity...), go through every reader of the caches twice - into a controller whose informers
transform, and into one whose informers keep the objects whole - and every answer must be the same:

- the extender's ClusterView (nodes and the GPUs bound pods take, the pods it knows, which
  admitted Workload a pod belongs to) and the Job steering's pods per owner;
- the controller's reading of a Job (managed?, the engine's model, finished?, the Workload built
  from it) and the Job writes made from the cached Job (the PUT bodies, less managedFields, which
  a PUT without them leaves as stored);
- the Workload status writes made from the cached Workload (as the API stores them: a write to
  /status takes the status alone), and the reservation the rebuild reads.
"""
from __future__ import annotations

import json

import orjson
import pytest
from kubernetes_asyncio import client

from gpuqueue.api.base import Toleration
from gpuqueue.api.core import Node, Pod
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.client.cached_fields import transform_for
from gpuqueue.extender.controller.controller import Controller
from gpuqueue.extender.controller.kinds.managed_kinds import batch_job
from gpuqueue.jobframework.podset import PodSetInfo
from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
from gpuqueue.extender.placement.kube import node_info_from_dict
from gpuqueue.extender.scheduler.enforce import judge_pod
from gpuqueue.extender.scheduler.view import CachedPod, controller_uid
from gpuqueue.extender.quota.model import FlavorSpec
from tests.shared_fixtures import k8s_recording
from tests.standin import resources as R
from tests.standin.registry import Cluster

GPU = "nvidia.com/gpu"


def _load(rel: str):
    return json.loads(k8s_recording(rel).read_text())


def copy(obj):
    return orjson.loads(orjson.dumps(obj))


def recorded_jobs() -> list[dict]:
    files = sorted(k8s_recording("job-lifecycle").glob("*.json")) + sorted(k8s_recording("admission").glob("job-stored-*.json"))
    jobs = [json.loads(f.read_text()) for f in files]
    return [j for j in jobs if isinstance(j, dict) and j.get("kind") == "Job" and "status" in j]


def recorded_pod_lists() -> list[list[dict]]:
    return [_load(f"job-lifecycle/{f.name}")["items"] for f in sorted(k8s_recording("job-lifecycle").glob("*podlist.json"))]


def recorded_nodes() -> list[dict]:
    nodes = _load("extender/filter.request.nodeCacheCapable-false.3-nodes.json")["Nodes"]["items"]
    busy = copy(nodes[0])  # a kubelet's node: an image list and volume bookkeeping, which no reader uses
    busy["metadata"]["name"] = "busy-node"
    busy["status"]["images"] = [{"names": [f"registry.example/img-{i}@sha256:{'0' * 64}"], "sizeBytes": 10 ** 9}
                                for i in range(20)]
    busy["status"]["volumesInUse"] = ["kubernetes.io/csi/x^vol-1"]
    busy["spec"]["taints"] = [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
    return nodes + [busy]


def pod_variants(pod: dict) -> list[dict]:
    """The recorded pod, and edits of it with the fields a pod may carry that a reader might use."""
    out = [pod]
    v = copy(pod)
    v["metadata"]["uid"] += "-v1"
    v["metadata"]["name"] += "-v1"
    spec = v["spec"]
    spec["schedulerName"] = "gpuqueue-scheduler"
    spec["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    spec["priorityClassName"], spec["priority"] = "high-priority", 1000
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-GH200-480GB"]}]}]}}}
    spec["initContainers"] = [
        {"name": "sidecar", "image": "proxy", "restartPolicy": "Always", "env": [{"name": "A", "value": "1"}],
         "resources": {"requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}}},
        {"name": "setup", "image": "setup", "command": ["sh", "-c", "true"],
         "resources": {"requests": {"cpu": "8", GPU: "2"}, "limits": {GPU: "2"}}},
    ]
    for c in spec["containers"]:
        c["env"] = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        c["ports"] = [{"containerPort": 8080, "protocol": "TCP"}]
        c["livenessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 10}
    spec["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "targetContainerName": "worker"}]
    out.append(v)
    d = copy(pod)
    d["metadata"]["uid"] += "-v2"
    d["metadata"]["name"] += "-v2"
    d["metadata"]["deletionTimestamp"] = "2026-12-02T11:20:00Z"
    d["metadata"]["deletionGracePeriodSeconds"] = 30
    d["status"]["nominatedNodeName"] = "gh200-node-2"
    out.append(d)
    return out


ADMISSION = {"clusterQueue": "gpu-cluster-queue", "podSetAssignments": [
    {"name": "main", "flavors": {GPU: "gh200"}, "resourceUsage": {GPU: "8"}, "count": 2}]}
FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
          "metadata": {"name": "gh200", "resourceVersion": "1"},
          "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"},
                   "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}


def workloads_of(jobs: list[dict], cluster: Cluster) -> list[dict]:
    """Each Job's Workload as a real server would hold it: created, then its reservation written to
    /status (managedFields kept, as kube-apiserver keeps them)."""
    out = []
    cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a"}})
    seen = set()
    for job in jobs:
        body = W.build_workload(job, 100, None, "q")
        name = body["metadata"]["name"]
        if name in seen:
            continue
        seen.add(name)
        wl = cluster.create(R.WORKLOADS, "team-a", body)
        wl = cluster.update(R.WORKLOADS, "team-a", name,
                            W.reserved(W.status_copy(wl), W.admission_from_status(ADMISSION)), subresource="status")
        out.append(wl)
    return out


class Pair:
    """Two controllers fed the same objects: one with the cache transforms, one without."""

    def __init__(self) -> None:
        self.api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
        self.kept = Controller(self.api)
        self.whole = Controller(self.api)
        for inf in self.whole.informers.values():
            inf.transform = None
        self.views = ControllerClusterView(self.kept), ControllerClusterView(self.whole)

    async def feed(self, informer: str, type_: str, obj: dict) -> None:
        for ctl in (self.kept, self.whole):
            await ctl.informers[informer]._apply(type_, copy(obj))

    def same_view(self, pods: list[dict]) -> None:
        kept, whole = self.views
        assert kept.nodes.states == whole.nodes.states
        assert self.kept.job_steering.pods_by_owner == self.whole.job_steering.pods_by_owner
        for pod in pods:
            uid = pod["metadata"]["uid"]
            assert kept.pod(uid) == whole.pod(uid)
            cached = whole.pod(uid)
            if cached is not None:  # the extender's verdict: enforcement and the flavor to keep to
                assert judge_pod(kept, kept.pod(uid)) == judge_pod(whole, cached)
                assert kept.may_evict(cached) == whole.may_evict(cached)

    async def close(self) -> None:
        await self.api.close()


@pytest.fixture
async def pair():
    p = Pair()
    yield p
    await p.close()


def test_the_transforms_drop_what_they_say_and_keep_the_rest():
    """A guard that the comparisons below compare something: the transformed objects are smaller."""
    job, pod, node = recorded_jobs()[-1], recorded_pod_lists()[-1][0], recorded_nodes()[-1]
    for name, obj in (("jobs", job), ("pods", pod_variants(pod)[1]), ("nodes", node)):
        kept = transform_for(name)(copy(obj))
        assert "managedFields" in obj["metadata"] and "managedFields" not in kept["metadata"]
        assert len(orjson.dumps(kept)) < len(orjson.dumps(obj))
    assert transform_for("jobs")(copy(job))["spec"] == job["spec"]  # Jobs are PUT from the cache


async def test_the_extender_view_and_pod_owners_see_the_same(pair):
    jobs = recorded_jobs()
    for obj in recorded_nodes():
        await pair.feed("nodes", "ADDED", obj)
    await pair.feed("resourceflavors", "ADDED", FLAVOR)
    latest: dict[str, dict] = {}
    for job in jobs:
        latest[job["metadata"]["name"]] = job
    for job in latest.values():
        await pair.feed("jobs", "ADDED", job)
    for wl in workloads_of(list(latest.values()), Cluster(managed_fields=True)):
        await pair.feed("workloads", "ADDED", wl)
    seen: dict[str, dict] = {}
    for pods in recorded_pod_lists():
        for recorded in pods:
            for pod in pod_variants(recorded):
                type_ = "MODIFIED" if pod["metadata"]["uid"] in seen else "ADDED"
                seen[pod["metadata"]["uid"]] = pod
                await pair.feed("pods", type_, pod)
                pair.same_view(list(seen.values()))
    bound = [uid for uid in seen if pair.views[1].nodes.pod_node(uid)]
    assert bound, "no pod was bound: the comparison would be empty"
    assert any(pair.views[1].nodes.states[n].gpus_used for n in pair.views[1].nodes.states)
    for pod in list(seen.values())[::2]:
        await pair.feed("pods", "DELETED", pod)
        pair.same_view(list(seen.values()))


def test_the_pod_and_node_models_read_the_same():
    for pods in recorded_pod_lists():
        for recorded in pods:
            for pod in pod_variants(recorded):
                kept = transform_for("pods")(copy(pod))
                a, b = Pod.model_validate(kept), Pod.model_validate(pod)
                assert a == b
                assert controller_uid(a.metadata) == controller_uid(b.metadata)
                assert CachedPod.of(a) == CachedPod.of(b)  # what the extender's enforcement reads
                for path in (("spec", "nodeName"), ("spec", "schedulerName"), ("status", "phase"),
                             ("metadata", "deletionTimestamp"), ("metadata", "ownerReferences"),
                             ("status", "nominatedNodeName"), ("status", "conditions")):
                    assert (kept.get(path[0]) or {}).get(path[1]) == (pod.get(path[0]) or {}).get(path[1])
    for node in recorded_nodes():
        kept = transform_for("nodes")(copy(node))
        assert node_info_from_dict(kept) == node_info_from_dict(node)
        assert Node.model_validate(kept) == Node.model_validate(node)


async def test_the_controller_reads_and_writes_jobs_the_same(pair):
    flavors = {"main": PodSetInfo.from_flavors("main", [FlavorSpec(
        "gh200", tuple(FLAVOR["spec"]["nodeLabels"].items()),
        tolerations=tuple(Toleration.model_validate(t) for t in FLAVOR["spec"]["tolerations"]))])}
    adapter = batch_job()
    for job in recorded_jobs():
        kept = transform_for("jobs")(copy(job))
        for ctl in (pair.kept, pair.whole):
            ctl.queue_view.local_queues.add(("team-a", "default"))
        assert pair.kept.job_reconciler.is_managed(kept) == pair.whole.job_reconciler.is_managed(job)
        assert adapter.pod_sets(kept) == adapter.pod_sets(job)
        assert W.build_workload(kept, 7, ("p", "src"), "q") == W.build_workload(job, 7, ("p", "src"), "q")
        assert W.priority_class_of(kept, {"p": 1}, {"high-priority": 1000}) == \
            W.priority_class_of(job, {"p": 1}, {"high-priority": 1000})
        assert adapter.finished(kept) == adapter.finished(job)
        assert adapter.stopped(kept) == adapter.stopped(job)
        assert adapter.suspended(kept) == adapter.suspended(job)
        for edit in (lambda j: adapter.run(j, flavors), adapter.suspend, adapter.restore,
                     lambda j: adapter.restore(adapter.run(j, flavors) or j)):
            assert _put_body(edit(copy(kept))) == _put_body(edit(copy(job)))


def _put_body(obj: dict | None) -> dict | None:
    """What a PUT of obj changes on the server: everything but managedFields (a PUT without them
    keeps the stored ones: kube-apiserver's field manager falls back to the live object's)."""
    if obj is None:
        return None
    out = copy(obj)
    out["metadata"].pop("managedFields", None)
    return out


async def test_the_workload_status_writes_store_the_same():
    cluster = Cluster(managed_fields=True)
    jobs = recorded_jobs()
    admission = W.admission_from_status({**ADMISSION, "clusterQueue": "other-queue"})
    for wl in workloads_of(jobs, cluster):
        kept = transform_for("workloads")(copy(wl))
        template = kept["spec"]["podSets"][0]["template"]["spec"]
        assert "env" not in template["containers"][0] and "volumes" not in template  # what no one reads is gone...
        assert kept["status"] == wl["status"]  # ...what the rebuild reads is not
        assert W.admission_from_status(kept["status"]["admission"]) == W.admission_from_status(wl["status"]["admission"])
        for change in (lambda o: W.reserved(o, admission), lambda o: W.requeued(o, "Preempted", "preempted"),
                       lambda o: W.unreserved(o, "Pending", "waiting")):
            bodies = [change(W.status_copy(o)) for o in (kept, wl)]
            stored = [cluster.update(R.WORKLOADS, "team-a", wl["metadata"]["name"], b, subresource="status",
                                     dry_run=True) for b in bodies]
            assert stored[0] == stored[1]
            assert stored[0]["spec"] == wl["spec"]  # the template the body lacked is still there


def test_a_cached_workload_still_matches_its_job():
    """The controller compares a Job with its Workload as the cache holds it (at a restart, and
    before updating a pending one): the kept pod sets must say what the whole ones say, or every
    Workload would look changed and be written again."""
    for job in recorded_jobs():
        whole = W.build_workload(job, 7, None, "q")
        kept = transform_for("workloads")(copy(whole))
        assert not W.pod_sets_differ(kept, W.BATCH_JOB.workload_pod_sets(job), "q")
        assert W.pod_sets_differ(kept, W.BATCH_JOB.workload_pod_sets(job), "other-queue")
