"""Every kind with a suspend flag, queued by the controller, against the stand-in serving the kind's
published CRD (shared/fixtures/crds), its own controller stood in for by tests/kind_controllers.py:
created suspended (as the webhook leaves it), its Workload created with Kueue's name and its pod
sets, admitted with a flavor per pod set (each template carries its own flavor's nodeSelector),
running, preempted by a higher-priority Job and requeued (suspended, its pods gone before the
preemptor starts, its templates restored), resumed, finished (Workload Finished) or deleted."""

from __future__ import annotations

import dataclasses

import pytest

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.kinds.managed_kinds import RUNTIMES, kind_of
from gpuqueue.jobframework.names import workload_name
from gpuqueue.jobframework.registry import BY_KIND, IntegrationsConfig
from tests.controller_support import FAST, Harness, eventually
from tests.kind_controllers import KindControllers, as_applied, finish
from tests.workload_kinds import GPU, JOBSET, MPIJOB, PYTORCHJOB, RAYCLUSTER, RAYJOB, TRAINJOB, Sample

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
CPU_NODES = {"node-pool": "cpu"}
WORKLOADS = "workloads.kueue.x-k8s.io"


def quota_objects(gpus: int) -> list[dict]:
    """cpu from one flavor and GPUs from another (two resource groups): a pod set asking for cpu
    only and one asking for GPUs get different flavors."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "cpu-nodes"},
         "spec": {"nodeLabels": CPU_NODES}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gh200"},
         "spec": {"nodeLabels": GH200}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
                  "resourceGroups": [
                      {"coveredResources": ["cpu"], "flavors": [
                          {"name": "cpu-nodes", "resources": [{"name": "cpu", "nominalQuota": 64}]}]},
                      {"coveredResources": [GPU], "flavors": [
                          {"name": "gh200", "resources": [{"name": GPU, "nominalQuota": gpus}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"namespace": "team-a", "name": "default"}, "spec": {"clusterQueue": "cq"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"},
         "value": 1000},
    ]


def preemptor(gpus: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "namespace": "team-a", "name": "urgent",
        "labels": {"kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/priority-class": "urgent"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]}}}}


def total_gpus(sample: Sample) -> int:
    return sum(count * per_pod.get(GPU, 0) for count, per_pod in sample.pod_sets.values())


def gpu_pods(h: Harness) -> list[dict]:
    return [p for p in h.api.cluster.store.kind("pods").values()
            if any(GPU in (c.get("resources") or {}).get("limits", {}) for c in p["spec"]["containers"])]


class Life:
    """One object of a kind, and what the API holds of it."""

    def __init__(self, h: Harness, sample: Sample) -> None:
        self.h, self.sample = h, sample
        self.integ = BY_KIND[sample.kind]
        self.kind = kind_of(self.integ)
        self.name = sample.obj["metadata"]["name"]

    async def create(self) -> None:
        related = {}
        for obj in self.sample.related:  # a TrainJob's runtime
            kind = next(k for ks in RUNTIMES.values() for k in ks if k.kind == obj["kind"])
            related[(obj["kind"], obj["metadata"]["name"])] = await self.h.kube.create(
                kind, obj["metadata"].get("namespace"), obj)
        self.lookup = lambda kind, namespace, name: related.get((kind, name))
        self.created = await self.h.kube.create(self.kind, "team-a", self.sample.fresh())
        self.own = self.templates(self.created)
        self.wl_name = workload_name(self.integ.kind, self.integ.group, self.name, self.created["metadata"]["uid"])

    def templates(self, obj: dict, applied: bool = False) -> dict:
        """Each pod set's template as the object asks for it, or (`applied`) as its pods get it."""
        return {ps.name: ps.template for ps in self.integ.pod_sets(as_applied(obj) if applied else obj, self.lookup)}

    def obj(self) -> dict:
        return self.h.api.cluster.store.get(self.storage, ("team-a", self.name))

    @property
    def storage(self) -> str:
        return f"{self.kind.plural}.{self.kind.group}"

    def workload(self) -> dict | None:
        return self.h.api.cluster.store.get(WORKLOADS, ("team-a", self.wl_name))

    def running(self) -> bool:
        obj = self.obj()
        return obj is not None and not self.integ.is_suspended(obj)

    def pods(self) -> list[dict]:
        return [p for p in self.h.api.cluster.store.kind("pods").values()
                if p["metadata"]["name"].startswith(self.name) and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def assert_admitted_with_a_flavor_per_pod_set(self) -> None:
        wl = self.workload()
        assert W.is_true(wl, "QuotaReserved") and W.is_true(wl, "Admitted")
        assignments = {psa["name"]: psa for psa in wl["status"]["admission"]["podSetAssignments"]}
        assert set(assignments) == set(self.sample.pod_sets)
        labels = {"cpu-nodes": CPU_NODES, "gh200": GH200}
        for name, template in self.templates(self.obj(), applied=True).items():
            count, per_pod = self.sample.pod_sets[name]
            ps = dataclasses.replace(self.integ.pod_sets(as_applied(self.obj()), self.lookup)[0], name=name,
                                     template=template)
            psa = assignments[ps.name]
            assert psa["count"] == count
            flavors = set(psa["flavors"].values())
            assert flavors == {"gh200" if GPU in per_pod else "cpu-nodes"}
            # its own flavor's nodeSelector, on its own template
            selector = ps.template["spec"].get("nodeSelector") or {}
            for flavor in flavors:
                assert labels[flavor].items() <= selector.items(), (ps.name, selector)
            own = (self.own[ps.name]["spec"].get("nodeSelector") or {})
            assert own.items() <= selector.items()
            # its own usage: its pods' requests times its count
            usage = {r: W.parse_engine_int(r, q) for r, q in psa["resourceUsage"].items()}
            assert usage == {r: v * count for r, v in per_pod.items() if r in ("cpu", GPU)}, ps.name

    def assert_restored(self) -> None:
        obj = self.obj()
        assert self.integ.is_suspended(obj)
        assert self.templates(obj) == self.own


LIVES = [JOBSET, PYTORCHJOB, MPIJOB, TRAINJOB, RAYCLUSTER, RAYJOB]
# the CRDs a kind needs besides its own: the owners on its pods' chains, its runtimes
NEEDS = {"RayJob": RAYCLUSTER.crds, "TrainJob": ("trainingruntimes.trainer.kubeflow.org", *JOBSET.crds)}


@pytest.mark.parametrize("sample", LIVES, ids=[s.kind for s in LIVES])
async def test_a_whole_life_through_the_controller(sample: Sample):
    gpus = total_gpus(sample)
    frameworks = ("batch/job", BY_KIND[sample.kind].framework)
    async with Harness() as h:
        h.api.install_crds(*sample.crds, *NEEDS.get(sample.kind, ()))
        for obj in quota_objects(gpus):
            await h.apply(obj)
        ctl = await h.controller(dataclasses.replace(FAST, integrations=IntegrationsConfig(frameworks)))
        async with KindControllers(h.kube, [sample]) as stand_ins:
            life = Life(h, sample)
            await life.create()
            # its Workload, with Kueue's name and its pod sets, admitted with a flavor per pod set
            await eventually(lambda: life.workload() is not None, what="its Workload created")
            wl = life.workload()
            assert {ps["name"]: ps["count"] for ps in wl["spec"]["podSets"]} == \
                {name: count for name, (count, _) in sample.pod_sets.items()}
            assert wl["metadata"]["ownerReferences"][0]["kind"] == sample.kind
            await eventually(life.running, what="admitted and unsuspended")
            life.assert_admitted_with_a_flavor_per_pod_set()
            await eventually(lambda: len(life.pods()) == sum(c for c, _ in sample.pod_sets.values()),
                             what="its pods made by its controller")
            running_gpus = sum(h.pods._gpus(p) for p in life.pods())
            assert running_gpus == gpus

            # preempted by a Job that needs every GPU: suspended, pods gone before the Job starts
            await h.submit(preemptor(gpus))
            await eventually(lambda: h.running("team-a", "urgent"), timeout=10, what="the preemptor admitted")
            assert not any(p for p in life.pods() if h.pods._gpus(p)), "its GPU pods gone before the preemptor ran"
            assert not life.running()
            await eventually(lambda: W.is_true(life.workload(), "Requeued")
                             and "admission" not in life.workload()["status"], what="requeued")
            assert W.condition(life.workload(), "Preempted")["status"] == "True" or \
                W.condition(life.workload(), "Evicted")["reason"] == "Preempted"
            await eventually(lambda: life.integ.is_suspended(life.obj()) and life.templates(life.obj(), True) == life.own,
                             what="its templates restored")

            # resumed once the preemptor is gone
            await h.kube.delete(K.JOBS, "team-a", "urgent")
            await eventually(life.running, timeout=10, what="resumed")
            life.assert_admitted_with_a_flavor_per_pod_set()
            await eventually(lambda: len(life.pods()) == sum(c for c, _ in sample.pod_sets.values()),
                             what="its pods made again")

            # finished
            if sample.finished_status is not None:
                for pod in life.pods():  # the kubelet's part: its pods succeed, then its controller says so
                    await h.kube.replace(K.PODS, {**pod, "status": {**(pod.get("status") or {}), "phase": "Succeeded"}},
                                         "status")
                await finish(h.kube, {**life.obj(), "kind": sample.kind}, sample.finished_status)
                await eventually(lambda: W.is_true(life.workload(), "Finished"), what="Workload Finished")
                finished = W.condition(life.workload(), "Finished")
                # Kueue's job reconciler: reason Succeeded, the message the kind's own controller gave
                assert (finished["reason"], finished["message"]) == ("Succeeded", _own_message(sample.finished_status))
                await eventually(lambda: ("FinishedWorkload", f"Workload 'team-a/{life.workload()['metadata']['name']}' "
                                          "is declared finished") in _events_on(h, sample.kind, life.name),
                                 what="the FinishedWorkload Event on it")
            else:  # a RayCluster serves until deleted: its Workload goes with it
                await h.kube.delete(life.kind, "team-a", life.name)
                await eventually(lambda: life.workload() is None, timeout=10, what="Workload deleted")
            # one Workload for it, none for the child objects its controller made (the preemptor's is
            # gone with it)
            owners = [w["metadata"]["ownerReferences"][0]["kind"] for w in h.api.cluster.store.kind(WORKLOADS).values()]
            assert owners == ([sample.kind] if sample.finished_status is not None else [])
            assert stand_ins.errors == []
        assert h.observer.violations == []
        await h.pods.held()
        assert ctl.job_steering.refused == []


def _own_message(status: dict) -> str:
    """What a finished status says of how it ended: its True condition's message (a Pod's, a
    RayJob's: status.message)."""
    for c in status.get("conditions") or ():
        if c.get("status") == "True":
            return c.get("message", "")
    return status.get("message", "")


def _events_on(h: Harness, kind: str, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in h.api.cluster.store.kind("events").values()
            if e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name]


async def test_a_kind_whose_crd_is_not_installed_is_skipped_with_one_log_line(caplog):
    """As Kueue: the controller starts without it (its caches would otherwise wait for it
    forever), says so once, and queues the kinds that are there."""
    frameworks = ("batch/job", "jobset.x-k8s.io/jobset", "ray.io/rayjob", "trainer.kubeflow.org/trainjob")
    caplog.set_level("INFO", logger="gpuqueue.controller")
    async with Harness() as h:
        h.api.install_crds(*RAYJOB.crds)  # RayJobs are there, their RayClusters' CRD and JobSets' are not
        for obj in quota_objects(16):
            await h.apply(obj)
        ctl = await h.controller(dataclasses.replace(FAST, integrations=IntegrationsConfig(frameworks)))
        await eventually(lambda: ctl.ready, what="ready without the missing kinds")
        skipped = [r.getMessage() for r in caplog.records if "No matching API" in r.getMessage()]
        assert sorted(skipped) == [f"No matching API in the server for job framework, skipped setup of controller: {k}"
                                   for k in ("clustertrainingruntimes.trainer.kubeflow.org/v1alpha1",
                                             "jobsets.jobset.x-k8s.io/v1alpha2", "rayclusters.ray.io/v1",
                                             "trainingruntimes.trainer.kubeflow.org/v1alpha1",
                                             "trainjobs.trainer.kubeflow.org/v1alpha1")]
        assert [r.getMessage() for r in caplog.records if "skipped: it needs" in r.getMessage()] == [
            "integration ray.io/rayjob skipped: it needs rayclusters.ray.io, which is not installed"]
        assert [k.kind.kind for k in ctl.kinds] == ["Job"]
        await h.submit(preemptor(1))
        await eventually(lambda: h.running("team-a", "urgent"), what="a Job still queued")
