"""The Job reconciler (Kueue's jobframework reconciler, one for every kind it queues): an object of
a queued kind seen, changed or deleted, held against what the engine holds for it. Every change
of a tracked Job is held against the engine (equivalence.py): its pod sets, its queue, whether it
may run; a Job stays tracked while it owns a Workload that is not finished, whatever its labels.

It keeps the records of the tracked Jobs (`jobs`, by engine key), shared with Departures, which
keeps a gone Job's reservation there under a key of its own."""

from __future__ import annotations

import logging
import time
from typing import Callable

from pydantic import ValidationError

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.reconcilers.departures import Departures
from gpuqueue.extender.controller.reconcilers.following import Following
from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.writes.jobs import JobSteering
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status
from gpuqueue.extender.controller.kinds.lws_groups import LWS_GROUP_KIND, LWS_KIND, LwsGroupKind
from gpuqueue.extender.controller.kinds.managed_kinds import BATCH_JOB, ManagedKind, controller_ref, without_finalizer
from gpuqueue.extender.controller.core.owned_workloads import OwnedWorkloads, owner_uids
from gpuqueue.extender.controller.kinds.pod_groups import GROUP_KIND
from gpuqueue.extender.controller.writes.records import read_modify_write
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites
from gpuqueue.extender.controller.writes.writes import Writes
from gpuqueue.extender.quota.model import WorkloadSpec
from gpuqueue.jobframework.integration import Finished
from gpuqueue.jobframework.kinds.pods import IS_GROUP_WORKLOAD
from gpuqueue.jobframework.managed import ManagedJobsConfig, QueueView, queue_name_of, stays_managed
from gpuqueue.extender.quota import convert

log = logging.getLogger("gpuqueue.controller")


