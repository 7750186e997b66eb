"""Stand-ins for the workload kinds' own controllers (JobSet's, the training operator, the MPI
operator, KubeRay), which the API stand-in does not run: what each does with its object that
gpuqueue's controller depends on, through the API over HTTP as a real one would.

- Unsuspended, each pod set gets its pods, the way its kind makes them (``Sample.via``): owned by
  the object itself (a PyTorchJob's, an MPIJob's workers, a RayCluster's), through a child Job
  (a JobSet's replicated jobs, an MPIJob's launcher, a RayJob's submitter: the stand-in's job
  controller makes their pods), or through a RayCluster (a RayJob's head and workers). Pods carry
  the labels the kind's controller puts on them and their pod set's template as it is now (with
  the admitted flavor's nodeSelector).
- Suspended: pods deleted, child Jobs suspended (JobSet) and deleted once stopped, a RayJob's
  RayCluster deleted; the status says nothing is active (JobSet replicatedJobsStatus, RayJob
  jobDeploymentStatus, RayCluster state).
- Finished: the test writes the kind's finished status (``Sample.finished_status``); pods are
  left alone.
"""

from __future__ import annotations

import asyncio
import copy
import logging

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status
from gpuqueue.extender.controller.kinds.managed_kinds import kind_of
from gpuqueue.jobframework.registry import BY_KIND
from tests.workload_kinds import JOBSET, RAYCLUSTER, Sample

log = logging.getLogger("tests.kind_controllers")
POD_SET = "test.gpuqueue.io/pod-set"  # which pod set a stand-in made a pod or child Job for
# How each kind makes the pods of a pod set its Sample does not describe, and the label its
# controller puts on them.
DEFAULT_VIA = {"JobSet": "Job"}
POD_SET_LABEL = {"JobSet": "jobset.sigs.k8s.io/replicatedjob-name", "PyTorchJob": "training.kubeflow.org/replica-type"}


def _ref(obj: dict) -> dict:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _controlled_by(obj: dict, uid: str) -> bool:
    return any(r.get("controller") and r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or ())


