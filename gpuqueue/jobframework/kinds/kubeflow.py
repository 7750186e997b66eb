"""Kubeflow jobs: PyTorchJob (kubeflow.org/v1, training-operator, Kueue's "kubeflow.org/pytorchjob")
and MPIJob (kubeflow.org/v2beta1, mpi-operator, Kueue's "kubeflow.org/mpijob"). One pod set per
replica type, named in lower case (``master``, ``worker``; ``launcher``, ``worker``), in Kueue's
order, of ``replicas`` (default 1) pods; suspended by ``spec.runPolicy.suspend``.

Pods: the training operator labels them ``training.kubeflow.org/replica-type: <type in lower
case>`` and owns them directly; mpi-operator labels them ``training.kubeflow.org/job-role:
launcher|worker``, owns the workers and runs the launcher as a batch/v1 Job it owns.

gpuqueue counts a replica type that is not in Kueue's order too (after the known ones, by name):
Kueue ignores it, and its pods would run unaccounted."""

from __future__ import annotations

from gpuqueue.jobframework.integration import (PodFacts, Slot, TemplatedJob, count_of, finished_by_condition,
                                               get_path, replica_specs)

REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"


class KubeflowJob(TemplatedJob):
    suspend_path = ("spec", "runPolicy", "suspend")
    replica_specs_field = ""
    replica_order: tuple[str, ...] = ()

    def slots(self, obj):
        out = []
        for rtype, rspec in replica_specs(obj, self.replica_specs_field, self.replica_order):
            where = f"spec.{self.replica_specs_field}[{rtype}]"
            if not isinstance(rspec, dict):
                raise ValueError(f"{where}: must be an object")
            out.append(Slot(rtype.lower(), count_of(rspec.get("replicas"), f"{where}.replicas"),
                            ("spec", self.replica_specs_field, rtype, "template")))
        return out

    def finished(self, obj):
        return finished_by_condition(obj, "Succeeded")

    def is_active(self, obj):
        statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
        return any((s or {}).get("active", 0) for s in statuses.values()) if isinstance(statuses, dict) else False

    def priority_class_name(self, obj, lookup=None):
        """Kueue's order: runPolicy.schedulingPolicy.priorityClass, then the replica types' templates."""
        policy = get_path(obj, ("spec", "runPolicy", "schedulingPolicy"), required=False) or {}
        return policy.get("priorityClass") or super().priority_class_name(obj, lookup)


class PyTorchJob(KubeflowJob):
    framework = "kubeflow.org/pytorchjob"
    group, version, kind, plural = "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"
    replica_specs_field = "pytorchReplicaSpecs"
    replica_order = ("Master", "Worker")
    pod_keys = (REPLICA_TYPE_LABEL,)

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return pod.labels.get(REPLICA_TYPE_LABEL) or None


class MPIJob(KubeflowJob):
    framework = "kubeflow.org/mpijob"
    group, version, kind, plural = "kubeflow.org", "v2beta1", "MPIJob", "mpijobs"
    replica_specs_field = "mpiReplicaSpecs"
    replica_order = ("Launcher", "Worker")
    pod_keys = (JOB_ROLE_LABEL,)

    def pod_set_of(self, pod: PodFacts) -> str | None:
        if pod.via == "Job":
            return "launcher"  # only the launcher runs as a Job
        role = pod.labels.get(JOB_ROLE_LABEL)
        return "worker" if role == "worker" else None
