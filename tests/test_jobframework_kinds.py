"""Each integration against objects its kind's published CRD accepts: the stand-in serves the CRDs
(shared/fixtures/crds) and validates every object created and every edit the integration makes
(create, run with the flavors, suspend, restore, status) against the CRD's schema, as a 1.24
API server would."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.jobframework import registry
from gpuqueue.jobframework.integration import PodFacts
from gpuqueue.jobframework.names import workload_name
from gpuqueue.jobframework.podset import PodSetInfo
from tests.standin import ApiServer
from tests.standin import resources as R
from tests.workload_kinds import GPU, JOBSET, SUSPENDABLE, TORCH_RUNTIME, TRAINJOB, Sample

GATE_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def infos_for(names, product: str) -> dict[str, PodSetInfo]:
    return {n: PodSetInfo(n, {"nvidia.com/gpu.product": f"{product}-{n}"}, (GATE_TOLERATION,)) for n in names}


class Objects:
    """Custom objects over the kubernetes_asyncio client, by apiVersion/kind."""

    def __init__(self, co: client.CustomObjectsApi, api: ApiServer):
        self.co, self.api = co, api

    def _where(self, obj: dict):
        integ = registry.integration_for(obj)
        group, version = obj["apiVersion"].split("/")
        plural = integ.plural if integ else {"ClusterTrainingRuntime": "clustertrainingruntimes"}[obj["kind"]]
        return group, version, plural, (obj.get("metadata") or {}).get("namespace")

    async def create(self, obj: dict) -> dict:
        group, version, plural, ns = self._where(obj)
        if ns:
            return await self.co.create_namespaced_custom_object(group, version, ns, plural, obj)
        return await self.co.create_cluster_custom_object(group, version, plural, obj)

    async def replace(self, obj: dict) -> dict:
        group, version, plural, ns = self._where(obj)
        return await self.co.replace_namespaced_custom_object(group, version, ns, plural, obj["metadata"]["name"], obj)

    async def replace_status(self, obj: dict) -> dict:
        group, version, plural, ns = self._where(obj)
        return await self.co.replace_namespaced_custom_object_status(group, version, ns, plural,
                                                                     obj["metadata"]["name"], obj)

    def lookup(self, kind: str, namespace: str, name: str):
        rt = {"ClusterTrainingRuntime": ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes")}[kind]
        try:
            return self.api.cluster.get(self.api.cluster.by_path[rt], namespace or None, name)
        except Exception:
            return None


@pytest.fixture
async def objects():
    async with ApiServer() as api:
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a"}})
        async with client.ApiClient(api.client_configuration()) as ac:
            yield Objects(client.CustomObjectsApi(ac), api)
        assert not api.internal_errors


async def created(objects: Objects, sample: Sample) -> dict:
    objects.api.install_crds(*sample.crds)
    for rel in sample.related:
        await objects.create(copy.deepcopy(rel))
    return await objects.create(sample.fresh())


def templates(integ, obj, lookup) -> dict[str, dict]:
    return {ps.name: ps.template for ps in integ.pod_sets(obj, lookup)}


def injected(integ, obj, lookup) -> dict[str, dict]:
    """Each pod set's pod spec as its pods will get it: the TrainJob's injection lives in its
    runtimePatches (Trainer applies it), the others' in the templates."""
    if integ.kind != "TrainJob":
        return {n: t["spec"] for n, t in templates(integ, obj, lookup).items()}
    patch = next(p for p in obj["spec"]["runtimePatches"] if p["manager"] == "kueue.x-k8s.io/manager")
    return {rj["name"]: rj["template"]["spec"]["template"]["spec"]
            for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]}