class KindControllers:
    def __init__(self, kube: KubeApi, samples: list[Sample], period: float = 0.02) -> None:
        self.kube = kube
        self.samples = {s.kind: s for s in samples}
        if "RayJob" in self.samples:
            self.samples.setdefault("RayCluster", RAYCLUSTER)  # KubeRay runs the RayJob's RayCluster
        if "TrainJob" in self.samples:
            self.samples.setdefault("JobSet", JOBSET)  # the TrainJob's JobSet, run by JobSet's controller
        self.period = period
        self._task: asyncio.Task | None = None
        self.errors: list[str] = []

    async def __aenter__(self) -> "KindControllers":
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _run(self) -> None:
        while True:
            for kind_name, sample in self.samples.items():
                integ = BY_KIND[kind_name]
                try:
                    listed = await self.kube.request("GET", kind_of(integ).path())
                    for obj in listed.get("items") or ():
                        obj.setdefault("apiVersion", integ.api_version)
                        obj.setdefault("kind", integ.kind)
                        await self.sync(obj, sample)
                except Exception as exc:  # noqa: BLE001 - conflicts and races: the next round retries
                    if not is_status(exc, 409) and not is_status(exc, 404):
                        self.errors.append(f"{kind_name}: {exc!r}"[:300])
                        log.warning("%s stand-in: %r", kind_name, exc)
            await asyncio.sleep(self.period)

    # -- one object -----------------------------------------------------------------------------------
    async def sync(self, obj: dict, sample: Sample) -> None:
        integ = BY_KIND[obj["kind"]]
        if integ.finished(obj) is not None:
            return
        if obj["kind"] == "TrainJob":
            await self._train_job(obj)
            return
        ns, uid = obj["metadata"]["namespace"], obj["metadata"]["uid"]
        suspended = integ.is_suspended(obj)
        pods = [p for p in (await self.kube.request("GET", K.PODS.path(ns))).get("items") or ()
                if _controlled_by(p, uid) and not p["metadata"].get("deletionTimestamp")]
        jobs = [j for j in (await self.kube.request("GET", K.JOBS.path(ns))).get("items") or ()
                if _controlled_by(j, uid)]
        for ps in integ.pod_sets(obj):
            via = sample.via.get(ps.name, DEFAULT_VIA.get(obj["kind"]))
            default = {POD_SET_LABEL[obj["kind"]]: ps.name} if obj["kind"] in POD_SET_LABEL else {}
            labels = {**sample.pod_labels.get(ps.name, default), POD_SET: ps.name}
            if via is None:
                await self._pods(obj, ps, labels, [p for p in pods if (p["metadata"].get("labels") or {}).get(
                    POD_SET) == ps.name], 0 if suspended else ps.count)
            elif via == "Job":
                mine = [j for j in jobs if (j["metadata"].get("labels") or {}).get(POD_SET) == ps.name]
                await self._child_job(obj, ps, labels, mine[0] if mine else None, suspended)
        if obj["kind"] == "RayJob":
            await self._ray_cluster(obj, suspended)
        await self._status(obj, suspended, pods, jobs)

    async def _pods(self, obj: dict, ps, labels: dict, have: list[dict], want: int) -> None:
        for pod in have[want:]:
            await self.kube.delete(K.PODS, obj["metadata"]["namespace"], pod["metadata"]["name"])
        template = copy.deepcopy(ps.template)
        for _ in range(want - len(have)):
            body = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "generateName": f"{obj['metadata']['name']}-{ps.name}-",
                "labels": {**((template.get("metadata") or {}).get("labels") or {}), **labels},
                "ownerReferences": [_ref(obj)]}, "spec": template.get("spec") or {}}
            await self.kube.create(K.PODS, obj["metadata"]["namespace"], body)

    async def _child_job(self, obj: dict, ps, labels: dict, job: dict | None, suspended: bool) -> None:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if suspended:
            if job is not None and not job["spec"].get("suspend"):
                job["spec"]["suspend"] = True  # JobSet suspends its Jobs; their controller deletes the pods
                await self.kube.replace(K.JOBS, job)
            elif job is not None and not (job.get("status") or {}).get("active"):
                await self.kube.delete(K.JOBS, ns, job["metadata"]["name"])  # made again from the new template
            return
        if job is not None:
            if job["spec"].get("suspend"):
                await self.kube.delete(K.JOBS, ns, job["metadata"]["name"])
            return
        template = copy.deepcopy(ps.template)
        template.setdefault("metadata", {})["labels"] = {**((template.get("metadata") or {}).get("labels") or {}),
                                                        **labels}
        template["spec"].setdefault("restartPolicy", "Never")
        # a RayJob's submitter Job has the RayJob's name; the others are named after their pod set
        job_name = name if obj["kind"] == "RayJob" else f"{name}-{ps.name}"
        body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": job_name, "labels": labels, "ownerReferences": [_ref(obj)]},
            "spec": {"parallelism": ps.count, "completions": ps.count, "template": template}}
        await self.kube.create(K.JOBS, ns, body)

    async def _train_job(self, obj: dict) -> None:
        """Trainer's controller: the runtime's JobSet with every runtimePatch applied (Kueue's too:
        that is where the admitted flavor is), owned by the TrainJob; deleted when suspended."""
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        kind = kind_of(BY_KIND["JobSet"])
        jobsets = [j for j in (await self.kube.request("GET", kind.path(ns))).get("items") or ()
                   if _controlled_by(j, obj["metadata"]["uid"])]
        if BY_KIND["TrainJob"].is_suspended(obj):
            for js in jobsets:
                await self.kube.delete(kind, ns, js["metadata"]["name"])
            return
        if jobsets:
            return
        spec = (await self.rendered_train_job(obj))["spec"]["template"]["spec"]
        body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": name, "ownerReferences": [_ref(obj)]}, "spec": spec}
        await self.kube.create(kind, ns, body)

    async def rendered_train_job(self, obj: dict) -> dict:
        return effective_train_job(obj, await self.runtime_lookup(obj))

    async def runtime_lookup(self, obj: dict):
        ref = obj["spec"]["runtimeRef"]
        runtime_kind = ref.get("kind") or "ClusterTrainingRuntime"
        k = K.Kind(runtime_kind.lower() + "s", "trainer.kubeflow.org", "v1alpha1", runtime_kind.lower() + "s",
                   runtime_kind == "TrainingRuntime", runtime_kind)
        runtime = await self.kube.get(k, obj["metadata"]["namespace"] if k.namespaced else None, ref["name"])
        return lambda kind, namespace, name: runtime

    async def _ray_cluster(self, obj: dict, suspended: bool) -> None:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        kind = kind_of(BY_KIND["RayCluster"])
        clusters = [c for c in (await self.kube.request("GET", kind.path(ns))).get("items") or ()
                    if _controlled_by(c, obj["metadata"]["uid"])]
        if suspended:
            for c in clusters:  # KubeRay deletes the RayCluster of a suspended RayJob
                await self.kube.delete(kind, ns, c["metadata"]["name"])
        elif not clusters:
            body = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
                "name": f"{name}-raycluster", "ownerReferences": [_ref(obj)]},
                "spec": copy.deepcopy(obj["spec"]["rayClusterSpec"])}
            await self.kube.create(kind, ns, body)

    async def _status(self, obj: dict, suspended: bool, pods: list[dict], jobs: list[dict]) -> None:
        status = copy.deepcopy(obj.get("status") or {})
        if obj["kind"] == "JobSet":
            status["replicatedJobsStatus"] = [
                {"name": rj["name"], "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0,
                 "active": sum(1 for j in jobs if (j["metadata"].get("labels") or {}).get(POD_SET) == rj["name"]
                               and (j.get("status") or {}).get("active"))}
                for rj in obj["spec"]["replicatedJobs"]]
        elif obj["kind"] == "RayJob":
            status["jobDeploymentStatus"] = "Suspended" if suspended else "Running"
        elif obj["kind"] == "RayCluster":
            status["state"] = "suspended" if suspended or not pods else "ready"
        else:
            return
        if status != (obj.get("status") or {}):
            body = {**obj, "status": status}
            await self.kube.replace(kind_of(BY_KIND[obj["kind"]]), body, "status")


