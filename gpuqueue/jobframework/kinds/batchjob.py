"""batch/v1 Job (Kueue's "batch/job"): one pod set, ``main``, of min(parallelism, completions)
pods; suspended by ``spec.suspend``. The same behaviour the controller has had for Jobs (its
pod-template record keeps its own annotation and flat shape, so Jobs admitted before stay
restorable)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuqueue.jobframework.integration import (PodFacts, Slot, TemplatedJob, count_of, finished_by_condition,
                                               get_path)

MAIN = "main"
# The Job's own scheduling fields before admission added a flavor's, to put back on preemption.
ORIGINAL_SCHEDULING_ANNOTATION = "gpuqueue.io/original-pod-scheduling"


def pod_count(job: Mapping[str, Any]) -> int:
    spec = get_path(job, ("spec",))
    parallelism = count_of(spec.get("parallelism"), "spec.parallelism")
    completions = spec.get("completions")
    return min(parallelism, count_of(completions, "spec.completions")) if completions is not None else parallelism


class BatchJob(TemplatedJob):
    framework = "batch/job"
    group, version, kind, plural = "batch", "v1", "Job", "jobs"

    def slots(self, obj):
        return [Slot(MAIN, pod_count(obj), ("spec", "template"))]

    def finished(self, obj):
        return finished_by_condition(obj, "Complete")

    def is_active(self, obj):
        return bool((obj.get("status") or {}).get("active"))

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return MAIN

    # One pod set: the record is its fields alone, under the annotation Jobs always had.
    def original_annotation(self) -> str:
        return ORIGINAL_SCHEDULING_ANNOTATION

    def from_record(self, value: Any) -> dict[str, dict] | None:
        return {MAIN: value} if isinstance(value, dict) else None

    def to_record(self, originals: Mapping[str, dict]) -> Any:
        return originals.get(MAIN, {})
