"""Ray (ray.io/v1, KubeRay): RayCluster (Kueue's "ray.io/raycluster") and RayJob ("ray.io/rayjob").
Pod sets: ``head`` (1 pod), one per worker group named as the group in lower case, of
``replicas`` (default 1) x ``numOfHosts`` pods, and for a RayJob submitted in K8sJobMode (the
default) ``submitter`` (1 pod: ``spec.submitterPodTemplate``, else KubeRay's default submitter);
suspended by ``spec.suspend``. A RayCluster never finishes.

Pods: KubeRay labels them ``ray.io/node-type: head|worker`` and ``ray.io/group: <group>`` and owns
them through the RayCluster (a RayJob's cluster is owned by the RayJob); a RayJob's submitter is a
batch/v1 Job the RayJob owns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuqueue.jobframework.integration import Finished, PodFacts, Slot, TemplatedJob, count_of, get_path
from gpuqueue.jobframework.podset import PodSet

NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
HEAD, SUBMITTER = "head", "submitter"
K8S_JOB_MODE = "K8sJobMode"


def cluster_slots(obj: Mapping[str, Any], root: tuple) -> list[Slot]:
    """The pod sets of a RayClusterSpec at ``root``."""
    where = ".".join(root)
    get_path(obj, root + ("headGroupSpec", "template"))
    slots = [Slot(HEAD, 1, root + ("headGroupSpec", "template"))]
    groups = get_path(obj, root + ("workerGroupSpecs",), required=False) or []
    for i, wg in enumerate(groups):
        w = f"{where}.workerGroupSpecs[{i}]"
        if not isinstance(wg, Mapping) or not wg.get("groupName"):
            raise ValueError(f"{w}.groupName: Required value")
        count = count_of(wg.get("replicas"), f"{w}.replicas")
        hosts = count_of(wg.get("numOfHosts"), f"{w}.numOfHosts")
        slots.append(Slot(wg["groupName"].lower(), count * hosts if hosts > 1 else count,
                          root + ("workerGroupSpecs", i, "template")))
    return slots


def ray_pod_set(pod: PodFacts) -> str | None:
    if pod.labels.get(NODE_TYPE_LABEL) == HEAD:
        return HEAD
    group = pod.labels.get(GROUP_LABEL)
    return group.lower() if group else None


class RayCluster(TemplatedJob):
    framework = "ray.io/raycluster"
    group, version, kind, plural = "ray.io", "v1", "RayCluster", "rayclusters"
    pod_keys = (NODE_TYPE_LABEL, GROUP_LABEL)

    def slots(self, obj):
        return cluster_slots(obj, ("spec",))

    def finished(self, obj):
        return None

    def is_active(self, obj):
        return (obj.get("status") or {}).get("state") == "ready"

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return ray_pod_set(pod)


def default_submitter(job: Mapping[str, Any]) -> dict:
    """KubeRay's submitter pod when the RayJob names none (the head's image)."""
    containers = get_path(job, ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers"))
    image = containers[0].get("image") if containers and isinstance(containers[0], Mapping) else None
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": image,
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}}]}}


class RayJob(TemplatedJob):
    framework = "ray.io/rayjob"
    group, version, kind, plural = "ray.io", "v1", "RayJob", "rayjobs"
    pod_keys = (NODE_TYPE_LABEL, GROUP_LABEL)

    @staticmethod
    def k8s_job_mode(obj: Mapping[str, Any]) -> bool:
        return ((obj.get("spec") or {}).get("submissionMode") or K8S_JOB_MODE) == K8S_JOB_MODE

    def queued_elsewhere(self, obj):
        """Kueue's rule: a RayJob sent to an existing cluster (``clusterSelector``, no cluster of its
        own) is not queued; the cluster is."""
        spec = obj.get("spec") or {}
        if spec.get("clusterSelector") and spec.get("rayClusterSpec") is None:
            return "it runs on an existing RayCluster (spec.clusterSelector), which is queued on its own"
        return None

    def slots(self, obj):
        slots = cluster_slots(obj, ("spec", "rayClusterSpec"))
        if self.k8s_job_mode(obj) and (obj.get("spec") or {}).get("submitterPodTemplate") is not None:
            slots.append(Slot(SUBMITTER, 1, ("spec", "submitterPodTemplate")))
        return slots

    def pod_sets(self, obj, lookup=None):
        sets = super().pod_sets(obj, lookup)
        if self.k8s_job_mode(obj) and not any(ps.name == SUBMITTER for ps in sets):
            sets.append(PodSet(SUBMITTER, 1, default_submitter(obj)))
        return sets

    def finished(self, obj):
        status = obj.get("status") or {}
        if status.get("jobDeploymentStatus") not in ("Complete", "Failed"):
            return None
        return Finished(status.get("jobStatus") == "SUCCEEDED", status.get("message") or "")

    def is_active(self, obj):
        return (obj.get("status") or {}).get("jobDeploymentStatus", "Suspended") != "Suspended"

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return SUBMITTER if pod.via == "Job" else ray_pod_set(pod)