def as_applied(obj: dict) -> dict:
    """A TrainJob as Trainer applies it: Kueue's own runtimePatch counted like any other (the
    integration leaves it out of the pod sets: it is not what the TrainJob asks for); other kinds
    as they are."""
    from gpuqueue.jobframework.kinds.trainjob import KUEUE_MANAGER
    if not (obj.get("spec") or {}).get("runtimePatches"):
        return obj
    shown = copy.deepcopy(obj)
    for patch in (shown.get("spec") or {}).get("runtimePatches") or ():
        if patch.get("manager") == KUEUE_MANAGER:
            patch["manager"] = "as-applied"
    return shown


def effective_train_job(obj: dict, lookup) -> dict:
    return BY_KIND["TrainJob"].rendered(as_applied(obj), lookup)


async def finish(kube: KubeApi, obj: dict, status: dict) -> None:
    """The kind's controller reports it finished (`status` merged into its status), retried on
    conflict with the stand-ins' own status writes."""
    from gpuqueue.kube import retry_on_conflict

    kind = kind_of(BY_KIND[obj["kind"]])
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    await retry_on_conflict(lambda: kube.get(kind, ns, name),
                            lambda cur: {**cur, "status": {**(cur.get("status") or {}), **status}},
                            lambda body: kube.replace(kind, body, "status"), attempts=20)