@pytest.mark.parametrize("sample", SUSPENDABLE, ids=lambda s: s.kind)
async def test_the_whole_life_of_a_suspendable_kind(objects, sample):
    stored = await created(objects, sample)
    integ = registry.integration_for(stored)
    assert integ is not None and integ.kind == sample.kind
    lookup = objects.lookup

    # what is admitted
    assert integ.is_suspended(stored)
    sets = integ.pod_sets(stored, lookup)
    assert {ps.name: (ps.count, ps.engine_requests()) for ps in sets} == sample.pod_sets
    own = templates(integ, stored, lookup)

    # admitted: unsuspended, each pod set with its own flavor (the API server takes the edit)
    running = await objects.replace(integ.run(stored, infos_for(sample.pod_sets, "GH200")))
    assert not integ.is_suspended(running)
    for name, spec in injected(integ, running, lookup).items():
        assert spec["nodeSelector"]["nvidia.com/gpu.product"] == f"GH200-{name}"
        assert GATE_TOLERATION in spec["tolerations"]
    assert integ.run(running, infos_for(sample.pod_sets, "GH200")) is None  # already so

    # preempted: suspended; re-admitted elsewhere, nothing of the first flavor is left
    stopped = await objects.replace(integ.suspend(running))
    assert integ.is_suspended(stopped) and integ.suspend(stopped) is None
    moved = integ.run(stopped, infos_for(sample.pod_sets, "H100"))
    assert all(spec["nodeSelector"]["nvidia.com/gpu.product"] == f"H100-{name}"
               for name, spec in injected(integ, moved, lookup).items())

    # restored: the pod templates as their owner wrote them, the record gone
    restored = await objects.replace(integ.restore(stopped))
    assert templates(integ, restored, lookup) == own
    assert "gpuqueue.io/original-pod-set-scheduling" not in (restored["metadata"].get("annotations") or {})
    assert "runtimePatches" not in restored["spec"]
    assert integ.restore(restored) is None
    assert integ.finished(restored) is None

    # finished, as its controller reports it (a status the CRD accepts)
    latest = restored
    if sample.finished_status is not None:
        latest = await objects.replace_status({**latest, "status": sample.finished_status})
        finished = integ.finished(latest)
        assert finished is not None and finished.succeeded
    if sample.failed_status is not None:
        failed = await objects.replace_status({**latest, "status": sample.failed_status})
        assert integ.finished(failed).succeeded is False

    # its pods, by the labels its controller puts on them
    for name, labels in sample.pod_labels.items():
        assert integ.pod_set_of(PodFacts(labels, {}, sample.via.get(name))) == name


@pytest.mark.parametrize("sample", SUSPENDABLE, ids=lambda s: s.kind)
async def test_the_workload_is_named_as_kueue_names_it(objects, sample):
    stored = await created(objects, sample)
    integ = registry.integration_for(stored)
    meta = stored["metadata"]
    name = integ.workload_name(stored)
    assert name == workload_name(sample.kind, integ.group, meta["name"], meta["uid"])
    assert name.startswith(f"{sample.kind.lower()}-{meta['name']}-") and len(name) == len(sample.kind) + len(meta["name"]) + 7
    assert integ.workload_name({**stored, "metadata": {**meta, "uid": "another"}}) != name


def test_workload_names_match_kueues_hash():
    # jobframework's test case: kind "kind", group "group", owner "owner", uid "uid"
    import hashlib
    assert workload_name("kind", "group", "owner", "uid") == \
        "kind-owner-" + hashlib.sha1(b"kind\ngroup\nowner\nuid").hexdigest()[:5]
    long = workload_name("Kind", "g", "a" * 300, "u")
    assert len(long) == 253 and long.startswith("kind-aaa")


async def test_an_object_the_crd_refuses_never_reaches_an_integration(objects):
    objects.api.install_crds(*JOBSET.crds)
    bad = JOBSET.fresh()
    del bad["spec"]["replicatedJobs"][1]["template"]
    bad["spec"]["replicatedJobs"][0]["replicas"] = "two"
    with pytest.raises(ApiException) as err:
        await objects.create(bad)
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"] == (
        'JobSet.jobset.x-k8s.io "train" is invalid: [spec.replicatedJobs[0].replicas: Invalid value: "string": '
        'spec.replicatedJobs[0].replicas in body must be of type integer: "string", '
        'spec.replicatedJobs[1].template: Required value]')


