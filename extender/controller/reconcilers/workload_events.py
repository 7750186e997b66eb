"""The Workload reconciler: a reservation the engine did not make set back, a second Workload for
a tracked Job deleted, `spec.active` followed, a deleted Workload of a live Job replaced. It keeps
no state of its own: it reads the tracked Jobs through the Job reconciler and the engine through
Scheduling, and writes through WorkloadWrites."""

from __future__ import annotations

import logging
import time
from typing import Callable

from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.reconcilers.job_reconciler import JobReconciler
from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.writes.jobs import JobSteering
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites

log = logging.getLogger("gpuqueue.controller")


class WorkloadReconciler:
    def __init__(self, sched: Scheduling, job_reconciler: JobReconciler, job_steering: JobSteering,
                 workload_writes: WorkloadWrites, mark_dirty: Callable[[], None]) -> None:
        self.sched = sched
        self.job_reconciler = job_reconciler
        self.job_steering = job_steering
        self.workload_writes = workload_writes
        self.mark_dirty = mark_dirty

    def on_workload(self, old: dict | None, wl: dict) -> None:
        """A Workload's reservation changed: if it now shows one the engine did not make, or not
        the one it made, set it back (workload_writes.set_back). Only a change of the reservation
        is judged: the echo of an older write of ours, arriving after the engine moved on, changes
        nothing of it."""
        if not self.sched.recovered:
            return
        st = self.job_reconciler.state_of_workload(wl)
        if st is not None and st.wl_name == wl["metadata"]["name"]:
            self.job_steering.poke(st.uid)  # an eviction waits for the cache to show it (wait_stopped)
            self.follow_active(st, wl)
        if st is None or _reservation_view(old) == _reservation_view(wl):
            return
        if st.wl_name != wl["metadata"]["name"]:
            if W.shows_reservation(wl) and W.owner_uid(wl) == st.uid:
                self.workload_writes.delete_extra(st, wl)  # one Workload per Job, gpuqueue's
        elif not self.workload_writes.record_is_true(st, wl):
            self.workload_writes.set_back(st)

    def follow_active(self, st: JobState, wl: dict) -> None:
        """Kueue's spec.active, held against what the engine holds (so a missed or repeated event
        changes nothing): false deactivates the workload - an admitted Job is evicted, a pending one
        leaves its queue - true queues it again."""
        engine = self.sched.engine
        active = W.is_active(wl)
        if engine is None or st.phase in ("finished", "departed") or active != engine.is_inactive(st.key):
            return
        if active:
            engine.reactivate(st.key)
            self.workload_writes.reactivate(st)
        else:
            self.workload_writes.deactivate(st, engine.deactivate(st.key, time.time()))
        self.mark_dirty()

    def on_workload_delete(self, wl: dict) -> None:
        """Someone deleted the Workload of a live Job: as Kueue does, stop the Job and queue it
        again with a new Workload - whatever its labels say now."""
        if not self.sched.recovered:
            return
        st = self.job_reconciler.state_of_workload(wl)
        if st is None or st.wl_name != wl["metadata"]["name"] or st.phase == "finished":
            return
        job = self.job_steering.job(st)
        self.job_reconciler.forget(st)
        if job is not None and job["metadata"]["uid"] == st.uid:
            log.info("workload %s/%s deleted while its Job lives: requeueing", st.namespace, st.wl_name)
            self.job_reconciler.on_job(job, held=True, kind=st.kind)
        self.mark_dirty()


def _reservation_view(wl: dict | None) -> tuple:
    status = (wl or {}).get("status") or {}
    return (status.get("admission"), W.is_true(wl, "QuotaReserved"), W.is_true(wl, "Admitted"),
            W.is_true(wl, "Finished"))
