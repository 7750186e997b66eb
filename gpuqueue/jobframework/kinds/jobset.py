"""JobSet (jobset.x-k8s.io/v1alpha2, Kueue's "jobset.x-k8s.io/jobset"): one pod set per replicated
job, named as it, of replicas x min(parallelism, completions) pods; suspended by ``spec.suspend``.
Its pods carry ``jobset.sigs.k8s.io/replicatedjob-name`` (pod -> Job -> JobSet)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuqueue.jobframework.integration import (PodFacts, Slot, TemplatedJob, any_active, count_of,
                                               finished_by_condition, get_path)

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def pods_per_replica(job_spec: Mapping[str, Any], where: str) -> int:
    """A Job's pods: parallelism (default 1), or completions when fewer."""
    parallelism = count_of(job_spec.get("parallelism"), f"{where}.parallelism")
    completions = count_of(job_spec.get("completions"), f"{where}.completions", parallelism)
    return min(parallelism, completions)


def replicated_job_slots(obj: Mapping[str, Any], root: tuple) -> list[Slot]:
    """The pod sets of a JobSet spec at ``root`` (a JobSet's ``spec``, or a runtime's
    ``spec.template.spec``)."""
    jobs = get_path(obj, root + ("replicatedJobs",))
    if not isinstance(jobs, list):
        raise ValueError(f"{'.'.join(root)}.replicatedJobs: must be a list")
    slots = []
    for i, rj in enumerate(jobs):
        where = f"{'.'.join(root)}.replicatedJobs[{i}]"
        if not isinstance(rj, Mapping) or not rj.get("name"):
            raise ValueError(f"{where}.name: Required value")
        job_spec = get_path(obj, root + ("replicatedJobs", i, "template", "spec"))
        count = count_of(rj.get("replicas"), f"{where}.replicas") * pods_per_replica(job_spec, f"{where}.template.spec")
        slots.append(Slot(rj["name"], count, root + ("replicatedJobs", i, "template", "spec", "template")))
    return slots


class JobSet(TemplatedJob):
    framework = "jobset.x-k8s.io/jobset"
    group, version, kind, plural = "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"
    pod_keys = (REPLICATED_JOB_LABEL,)

    def slots(self, obj):
        return replicated_job_slots(obj, ("spec",))

    def finished(self, obj):
        return finished_by_condition(obj, "Completed")

    def is_active(self, obj):
        return any_active(obj, "replicatedJobsStatus")

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return pod.labels.get(REPLICATED_JOB_LABEL) or None
