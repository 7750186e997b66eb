"""One valid object of each workload kind gpuqueue queues (valid for the CRDs in
shared/fixtures/crds, or for Kubernetes' own schemas), with what its integration should read from
it. Shared by the adapter, simulator and ownership tests."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

GPU = "nvidia.com/gpu"
QUEUE = {"kueue.x-k8s.io/queue-name": "default"}


def container(name: str, gpus: int = 0, cpu: str | None = None, limits: bool = True) -> dict:
    resources: dict[str, Any] = {}
    if gpus:
        resources["limits" if limits else "requests"] = {GPU: str(gpus)}
    if cpu:
        resources.setdefault("requests", {})["cpu"] = cpu
    return {"name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": resources}


def pod_template(gpus: int = 0, cpu: str | None = None, restart: str | None = "Never", **spec) -> dict:
    pod_spec: dict[str, Any] = {"containers": [container("main", gpus, cpu)], **spec}
    if restart:
        pod_spec["restartPolicy"] = restart
    return {"spec": pod_spec}


@dataclass
class Sample:
    kind: str
    crds: tuple[str, ...]  # CRDs to install (none: a built-in kind)
    obj: dict
    pod_sets: dict[str, tuple[int, dict[str, int]]]  # name -> (count, per-pod engine requests)
    finished_status: dict | None = None  # a status that means finished (succeeded), valid for the CRD
    failed_status: dict | None = None
    pod_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # pod set -> labels its pods carry
    via: dict[str, str | None] = field(default_factory=dict)  # pod set -> kind between pod and owner
    related: list[dict] = field(default_factory=list)  # objects created first (a TrainJob's runtime)

    def fresh(self) -> dict:
        return copy.deepcopy(self.obj)


def _meta(name: str) -> dict:
    return {"name": name, "namespace": "team-a", "labels": dict(QUEUE)}


T0 = "2026-12-02T10:00:00Z"


def _condition(type_: str, reason: str, message: str) -> dict:
    return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": T0}


JOBSET = Sample(
    "JobSet", ("jobsets.jobset.x-k8s.io",),
    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": _meta("train"),
     "spec": {"suspend": True, "replicatedJobs": [
         {"name": "driver", "template": {"spec": {"template": pod_template(cpu="1")}}},
         {"name": "workers", "replicas": 2, "template": {"spec": {
             "parallelism": 4, "completions": 4,
             "template": pod_template(gpus=1, nodeSelector={"topology.kubernetes.io/zone": "a"})}}}]}},
    {"driver": (1, {"cpu": 1000}), "workers": (8, {GPU: 1})},
    finished_status={"conditions": [_condition("Completed", "AllJobsCompleted", "jobset completed successfully")]},
    failed_status={"conditions": [_condition("Failed", "FailedJobs", "jobset failed due to reaching max restarts")]},
    pod_labels={"driver": {"jobset.sigs.k8s.io/replicatedjob-name": "driver"},
                "workers": {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}},
    via={"driver": "Job", "workers": "Job"},
)

PYTORCHJOB = Sample(
    "PyTorchJob", ("pytorchjobs.kubeflow.org",),
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": _meta("bert"),
     "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
         "Worker": {"replicas": 3, "template": pod_template(gpus=2, restart=None)},
         "Master": {"replicas": 1, "template": pod_template(gpus=2, restart=None)}}}},
    {"master": (1, {GPU: 2}), "worker": (3, {GPU: 2})},
    finished_status={"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
                                     "message": "PyTorchJob bert is successfully completed."}]},
    failed_status={"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
                                   "message": "PyTorchJob bert is failed because 1 Master replica(s) failed."}]},
    pod_labels={"master": {"training.kubeflow.org/replica-type": "master"},
                "worker": {"training.kubeflow.org/replica-type": "worker"}},
    via={"master": None, "worker": None},
)

MPIJOB = Sample(
    "MPIJob", ("mpijobs.kubeflow.org",),
    {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": _meta("allreduce"),
     "spec": {"runPolicy": {"suspend": True}, "mpiReplicaSpecs": {
         "Launcher": {"replicas": 1, "template": pod_template(cpu="500m", restart=None)},
         "Worker": {"replicas": 2, "template": pod_template(gpus=4, restart=None)}}}},
    {"launcher": (1, {"cpu": 500}), "worker": (2, {GPU: 4})},
    finished_status={"conditions": [{"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded",
                                     "message": "MPIJob team-a/allreduce successfully completed."}]},
    pod_labels={"launcher": {"training.kubeflow.org/job-role": "launcher"},
                "worker": {"training.kubeflow.org/job-role": "worker"}},
    via={"launcher": "Job", "worker": None},
)

TORCH_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                 "resources": {"limits": {GPU: "1"}}}]}}}}}]}}},
}

TRAINJOB = Sample(
    "TrainJob", ("trainjobs.trainer.kubeflow.org", "clustertrainingruntimes.trainer.kubeflow.org"),
    {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": _meta("llama"),
     "spec": {"suspend": True, "runtimeRef": {"name": "torch-distributed"},
              "trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {GPU: "4"}}}}},
    {"node": (4, {GPU: 4})},
    finished_status={"conditions": [_condition("Complete", "JobsCompleted", "TrainJob is completed")]},
    pod_labels={"node": {"jobset.sigs.k8s.io/replicatedjob-name": "node"}},
    via={"node": "JobSet"},
    related=[TORCH_RUNTIME],
)

_RAY_HEAD = {"rayStartParams": {}, "template": pod_template(cpu="2", restart=None)}
_RAY_WORKERS = [{"groupName": "GPU-Group", "replicas": 2, "minReplicas": 2, "maxReplicas": 2, "numOfHosts": 2,
                 "rayStartParams": {}, "template": pod_template(gpus=4, restart=None)}]

RAYCLUSTER = Sample(
    "RayCluster", ("rayclusters.ray.io",),
    {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": _meta("serve"),
     "spec": {"suspend": True, "headGroupSpec": copy.deepcopy(_RAY_HEAD), "workerGroupSpecs": copy.deepcopy(_RAY_WORKERS)}},
    {"head": (1, {"cpu": 2000}), "gpu-group": (4, {GPU: 4})},
    pod_labels={"head": {"ray.io/node-type": "head", "ray.io/group": "headgroup"},
                "gpu-group": {"ray.io/node-type": "worker", "ray.io/group": "GPU-Group"}},
    via={"head": None, "gpu-group": None},
)

RAYJOB = Sample(
    "RayJob", ("rayjobs.ray.io",),
    {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": _meta("tune"),
     "spec": {"suspend": True, "entrypoint": "python tune.py", "shutdownAfterJobFinishes": True,
              "rayClusterSpec": {"headGroupSpec": copy.deepcopy(_RAY_HEAD), "workerGroupSpecs": copy.deepcopy(_RAY_WORKERS)},
              "submitterPodTemplate": pod_template(cpu="500m")}},
    {"head": (1, {"cpu": 2000}), "gpu-group": (4, {GPU: 4}), "submitter": (1, {"cpu": 500})},
    finished_status={"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "done"},
    failed_status={"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "exit 1"},
    pod_labels={"head": {"ray.io/node-type": "head"}, "gpu-group": {"ray.io/node-type": "worker", "ray.io/group": "GPU-Group"},
                "submitter": {}},
    via={"head": "RayCluster", "gpu-group": "RayCluster", "submitter": "Job"},
)

LWS = Sample(
    "LeaderWorkerSet", ("leaderworkersets.leaderworkerset.x-k8s.io",),
    {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": _meta("vllm"),
     "spec": {"replicas": 2, "leaderWorkerTemplate": {
         "size": 4, "leaderTemplate": pod_template(gpus=1, restart=None),
         "workerTemplate": pod_template(gpus=4, restart=None)}}},
    {"leader": (1, {GPU: 1}), "worker": (3, {GPU: 4})},
    pod_labels={"leader": {"kueue.x-k8s.io/pod-group-name": "g"}, "worker": {"kueue.x-k8s.io/pod-group-name": "g"}},
)

DEPLOYMENT = Sample(
    "Deployment", (),
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("infer"),
     "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "infer"}},
              "template": {"metadata": {"labels": {"app": "infer"}}, "spec": {"containers": [container("main", 1)]}}}},
    {"main": (1, {GPU: 1})},
)

STATEFULSET = Sample(
    "StatefulSet", (),
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta("shard"),
     "spec": {"replicas": 2, "serviceName": "shard", "selector": {"matchLabels": {"app": "shard"}},
              "template": {"metadata": {"labels": {"app": "shard"}}, "spec": {"containers": [container("main", 2)]}}}},
    {},  # one pod set named by the pods' role hash: checked in its own test
)

POD = Sample(
    "Pod", (),
    {"apiVersion": "v1", "kind": "Pod", "metadata": _meta("notebook"),
     "spec": {"containers": [container("main", 1)]}},
    {"main": (1, {GPU: 1})},
    finished_status={"phase": "Succeeded"},
    failed_status={"phase": "Failed", "message": "OOMKilled"},
    pod_labels={"main": {}},
    via={"main": None},
)

SUSPENDABLE = (JOBSET, PYTORCHJOB, MPIJOB, TRAINJOB, RAYCLUSTER, RAYJOB)
ALL = SUSPENDABLE + (LWS, DEPLOYMENT, STATEFULSET, POD)
