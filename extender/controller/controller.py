"""The controller: watch caches feed the quota engine; a debounced scheduling pass turns the
engine's decisions into writes (workload_writes.py, jobs.py).

Only the leader writes. On becoming leader it rebuilds a fresh engine from what the API holds
(`Workload.status.admission` first, before any pass), so nothing is admitted twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from kubernetes_asyncio import client
from pydantic import ValidationError

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller import cohorts
from gpuqueue.extender.controller.cached_fields import transform_for
from gpuqueue.extender.controller.events import EventRecorder
from gpuqueue.extender.controller.jobs import JobSteering
from gpuqueue.extender.controller.kubeapi import KubeApi, skip_environment_lookups
from gpuqueue.extender.controller.leader import LeaderElector
from gpuqueue.extender.controller.job_state import JobState
from gpuqueue.extender.controller.metrics import Metrics
from gpuqueue.extender.controller.options import Options
from gpuqueue.extender.controller.queue_status import QueueStatus
from gpuqueue.extender.controller.quota_objects import QuotaObjects
from gpuqueue.extender.controller.records import WorkloadRecords
from gpuqueue.extender.controller.workload_writes import WorkloadWrites
from gpuqueue.extender.controller.writes import Writes
from gpuqueue.kube import Informer, object_key
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import WorkloadSpec
from gpuqueue.jobframework.managed import StaticQueueView, is_managed

log = logging.getLogger("gpuqueue.controller")


class Controller:
    def __init__(self, api: client.ApiClient, options: Options | None = None, metrics: Metrics | None = None,
                 identity: str = "gpuqueue") -> None:
        self.api = api
        self.options = options or Options()
        self.identity = identity
        skip_environment_lookups(api)
        self.kube = KubeApi(api, qps=self.options.qps, burst=self.options.burst,
                            concurrency=self.options.concurrency, request_timeout=self.options.request_timeout)
        self.metrics = metrics or Metrics()
        self.informers: dict[str, Informer] = {}
        for kind in K.WATCHED:
            fn, args = kind.list_call(api)
            self.informers[kind.name] = Informer(fn, *args, name=kind.name, watch_timeout=self.options.watch_timeout,
                                                 backoff_initial=self.options.watch_backoff_initial,
                                                 backoff_max=self.options.watch_backoff_max,
                                                 transform=transform_for(kind.name))
        self.priorities = convert.PriorityResolver()
        self.queue_view = StaticQueueView()
        self.engine: QuotaEngine | None = None
        self.jobs: dict[str, JobState] = {}
        o = self.options
        self.writes = Writes(lambda: self.leader, o, scope_of=lambda cq: cohorts.tree(self.engine, cq))
        self.events = EventRecorder(self.kube, self.writes.spawn, identity, self.metrics.events_dropped, o.event_qps,
                                    o.event_burst)
        records = WorkloadRecords(self.kube, self.informers["workloads"])
        self.job_steering = JobSteering(self, self.kube, self.informers["jobs"], records, self.writes, self.events,
                                        self.metrics.admission_wait, self.resubmit, self.mark_dirty,
                                        o.resubmit_backoff)
        self.workload_writes = WorkloadWrites(self, self.kube, records, self.job_steering, self.writes, self.events,
                                              self.metrics.preemptions, self.priorities, self.priority_of,
                                              status_changed=lambda: self.queue_status.changed())
        self.queue_status = QueueStatus(self.kube, self.informers["clusterqueues"], self.informers["localqueues"],
                                        self.metrics, self.workload_writes.evicting, o.status_interval,
                                        engine=lambda: self.engine if self.leader and self.recovered else None)
        self.quota_objects = QuotaObjects(self.priorities, self.queue_view, lambda: self.engine,
                                          lambda: self.writes.releases.regroup(), self.queue_status.changed,
                                          self.mark_dirty)
        self.leader = False
        self.recovered = False
        self.passes = 0
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.elector: LeaderElector | None = None
        self._elector_task: asyncio.Task | None = None
        self._leading_task: asyncio.Task | None = None
        self._wire_handlers()

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the caches; lead at once, or when the Lease says so (--leader-elect)."""
        for inf in self.informers.values():
            inf.start()
        self._tasks.append(asyncio.create_task(self._pass_loop(), name="controller:passes"))
        self._tasks.append(asyncio.create_task(self.queue_status.loop(), name="controller:status"))
        o = self.options
        if o.leader_elect:
            self.elector = LeaderElector(self.kube, namespace=o.lease_namespace, name=o.lease_name,
                                         identity=self.identity, on_started=self._lead_soon,
                                         on_stopped=self.lose_leadership, lease_duration=o.lease_duration,
                                         renew_deadline=o.renew_deadline, retry_period=o.retry_period)
            self._elector_task = asyncio.create_task(self.elector.run(), name="controller:leader-election")
        else:
            await self.become_leader()

    async def stop(self) -> None:
        if self._elector_task is not None:
            self._elector_task.cancel()
            try:
                await self._elector_task
            except (asyncio.CancelledError, Exception):
                pass
            self._elector_task = None
        self.leader = False
        if self._leading_task is not None and not self._leading_task.done():
            self._leading_task.cancel()
        await self._stop_writing()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        for inf in self.informers.values():
            await inf.stop()

    @property
    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers.values())

    @property
    def ready(self) -> bool:
        """Caches warm; a leader must also have rebuilt its engine."""
        return self.synced and (not self.leader or self.recovered)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers.values()))

    async def _lead_soon(self) -> None:
        """From the elector: start leading in a task of its own, so that waiting for the caches
        never holds up the Lease renewals."""
        self._leading_task = asyncio.create_task(self.become_leader(), name="controller:become-leader")

    async def become_leader(self) -> None:
        self.leader = True
        self.metrics.leader.set(1)
        await self.wait_synced()
        if self.leader and not self.recovered:
            self._recover()
            self.recovered = True
            self.mark_dirty()
            log.info("leading: engine rebuilt with %d admitted and %d pending workloads",
                     len(self.engine.state.admitted), len(self.engine.pending))

    async def lose_leadership(self) -> None:
        """Stop writing at once; a new term starts from what the API holds."""
        self.leader = False
        self.recovered = False
        self.metrics.leader.set(0)
        if self._leading_task is not None and not self._leading_task.done():
            self._leading_task.cancel()
        await self._stop_writing()
        self.engine = None
        self.jobs.clear()

    async def _stop_writing(self) -> None:
        await self.writes.cancel_all()
        self.workload_writes.forget_writes()

    def mark_dirty(self) -> None:
        self._dirty.set()

    # -- caches -> engine -------------------------------------------------------------------------------
    def _wire_handlers(self) -> None:
        def on(name: str, upsert, delete) -> None:
            self.informers[name].add_handler(on_add=upsert, on_update=lambda old, new: upsert(new),
                                             on_delete=delete)

        self.quota_objects.watch(self.informers)
        on("jobs", self._on_job, self._on_job_delete)
        self.informers["workloads"].add_handler(on_delete=self._on_workload_delete)
        on("pods", self.job_steering.on_pod, self.job_steering.on_pod_delete)

    def is_managed(self, job: dict) -> bool:
        return is_managed(job, job["metadata"].get("namespace", "default"), self.queue_view, self.options.managed_jobs)

    def _on_job(self, job: dict) -> None:
        if not self.recovered or not self.is_managed(job):
            return
        key = object_key(job)
        st = self.jobs.get(key)
        if st is not None and st.uid != job["metadata"]["uid"]:
            self._forget(st)  # a new Job of the same name
            st = None
        if st is None:
            st = self._track(job)
            if W.job_finished(job):
                st.phase = "finished"
                return
            self.workload_writes.ensure_workload(st)
            self._submit(st, job)
            if not job["spec"].get("suspend"):
                self.job_steering.suspend_unadmitted(st)
            self.mark_dirty()
            return
        if st.phase != "finished" and W.job_finished(job):
            self._finish(st, W.job_finished(job) or "Complete")
        elif st.phase == "admitted" and job["spec"].get("suspend"):
            self._keep_running(st)
        self.job_steering.poke(st.uid)

    def _keep_running(self, st: JobState) -> None:
        """Someone suspended a Job whose Workload holds a reservation. As in Kueue, the
        admission stands and the Job is started again, with its admitted template (a
        nodeSelector edited meanwhile does not survive); to stop it, delete it."""
        w = self.engine.state.admitted.get(st.key) if self.engine is not None else None
        if w is not None:
            self.job_steering.ensure_running(st, w.admission)

    def _on_job_delete(self, job: dict) -> None:
        st = self.jobs.get(object_key(job))
        if st is None or st.uid != job["metadata"]["uid"]:
            return
        self._forget(st)
        self.workload_writes.delete_workload(st)
        self.mark_dirty()

    def _on_workload_delete(self, wl: dict) -> None:
        """Someone deleted the Workload of a live Job: as Kueue does, stop the Job and queue it
        again with a new Workload."""
        if not self.recovered:
            return
        st = self.jobs.get(f"{wl['metadata'].get('namespace')}/{_owner_job(wl)}")
        if st is None or st.wl_name != wl["metadata"]["name"] or st.phase == "finished":
            return
        job = self.informers["jobs"].get(st.key)
        self._forget(st)
        if job is not None and job["metadata"]["uid"] == st.uid:
            log.info("workload %s/%s deleted while its Job lives: requeueing", st.namespace, st.wl_name)
            self._on_job(job)
        self.mark_dirty()

    # -- jobs and the engine --------------------------------------------------------------------------------
    def _track(self, job: dict) -> JobState:
        meta = job["metadata"]
        st = JobState(key=object_key(job), namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                      wl_name=W.workload_name(meta["name"], meta["uid"]),
                      created=W.parse_time(meta.get("creationTimestamp")) or time.time())
        self.jobs[st.key] = st
        return st

    def workload_spec(self, st: JobState, job: dict, queued_at: float | None = None) -> WorkloadSpec:
        """The engine's view of the Job as it stands (its current pod template: after a refused
        template change it still carries its old flavor's nodeSelector, which then limits the
        flavors it can be given)."""
        model = self.job_steering.adapter.model(job)
        assert self.engine is not None
        return convert.workload_from_job(model, self.priorities, created=queued_at or st.created,
                                         seq=self.engine.next_seq())

    def priority_of(self, job: dict) -> int:
        try:
            return self.priorities.priority_of(self.job_steering.adapter.model(job))
        except ValidationError:
            return 0

    def _submit(self, st: JobState, job: dict, queued_at: float | None = None) -> None:
        assert self.engine is not None
        try:
            spec = self.workload_spec(st, job, queued_at)
        except (ValidationError, ValueError) as exc:
            log.warning("job %s cannot be queued: %s", st.key, exc)
            self.workload_writes.pending(st, None, f"The Job cannot be read: {exc}", "Inadmissible")
            return
        self.engine.submit(spec)
        st.priority = spec.priority
        st.phase = "pending"

    def resubmit(self, st: JobState) -> None:
        """Queue a Job again after the API refused its admission (see JobSteering.unsuspend)."""
        job = self.informers["jobs"].get(st.key)
        if self.engine is None or job is None or self.jobs.get(st.key) is not st or st.phase != "blocked":
            return
        self._submit(st, job, queued_at=time.time())
        self.mark_dirty()

    def _finish(self, st: JobState, how: str) -> None:
        cq = None
        if self.engine is not None:
            w = self.engine.finish(st.key)
            admission = getattr(w, "admission", None)  # an AdmittedWorkload's; a pending one has none
            if admission is not None and st.phase == "admitted":
                cq = admission.cluster_queue
        st.phase = "finished"
        self.workload_writes.finish_workload(st, how, cq)
        self.mark_dirty()

    def _forget(self, st: JobState) -> None:
        if self.engine is not None:
            self.engine.delete(st.key)
        self.workload_writes.evicting.pop(st.key, None)
        self.jobs.pop(st.key, None)
        st.phase = "finished"

    # -- rebuilding from the API -------------------------------------------------------------------------
    def _recover(self) -> None:
        engine = QuotaEngine(fair_sharing=self.options.fair_sharing)
        self.engine = engine
        self.jobs.clear()
        self.quota_objects.load(engine, self.informers)
        workloads = self.informers["workloads"]
        jobs = [j for j in self.informers["jobs"].list() if self.is_managed(j)]
        jobs.sort(key=lambda j: (j["metadata"].get("creationTimestamp", ""), object_key(j)))
        now = time.time()
        for job in jobs:
            st = self._track(job)
            wl = workloads.get(f"{st.namespace}/{st.wl_name}")
            finished = W.job_finished(job)
            if finished:
                st.phase = "finished"
                if wl is not None and not W.is_true(wl, "Finished"):
                    self.workload_writes.finish_workload(st, finished)
                continue
            if wl is None:
                self.workload_writes.ensure_workload(st)
            admission = ((wl or {}).get("status") or {}).get("admission")
            if admission and W.is_true(wl, "QuotaReserved") and not W.is_true(wl, "Finished"):
                try:
                    spec = self.workload_spec(st, job)
                    adm = W.admission_from_status(admission)
                except (ValidationError, ValueError, KeyError) as exc:
                    log.warning("workload %s has an unreadable admission, requeueing: %s", st.key, exc)
                    self._submit(st, job)
                    continue
                reserved = W.condition(wl, "QuotaReserved") or {}
                engine.restore_admitted(spec, adm, W.parse_time(reserved.get("lastTransitionTime")) or now)
                st.phase = "admitted"
                st.maybe_reserved = True
                if W.is_true(wl, "Evicted"):
                    # the last leader died half-way through an eviction: finish it
                    engine.evict(st.key, now)
                    self.workload_writes.resume_eviction(st, adm.cluster_queue)
                else:
                    self.job_steering.ensure_running(st, adm)
                continue
            requeued = W.condition(wl, "Requeued") if wl else None
            queued_at = W.parse_time(requeued.get("lastTransitionTime")) if requeued and requeued.get(
                "status") == "True" else None
            self._submit(st, job, queued_at)
            if not job["spec"].get("suspend"):
                self.job_steering.suspend_unadmitted(st)

    # -- the pass -------------------------------------------------------------------------------------------
    async def _pass_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_allowed = 0.0
        while True:
            await self._dirty.wait()
            await asyncio.sleep(max(self.options.debounce, next_allowed - loop.time()))
            self._dirty.clear()
            if not self.leader or not self.recovered or self.engine is None:
                continue
            started = loop.time()
            try:
                self.run_pass()
            except Exception:  # noqa: BLE001 - a bug in one pass must not stop the controller
                log.exception("scheduling pass failed")
            ended = loop.time()
            next_allowed = ended + self.options.pass_spacing * (ended - started)

    def run_pass(self) -> list[d.Decision]:
        assert self.engine is not None
        started = time.perf_counter()
        decisions = self.engine.schedule(time.time())
        for dec in decisions:
            self.workload_writes.apply(dec)
        self.passes += 1
        self.metrics.pass_duration.observe(time.perf_counter() - started)
        if decisions:
            self.queue_status.changed()
        return decisions


def _owner_job(obj: dict) -> str:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == "Job" and ref.get("controller"):
            return ref.get("name", "")
    return ""
