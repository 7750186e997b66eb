"""TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2, Kueue's
"trainer.kubeflow.org/trainjob"): the pod sets are those of the JobSet its runtime would make (one
per replicated job of the TrainingRuntime or ClusterTrainingRuntime it names), with the TrainJob's
own ``trainer.numNodes`` and ``trainer.resourcesPerNode`` applied to the trainer's job; suspended
by ``spec.suspend``. Admission writes the flavors into ``spec.runtimePatches`` under the manager
``kueue.x-k8s.io/manager``, as Kueue does (trainer v2.3 has no podTemplateOverrides), and restore
drops that entry. Its pods are a JobSet's (pod -> Job -> JobSet -> TrainJob).

Kueue renders the JobSet with Trainer's own runtime library; gpuqueue applies the two overrides
that change what is admitted (the trainer's node count and per-node resources) and the other
managers' runtimePatches' nodeSelector and tolerations (they decide which flavors match), not
the ML policies' other effects (environment, commands)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuqueue.jobframework.integration import (Lookup, PodFacts, TemplatedJob, any_active, finished_by_condition,
                                               get_path, json_copy, set_path)
from gpuqueue.jobframework.kinds.jobset import REPLICATED_JOB_LABEL, replicated_job_slots
from gpuqueue.jobframework.podset import PodSet, PodSetInfo

KUEUE_MANAGER = "kueue.x-k8s.io/manager"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
TRAINER_NODE = "node"  # the trainer's replicated job and container, by Trainer's convention
RUNTIME_GROUP = "trainer.kubeflow.org"
CLUSTER_RUNTIME, NAMESPACED_RUNTIME = "ClusterTrainingRuntime", "TrainingRuntime"


def runtime_ref(obj: Mapping[str, Any]) -> tuple[str, str]:
    ref = get_path(obj, ("spec", "runtimeRef"))
    name = ref.get("name") if isinstance(ref, Mapping) else None
    if not name:
        raise ValueError("spec.runtimeRef.name: Required value")
    kind = ref.get("kind") or CLUSTER_RUNTIME
    if kind not in (CLUSTER_RUNTIME, NAMESPACED_RUNTIME) or (ref.get("apiGroup") or RUNTIME_GROUP) != RUNTIME_GROUP:
        raise ValueError(f"spec.runtimeRef: unsupported runtime {ref.get('apiGroup') or RUNTIME_GROUP}/{kind}")
    return kind, name


def _is_trainer(rj: Mapping[str, Any]) -> bool:
    labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(ANCESTOR_LABEL) == TRAINER_STEP or (ANCESTOR_LABEL not in labels and rj.get("name") == TRAINER_NODE)


class TrainJob(TemplatedJob):
    framework = "trainer.kubeflow.org/trainjob"
    group, version, kind, plural = "trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"
    pod_keys = (REPLICATED_JOB_LABEL,)

    def runtime(self, obj: Mapping[str, Any], lookup: Lookup | None) -> Mapping[str, Any]:
        kind, name = runtime_ref(obj)
        namespace = ((obj.get("metadata") or {}).get("namespace") or "") if kind == NAMESPACED_RUNTIME else ""
        runtime = lookup(kind, namespace, name) if lookup is not None else None
        if runtime is None:
            raise ValueError(f"spec.runtimeRef: {kind} {namespace + '/' if namespace else ''}{name} not found")
        return runtime

    def rendered(self, obj: Mapping[str, Any], lookup: Lookup | None) -> dict:
        """The runtime's JobSet spec (``spec.template.spec``) with this TrainJob's overrides."""
        spec = json_copy(get_path(self.runtime(obj, lookup), ("spec", "template", "spec")))
        trainer = get_path(obj, ("spec", "trainer"), required=False) or {}
        for rj in spec.get("replicatedJobs") or ():
            if not _is_trainer(rj):
                continue
            job_spec = rj.setdefault("template", {}).setdefault("spec", {})
            if trainer.get("numNodes") is not None:
                job_spec["parallelism"] = job_spec["completions"] = trainer["numNodes"]
            if trainer.get("resourcesPerNode") is not None:
                for c in ((job_spec.get("template") or {}).get("spec") or {}).get("containers") or ():
                    if c.get("name") == TRAINER_NODE:
                        c["resources"] = json_copy(trainer["resourcesPerNode"])
        for patch in get_path(obj, ("spec", "runtimePatches"), required=False) or ():
            if patch.get("manager") == KUEUE_MANAGER:
                continue  # an admission's own injection is not what is asked for
            _apply_patch(spec, patch)
        return {"spec": {"template": {"spec": spec}}}

    def pod_sets(self, obj, lookup=None):
        rendered = self.rendered(obj, lookup)
        return [PodSet(s.name, s.count, get_path(rendered, s.path))
                for s in replicated_job_slots(rendered, ("spec", "template", "spec"))]

    def run(self, obj, infos: Mapping[str, PodSetInfo]) -> dict | None:
        out = json_copy(obj)
        jobs = []
        for name in sorted(infos):
            info = infos[name]
            pod_spec: dict[str, Any] = {}
            if info.node_selector:
                pod_spec["nodeSelector"] = dict(info.node_selector)
            if info.tolerations:
                pod_spec["tolerations"] = [dict(t) for t in info.tolerations]
            if pod_spec:
                jobs.append({"name": name, "template": {"spec": {"template": {"spec": pod_spec}}}})
        patches = [p for p in out.get("spec", {}).get("runtimePatches") or () if p.get("manager") != KUEUE_MANAGER]
        if jobs:
            patches.append({"manager": KUEUE_MANAGER,
                            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}})
        _set_patches(out, patches)
        set_path(out, self.suspend_path, False)
        return None if out == obj else out

    def restore(self, obj):
        if not self.is_suspended(obj):
            return None
        out = json_copy(obj)
        _set_patches(out, [p for p in out.get("spec", {}).get("runtimePatches") or ()
                           if p.get("manager") != KUEUE_MANAGER])
        return None if out == obj else out

    def finished(self, obj):
        return finished_by_condition(obj, "Complete")

    def is_active(self, obj):
        return any_active(obj, "jobsStatus")

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return pod.labels.get(REPLICATED_JOB_LABEL) or None


def _set_patches(obj: dict, patches: list) -> None:
    if patches:
        obj.setdefault("spec", {})["runtimePatches"] = patches
    else:
        obj.get("spec", {}).pop("runtimePatches", None)


def _apply_patch(spec: dict, patch: Mapping[str, Any]) -> None:
    """Another manager's patch: the nodeSelector and tolerations it gives a replicated job."""
    jobs = {rj.get("name"): rj for rj in spec.get("replicatedJobs") or ()}
    for pj in ((((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {})
               .get("replicatedJobs") or ()):
        target = jobs.get(pj.get("name"))
        pod = (((pj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        if target is None:
            continue
        tspec = target.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
        if pod.get("nodeSelector"):
            tspec.setdefault("nodeSelector", {}).update(pod["nodeSelector"])
        for t in pod.get("tolerations") or ():
            if t not in tspec.setdefault("tolerations", []):
                tspec["tolerations"].append(t)
