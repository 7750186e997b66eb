"""The controller's rebuild on becoming leader: a fresh engine filled from what the API holds,
every Workload holding a reservation first (whatever its Job's labels say, or if its Job is gone),
so nothing is admitted twice and no quota is given back before its pods are gone. It keeps no
state of its own: it fills the engine it is given and, through the Job reconciler, the tracked
Jobs, and writes what the API shows wrongly through WorkloadWrites."""

from __future__ import annotations

import logging
import time

from pydantic import ValidationError

from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.reconcilers.departures import Departures, spec_from_admission
from gpuqueue.extender.controller.core.equivalence import admission_mismatch
from gpuqueue.extender.controller.reconcilers.following import Following
from gpuqueue.extender.controller.reconcilers.job_reconciler import JobReconciler
from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.queues.quota_objects import QuotaObjects
from gpuqueue.extender.controller.reconcilers.workload_events import WorkloadReconciler
from gpuqueue.extender.controller.writes.jobs import JobSteering
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites
from gpuqueue.kube import Informer, object_key
from gpuqueue.extender.quota.engine import QuotaEngine


log = logging.getLogger("gpuqueue.controller")


class RebuildFromApi:
    def __init__(self, sched: Scheduling, informers: dict[str, Informer], quota_objects: QuotaObjects,
                 job_reconciler: JobReconciler, workload_reconciler: WorkloadReconciler,
                 workload_writes: WorkloadWrites, following: Following, departures: Departures,
                 job_steering: JobSteering) -> None:
        self.sched = sched
        self.informers = informers
        self.quota_objects = quota_objects
        self.job_reconciler = job_reconciler
        self.workload_reconciler = workload_reconciler
        self.workload_writes = workload_writes
        self.following = following
        self.departures = departures
        self.job_steering = job_steering

    def run(self, engine: QuotaEngine) -> None:
        """Fill a fresh engine (already the term's: the writers read it) from what the API holds:
        the specs, then each Job that is managed or holds or waits for quota (stays_managed), in
        creation order, then every other reservation - a Workload holding one counts until its
        Job's pods are gone, whatever became of the Job."""
        jobs = self.job_reconciler
        jobs.clear()
        self.quota_objects.load(engine, self.informers)
        found = sorted(((job, kind) for kind in self.sched.kinds for job in kind.cached(self.informers).list()),
                       key=lambda jk: (jk[0]["metadata"].get("creationTimestamp", ""), object_key(jk[0]),
                                       jk[1].kind.kind))
        tracked = set()
        for job, kind in found:
            wl = jobs.workload_of(job, kind)
            if jobs.is_managed(job, wl, kind):
                st = self._rebuild(job, wl, kind)
                tracked.add(f"{st.namespace}/{st.wl_name}")
            for pod in kind.releasable(job):  # a pod that ended while no one led
                jobs.release_pod(kind.key(job["metadata"]["namespace"], job["metadata"]["name"]), pod)
        live = {st.uid: st for st in self.sched.jobs.values()}
        for wl in self.informers["workloads"].list():
            if not W.holds_reservation(wl) or object_key(wl) in tracked:
                continue
            owner = live.get(W.owner_uid(wl))
            if owner is not None and owner.phase != "finished":
                self.workload_writes.delete_extra(owner, wl)  # a second one for a tracked Job: not gpuqueue's
            else:
                self.departures.restore(wl)

    def _rebuild(self, job: dict, wl: dict | None, kind) -> JobState:
        st = self.job_reconciler.track(job, wl, kind)
        finished = kind.finished(job)
        if finished:
            st.phase = "finished"
            if wl is not None and not W.is_true(wl, "Finished"):
                self.workload_writes.finish_workload(st, finished)
            return st
        if wl is not None and W.is_true(wl, "Finished"):
            # the Job has not finished: someone else wrote that (set back below); judged without it
            self.workload_writes.set_back(st)
            wl = W.without_condition(W.status_copy(wl), "Finished")
        if wl is not None:
            self.following.follow_priority_class(st, job)  # its class changed, or took a new value, while no one led
        if wl is None:
            self.workload_writes.ensure_workload(st)
        elif W.holds_reservation(wl):
            try:
                adm = W.admission_from_status(wl["status"]["admission"])
            except (KeyError, ValueError, TypeError) as exc:
                log.warning("workload %s has an unreadable admission, requeueing: %s", st.key, exc)
            else:
                self._restore_admitted(st, job, wl, adm)
                self.workload_reconciler.follow_active(st, wl)  # an inactive one stays so: evicted if admitted
                return st
        requeued = W.condition(wl, "Requeued") if wl else None
        queued_at = W.parse_time(requeued.get("lastTransitionTime")) if requeued and requeued.get(
            "status") == "True" else None
        self.job_reconciler.submit(st, job, queued_at)
        if W.shows_reservation(wl):
            self.workload_writes.set_back(st)
        if wl is not None and W.pod_sets_differ(wl, st.kind.workload_pod_sets(job), st.queue_name):
            self.workload_writes.update_spec(st)  # changed while no leader ran
        self.job_reconciler.steer(st, job)
        if wl is not None:
            self.workload_reconciler.follow_active(st, wl)
        return st

    def _restore_admitted(self, st: JobState, job: dict, wl: dict, adm) -> None:
        engine = self.sched.engine
        now = time.time()
        reserved_at = W.parse_time((W.condition(wl, "QuotaReserved") or {}).get("lastTransitionTime")) or now
        try:
            spec = self.job_reconciler.workload_spec(st, job)
        except (ValidationError, ValueError):
            spec = spec_from_admission(st, adm, wl)
        engine.restore_admitted(spec, adm, reserved_at)
        st.phase = "admitted"
        st.maybe_reserved = True
        if not st.kind.suspended(job) and st.kind.adopted(job, wl) is not None:
            self.job_steering.adopt(st, wl)  # started by Kueue: what a preemption puts back
        if W.is_true(wl, "Evicted"):
            # the last leader died half-way through an eviction: finish it (it is queued again with
            # the Job as it is now, and its Workload told so once the reservation is cleared)
            engine.evict(st.key, now)
            self.workload_writes.resume_eviction(st, adm.cluster_queue)
            if W.pod_sets_differ(wl, st.kind.workload_pod_sets(job), st.queue_name):
                self.workload_writes.update_spec(st)
            return
        changed = admission_mismatch(spec.pod_sets, adm)
        if changed:  # its pods were changed while no leader ran (or the record was)
            self.following.requeue_changed(st, job, changed)
        else:
            self.job_reconciler.steer(st, job)
            self.workload_writes.retry_parked(st, adm)