class JobReconciler:
    def __init__(self, sched: Scheduling, jobs: dict[str, JobState], owned: OwnedWorkloads, queue_view: QueueView,
                 managed_jobs: ManagedJobsConfig, priorities: convert.PriorityResolver, kube: KubeApi, writes: Writes,
                 job_steering: JobSteering, workload_writes: WorkloadWrites, following: Following,
                 departures: Departures, mark_dirty: Callable[[], None]) -> None:
        """`jobs`: the tracked Jobs, written here (tracked, forgotten) and by `departures`;
        `owned`: the Workloads by their owner's UID; `queue_view`/`managed_jobs`: Kueue's rule of
        which Jobs are managed; `mark_dirty`: ask for a scheduling pass."""
        self.sched = sched
        self.jobs = jobs
        self.owned = owned
        self.queue_view = queue_view
        self.managed_jobs = managed_jobs
        self.priorities = priorities
        self.kube = kube
        self.writes = writes
        self.job_steering = job_steering
        self.workload_writes = workload_writes
        self.following = following
        self.departures = departures
        self.mark_dirty = mark_dirty

    # -- events -------------------------------------------------------------------------------------
    def on_job(self, job: dict, held: bool = False, kind: ManagedKind = BATCH_JOB) -> None:
        """`held`: the Job was ours a moment ago (its Workload was deleted): ours still. (Every
        kind it queues comes here: a Job is any of them.)"""
        if not self.sched.recovered or self.sched.kinds_by_kind.get(kind.kind.kind) is not kind:
            return  # (a kind refused at start: the pod integration on an old server)
        meta = job["metadata"]
        key = kind.key(meta["namespace"], meta["name"])
        for pod in kind.releasable(job):
            self.release_pod(key, pod)
        st = self.jobs.get(key)
        if st is not None and st.uid != job["metadata"]["uid"]:
            self.depart(st)  # a new Job of the same name
            st = None
        if st is None:
            if not held and not kind.queued(job):
                return  # (before naming its Workload: every pod of the cluster comes here with `pod` enabled)
            wl = self.workload_of(job, kind)
            if not held and not self.is_managed(job, wl, kind):
                return
            st = self.track(job, wl, kind)
            if kind.finished(job):
                st.phase = "finished"
                return
            if wl is None:
                self.workload_writes.ensure_workload(st)
            self.submit(st, job)
            self.steer(st, job)
            self.mark_dirty()
            return
        if st.phase == "finished":
            return
        done = kind.finished(job)
        if done:
            self.finish(st, done)
            return
        self.following.follow(st, job)
        self.steer(st, job)
        self.job_steering.poke(st.uid)

    def on_job_delete(self, job: dict) -> None:
        st = self.state_of(job)
        if st is None or st.uid != job["metadata"]["uid"]:
            return
        self.depart(st)
        self.mark_dirty()

    def steer(self, st: JobState, job: dict) -> None:
        """Kueue's steps 7 and 8, on every change of the Job: an admitted Job suspended by someone
        else is started again (the admission stands, with its admitted template: a nodeSelector
        edited meanwhile does not survive; to stop a Job, delete it); a Job running without a
        reservation written is suspended, however often it is started."""
        if not st.kind.suspended(job) and not self.job_steering.may_run(st):
            self.job_steering.stop(st)
        elif st.phase == "admitted" and st.kind.held(job):
            engine = self.sched.engine
            w = engine.state.admitted.get(st.key) if engine is not None else None
            if w is not None:
                self.job_steering.ensure_running(st, w.admission)

    def release_pod(self, key: str, pod: dict) -> None:
        """Kueue's finalizer off a pod that holds nothing any more, after whatever its Workload's
        writes are (its end is recorded first; a deleted pod then goes, and its Workload with it)."""
        uid = pod["metadata"]["uid"]

        async def write():
            def change(live: dict) -> dict | None:
                return without_finalizer(live) if live["metadata"].get("uid") == uid else None
            try:
                await read_modify_write(self.kube, K.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"],
                                        None, change)
            except Exception as exc:
                if not is_status(exc, 404):
                    raise

        self.writes.chain(key, write)

    # -- which Jobs, and what is kept of them ---------------------------------------------------------
    def is_managed(self, job: dict, workload: dict | None = None, kind: ManagedKind = BATCH_JOB) -> bool:
        """Kueue's rule, and held while it has a Workload that is not finished (stays_managed).
        An object controlled by one of a queued kind (a JobSet's Jobs, a RayJob's RayCluster) is
        queued as part of its owner, not by itself (Kueue's IsOwnerManagedByKueue)."""
        kinds_by_kind = self.sched.kinds_by_kind
        parent = controller_ref(job)
        if parent is not None and parent.get("kind") in kinds_by_kind and \
                kinds_by_kind[parent["kind"]].kind.api_version == parent.get("apiVersion"):
            return False
        if not kind.queued(job):
            return False
        return stays_managed(job, job["metadata"].get("namespace", "default"), self.queue_view,
                             self.managed_jobs, _open(workload, job, kind.finished(job) is not None))

    def workload_of(self, job: dict, kind: ManagedKind = BATCH_JOB) -> dict | None:
        """Its Workload, found by its UID: one created under gpuqueue's earlier name is kept."""
        meta = job["metadata"]
        return self.owned.find(meta["namespace"], meta["uid"], kind.workload_name(job))

    def state_of(self, obj: dict) -> JobState | None:
        """What it tracks of an object of a kind it queues (by its uid: None for another object of
        the name)."""
        meta = obj["metadata"]
        for kind in self.sched.kinds:
            st = self.jobs.get(kind.key(meta.get("namespace") or "", meta.get("name") or ""))
            if st is not None and st.uid == meta.get("uid"):
                return st
        return None

    def state_of_workload(self, wl: dict) -> JobState | None:
        """What it tracks of a Workload's owner (by its controller reference's kind and name)."""
        kinds_by_kind = self.sched.kinds_by_kind
        ref = W.owner_ref(wl)
        if ((wl["metadata"].get("annotations") or {}).get(IS_GROUP_WORKLOAD) == "true" and not ref
                and GROUP_KIND.kind in kinds_by_kind):
            ref = {"kind": GROUP_KIND.kind, "name": wl["metadata"]["name"]}  # owned by its pods, controlled by none
        lws_groups = kinds_by_kind.get(LWS_GROUP_KIND.kind)
        if ref.get("kind") == LWS_KIND.kind and isinstance(lws_groups, LwsGroupKind):
            # controlled by its LeaderWorkerSet, one of its groups': the group it was named for
            namespace = wl["metadata"].get("namespace") or ""
            name = lws_groups.record_name(namespace, wl["metadata"]["name"])
            return self.jobs.get(lws_groups.key(namespace, name)) if name else None
        kind = kinds_by_kind.get(ref.get("kind", ""))
        if kind is None:
            return None
        return self.jobs.get(kind.key(wl["metadata"].get("namespace") or "", ref.get("name") or ""))

    def track(self, job: dict, wl: dict | None = None, kind: ManagedKind = BATCH_JOB) -> JobState:
        meta = job["metadata"]
        st = JobState(key=kind.key(meta["namespace"], meta["name"]), namespace=meta["namespace"], name=meta["name"],
                      uid=meta["uid"],
                      wl_name=wl["metadata"]["name"] if wl is not None else kind.workload_name(job),
                      created=W.parse_time(meta.get("creationTimestamp")) or time.time(),
                      queue_name=queue_name_of(job, ((wl or {}).get("spec") or {}).get("queueName")),
                      generation=kind.generation(job), kind=kind)
        self.jobs[st.key] = st
        return st

    def clear(self) -> None:
        """A new term (or none): nothing is tracked until the engine is rebuilt."""
        self.jobs.clear()

    # -- the Job and the engine ---------------------------------------------------------------------
    def workload_spec(self, st: JobState, job: dict, queued_at: float | None = None) -> WorkloadSpec:
        """The engine's view of the Job as it stands (its current pod templates: after a refused
        template change they still carry the old flavor's nodeSelector, which then limits the
        flavors it can be given), in the LocalQueue its Workload names."""
        adapter = st.kind
        engine = self.sched.engine
        assert engine is not None
        return WorkloadSpec(key=st.key, namespace=st.namespace, queue_name=st.queue_name,
                            pod_sets=adapter.pod_sets(job), priority=adapter.priority(job, self.priorities),
                            created=queued_at or st.created, seq=engine.next_seq(), uid=st.uid)

    def priority_of(self, job: dict, kind: ManagedKind = BATCH_JOB) -> int:
        try:
            return kind.priority(job, self.priorities)
        except (ValidationError, ValueError):
            return 0

    def submit(self, st: JobState, job: dict, queued_at: float | None = None) -> None:
        engine = self.sched.engine
        assert engine is not None
        try:
            spec = self.workload_spec(st, job, queued_at)
        except (ValidationError, ValueError) as exc:
            log.warning("job %s cannot be queued: %s", st.key, exc)
            self.workload_writes.pending(st, None, f"The Job cannot be read: {exc}", "Inadmissible")
            return
        engine.submit(spec)
        st.priority = spec.priority
        st.phase = "pending"

    def resubmit(self, st: JobState) -> None:
        """Queue a Job again after the API refused its admission (see JobSteering.unsuspend)."""
        job = self.job_steering.job(st)
        if self.sched.engine is None or job is None or self.jobs.get(st.key) is not st or st.phase != "blocked":
            return
        st.queue_name = queue_name_of(job, st.queue_name)
        st.generation = st.kind.generation(job)
        self.submit(st, job, queued_at=time.time())
        self.workload_writes.update_spec(st)
        self.mark_dirty()

    def finish(self, st: JobState, done: Finished) -> None:
        cq = None
        engine = self.sched.engine
        if engine is not None:
            w = engine.finish(st.key)
            admission = getattr(w, "admission", None)  # an AdmittedWorkload's; a pending one has none
            if admission is not None and st.phase == "admitted":
                cq = admission.cluster_queue
        st.phase = "finished"
        self.workload_writes.finish_workload(st, done, cq)
        self.mark_dirty()

    def forget(self, st: JobState) -> None:
        engine = self.sched.engine
        if engine is not None:
            engine.delete(st.key)
        self.workload_writes.evicting.pop(st.key, None)
        self.jobs.pop(st.key, None)
        st.phase = "finished"

    def depart(self, st: JobState) -> None:
        """The Job is gone (deleted, or replaced by a new one of its name). Its Workload goes too,
        but an admitted one's reservation counts until its pods are gone (departures.py). Other
        Jobs are forgotten at once: a pending one's pods hold no quota, and an evicted one's
        eviction waits for its pods itself."""
        engine = self.sched.engine
        w = engine.state.admitted.get(st.key) if engine is not None else None
        self.forget(st)
        if w is not None and st.phase == "admitted":
            self.departures.depart(st, w)
        else:
            self.workload_writes.delete_workload(st)


def _open(workload: dict | None, job: dict, finished: bool) -> bool:
    """A Workload of this Job that is not finished - or says so while the Job is not (only the
    Job's end finishes it): the Job holds or waits for quota."""
    if workload is None or job["metadata"]["uid"] not in owner_uids(workload):
        return False
    return not W.is_true(workload, "Finished") or not finished