def test_a_malformed_object_gets_one_line_naming_the_field():
    integ = registry.BY_KIND["JobSet"]
    broken = JOBSET.fresh()
    del broken["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    with pytest.raises(ValueError, match=r"^spec\.replicatedJobs\[1\]\.template\.spec\.template: Required value$"):
        integ.pod_sets(broken)
    broken = JOBSET.fresh()
    broken["spec"]["replicatedJobs"][1]["replicas"] = -2
    with pytest.raises(ValueError, match=r"^spec\.replicatedJobs\[1\]\.replicas: must be a non-negative integer"):
        integ.pod_sets(broken)
    with pytest.raises(ValueError, match=r"^spec\.pytorchReplicaSpecs: Required value$"):
        registry.BY_KIND["PyTorchJob"].pod_sets({"spec": {}})
    with pytest.raises(ValueError, match=r"^spec\.runtimeRef: ClusterTrainingRuntime torch-distributed not found$"):
        registry.BY_KIND["TrainJob"].pod_sets(TRAINJOB.fresh(), lambda *a: None)


async def test_a_tampered_record_is_ignored_on_restore(objects):
    """The record of the templates' own fields is an annotation the tenant can edit: an unreadable
    one restores nothing (the templates stay as admitted), it never crashes the controller."""
    stored = await created(objects, JOBSET)
    integ = registry.integration_for(stored)
    stopped = integ.suspend(integ.run(stored, infos_for(JOBSET.pod_sets, "GH200")))
    stopped["metadata"]["annotations"]["gpuqueue.io/original-pod-set-scheduling"] = "{not json"
    restored = integ.restore(stopped)
    assert "gpuqueue.io/original-pod-set-scheduling" not in restored["metadata"]["annotations"]
    assert templates(integ, restored, None) == templates(integ, stopped, None)


def test_trainjob_reads_its_runtime_and_its_own_overrides():
    integ = registry.BY_KIND["TrainJob"]
    job = TRAINJOB.fresh()

    def lookup(kind, ns, name):
        return TORCH_RUNTIME if (kind, name) == ("ClusterTrainingRuntime", "torch-distributed") else None

    (ps,) = integ.pod_sets(job, lookup)
    assert (ps.name, ps.count, ps.engine_requests()) == ("node", 4, {GPU: 4})
    del job["spec"]["trainer"]
    (ps,) = integ.pod_sets(job, lookup)
    assert (ps.count, ps.engine_requests()) == (1, {GPU: 1})  # the runtime's own
    # another manager's patch says where the trainer may run: the flavor must match it
    job["spec"]["runtimePatches"] = [{"manager": "trainer.kubeflow.org/kubeflow-sdk", "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"accelerator": "gh200"}}}}}}]}}}}]
    (ps,) = integ.pod_sets(job, lookup)
    assert ps.template["spec"]["nodeSelector"] == {"accelerator": "gh200"}
    running = integ.run(job, infos_for(["node"], "GH200"))
    assert [p["manager"] for p in running["spec"]["runtimePatches"]] == ["trainer.kubeflow.org/kubeflow-sdk",
                                                                         "kueue.x-k8s.io/manager"]
    # the admission's own patch is not read back as a request
    (ps,) = integ.pod_sets(running, lookup)
    assert ps.template["spec"]["nodeSelector"] == {"accelerator": "gh200"}
    assert integ.restore(integ.suspend(running))["spec"]["runtimePatches"] == job["spec"]["runtimePatches"]


def test_a_rayjob_without_a_submitter_template_counts_kuberays_default_submitter():
    integ = registry.BY_KIND["RayJob"]
    from tests.workload_kinds import RAYJOB
    job = RAYJOB.fresh()
    del job["spec"]["submitterPodTemplate"]
    sets = {ps.name: (ps.count, ps.engine_requests()) for ps in integ.pod_sets(job)}
    assert sets["submitter"] == (1, {"cpu": 500, "memory": 200 * 1024 * 1024})
    job["spec"]["submissionMode"] = "HTTPMode"
    assert "submitter" not in {ps.name for ps in integ.pod_sets(job)}


def test_a_replica_type_kueue_does_not_know_is_still_counted():
    from tests.workload_kinds import PYTORCHJOB
    job = PYTORCHJOB.fresh()
    job["spec"]["pytorchReplicaSpecs"]["Evil"] = {"replicas": 8, "template": job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]}
    names = [ps.name for ps in registry.BY_KIND["PyTorchJob"].pod_sets(job)]
    assert names == ["master", "worker", "evil"]


def test_the_priority_class_is_read_in_kueues_order():
    from tests.workload_kinds import PYTORCHJOB
    job = PYTORCHJOB.fresh()
    integ = registry.BY_KIND["PyTorchJob"]
    assert integ.priority_class_name(job) is None
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "low"
    assert integ.priority_class_name(job) == "low"
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["priorityClassName"] = "mid"
    assert integ.priority_class_name(job) == "mid"  # the master comes first
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "high"}
    assert integ.priority_class_name(job) == "high"
    js = JOBSET.fresh()
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["priorityClassName"] = "batch"
    assert registry.BY_KIND["JobSet"].priority_class_name(js) == "batch"
