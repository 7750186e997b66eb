"""Following a tracked Job's changes (Kueue's EquivalentToWorkload and updateWorkloadToMatchJob):
on every change of the Job, its pod sets and queue against what the engine holds for it.

- admitted, and its pods no longer match its reservation: evicted like a preemption victim (its
  quota counts until its pods are gone), its Workload updated, and queued again with the new pod
  sets. Kueue stops such a Job and deletes its Workload, giving the quota back while the pods
  still run.
- pending, with other pod sets (or a nodeSelector, tolerations, affinity: what picks its flavor),
  or a queue label naming another LocalQueue: queued again with them at the same place, and its
  Workload updated.
"""

from __future__ import annotations

import time
from typing import Callable

from pydantic import ValidationError

from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.core.equivalence import admission_mismatch, same_pod_sets
from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites
from gpuqueue.jobframework.managed import queue_name_of

# Kueue's stop reason, and its Event, for a Job that no longer matches its Workload
# (jobframework.StopReasonNoMatchingWorkload): the reason of the Evicted condition here.
NO_MATCHING_WORKLOAD = "NoMatchingWorkload"
NO_MATCHING_WORKLOAD_EVENT = "No matching Workload; restoring pod templates according to existent Workload"


class Following:
    def __init__(self, sched: Scheduling, workloads: WorkloadWrites,
                 submit: Callable[[JobState, dict, float | None], None], mark_dirty: Callable[[], None]) -> None:
        """`submit(st, job, queued_at)`: give the engine the Job as it is (JobReconciler.submit)."""
        self.sched = sched
        self.workloads = workloads
        self.submit = submit
        self.mark_dirty = mark_dirty

    def follow(self, st: JobState, job: dict) -> None:
        self.follow_priority_class(st, job)
        queue = queue_name_of(job, st.queue_name)
        generation = st.kind.generation(job)
        engine = self.sched.engine
        if (generation == st.generation and queue == st.queue_name) or engine is None:
            return  # the spec is as last compared (status and metadata writes leave it)
        try:
            pod_sets = st.kind.pod_sets(job)
        except (ValidationError, ValueError):
            return  # the pass that queued it says why it cannot be read
        st.generation = generation
        if st.phase == "admitted":
            w = engine.state.admitted.get(st.key)
            changed = admission_mismatch(pod_sets, w.admission) if w is not None else None
            if changed:
                self.requeue_changed(st, job, changed)
            return  # a new queue label on an admitted Job takes effect once it is pending (Kueue)
        p = engine.pending.get(st.key)
        if p is None or (same_pod_sets(p.spec.pod_sets, pod_sets) and queue == st.queue_name):
            return  # (not in the engine: blocked, queued again later from the Job as it is then)
        st.queue_name = queue
        engine.delete(st.key)
        self.submit(st, job, p.queue_ts[0])
        self.workloads.update_spec(st)
        self.mark_dirty()

    def follow_priority_class(self, st: JobState, job: dict) -> None:
        """Kueue's UpdateWorkloadPriority: the Job's WorkloadPriorityClass label names another class
        than its Workload's (or the class's value changed): the engine and the Workload take the
        class and its value - a pending Job its new place in the queue, an admitted one its new
        rank among preemption victims. Not a Workload whose priority comes from its pods'
        PriorityClass (Kueue leaves those); a class that does not exist changes nothing yet."""
        name = ((job.get("metadata") or {}).get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        value = self.workloads.priorities.workload_classes.get(name) if name else None
        if value is None or st.phase in ("finished", "departed"):
            return
        wl = self.workloads.workloads.get(st)
        spec = (wl or {}).get("spec") or {}
        ref = spec.get("priorityClassRef")
        if ref is not None and ref.get("kind") != W.WORKLOAD_PRIORITY_CLASS:
            return
        engine = self.sched.engine
        if st.priority != value and engine is not None and engine.set_priority(st.key, value):
            st.priority = value
            self.mark_dirty()
        if wl is not None and ((ref or {}).get("name") != name or spec.get("priority") != value):
            self.workloads.update_priority(st, name, value)

    def priority_class_changed(self, name: str) -> None:
        """A WorkloadPriorityClass was created or its value changed: the Jobs that name it follow."""
        for st in list(self.sched.jobs.values()):
            job = self.workloads.jobs.job(st)
            if job is not None and ((job.get("metadata") or {}).get("labels") or {}).get(PRIORITY_CLASS_LABEL) == name:
                self.follow_priority_class(st, job)

    def requeue_changed(self, st: JobState, job: dict, changed: str) -> None:
        """`changed`: what differs from the reservation (equivalence.admission_mismatch)."""
        engine = self.sched.engine
        w = engine.state.admitted[st.key]
        now = time.time()
        engine.evict(st.key, now)
        engine.delete(st.key)
        st.queue_name = queue_name_of(job, st.queue_name)
        message = f"The Job no longer matches its Workload: {changed}"

        async def fixed() -> str:
            return message

        self.workloads.evict(st, NO_MATCHING_WORKLOAD, fixed, None, w.admission.cluster_queue,
                             event_message=NO_MATCHING_WORKLOAD_EVENT, admission=w.admission)
        self.submit(st, job, now)
        st.phase = "evicting"  # submit made it pending: its eviction is still under way
        self.workloads.update_spec(st)
        self.mark_dirty()
