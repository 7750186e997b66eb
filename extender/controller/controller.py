"""The controller: watch caches feed the quota engine; a debounced scheduling pass turns the
engine's decisions into writes (workload_writes.py, jobs.py).

Only the leader writes. On becoming leader it rebuilds a fresh engine from what the API holds
(`Workload.status.admission` first, before any pass), so nothing is admitted twice.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import orjson
from kubernetes_asyncio import client
from pydantic import ValidationError

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller import cohorts
from gpuqueue.extender.controller.events import EventRecorder
from gpuqueue.extender.controller.jobs import JobSteering
from gpuqueue.extender.controller.kubeapi import KubeApi, skip_environment_lookups
from gpuqueue.extender.controller.leader import LeaderElector
from gpuqueue.extender.controller.job_state import JobState
from gpuqueue.extender.controller.metrics import Metrics
from gpuqueue.extender.controller.options import Options
from gpuqueue.extender.controller.queue_status import QueueStatus
from gpuqueue.extender.controller.records import WorkloadRecords
from gpuqueue.extender.controller.workload_writes import WorkloadWrites
from gpuqueue.extender.controller.writes import Writes
from gpuqueue.extender.kube import Informer
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import WorkloadSpec
from gpuqueue.api import core, kueue
from gpuqueue.webhook.mutation import StaticQueueView, is_managed

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
                                                 backoff_max=self.options.watch_backoff_max)
        self.priorities = convert.PriorityResolver()
        self.queue_view = StaticQueueView()
        self.engine: QuotaEngine | None = None
        self.jobs: dict[str, JobState] = {}
        self._templates: dict[bytes, core.PodTemplateSpec] = {}  # see _job_model
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

        on("namespaces", self._on_namespace, self._on_namespace_delete)
        for kind in _SPEC_KINDS:
            upsert = functools.partial(self._on_spec_object, kind.kind)
            self.informers[kind.name].add_handler(
                on_add=upsert, on_update=functools.partial(self._on_spec_update, upsert),
                on_delete=functools.partial(self._on_spec_delete, kind.kind))
        on("jobs", self._on_job, self._on_job_delete)
        self.informers["workloads"].add_handler(on_delete=self._on_workload_delete)
        on("pods", self.job_steering.on_pod, self.job_steering.on_pod_delete)

    def _on_namespace(self, obj: dict) -> None:
        name = obj["metadata"]["name"]
        labels = {"kubernetes.io/metadata.name": name, **(obj["metadata"].get("labels") or {})}
        self.queue_view.namespaces[name] = labels
        if self.engine is not None:
            self.engine.set_namespace(name, labels)
            self.mark_dirty()

    def _on_namespace_delete(self, obj: dict) -> None:
        self.queue_view.namespaces.pop(obj["metadata"]["name"], None)

    def _apply_spec(self, engine: QuotaEngine | None, kind: str, obj: dict) -> None:
        try:
            if kind == "PriorityClass":
                self.priorities.set_priority_class(core.PriorityClass.model_validate(obj))
            elif kind == "WorkloadPriorityClass":
                self.priorities.set_workload_priority_class(kueue.WorkloadPriorityClass.model_validate(obj))
            elif engine is None:
                return
            elif kind == "ResourceFlavor":
                engine.set_flavor(convert.flavor_spec(kueue.ResourceFlavor.model_validate(obj)))
            elif kind == "Cohort":
                engine.set_cohort(convert.cohort_spec(kueue.Cohort.model_validate(obj)))
            elif kind == "ClusterQueue":
                engine.set_cluster_queue(convert.cluster_queue_spec(kueue.ClusterQueue.model_validate(obj)))
            elif kind == "LocalQueue":
                spec = convert.local_queue_spec(kueue.LocalQueue.model_validate(obj))
                engine.set_local_queue(spec)
                self.queue_view.local_queues.add((spec.namespace, spec.name))
        except (ValidationError, ValueError, KeyError) as exc:
            log.warning("ignoring %s %s: %s", kind, W_key(obj), exc)

    def _on_spec_object(self, kind: str, obj: dict) -> None:
        self._apply_spec(self.engine, kind, obj)
        if kind in ("ClusterQueue", "Cohort"):
            self.writes.releases.regroup()  # the cohort trees may have changed
        self.queue_status.changed()
        self.mark_dirty()

    def _on_spec_update(self, upsert, old: dict, new: dict) -> None:
        """A write to the status alone (our own ClusterQueue/LocalQueue status writes, once a second
        per queue, come back this way) changes nothing the engine reads: no engine update, no pass.
        Re-applying the spec and running a pass for each was a fifth of the controller's CPU in
        bench/kueue_realtime.py."""
        if _spec_of(old) == _spec_of(new):
            self.queue_status.changed()  # someone else may have written over ours
            return
        upsert(new)

    def _on_spec_delete(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if kind in ("ClusterQueue", "Cohort"):
            self.writes.releases.regroup()
        if kind == "PriorityClass":
            self.priorities.pod_classes.pop(name, None)
        elif kind == "WorkloadPriorityClass":
            self.priorities.workload_classes.pop(name, None)
        elif self.engine is not None:
            e = self.engine
            {"ResourceFlavor": lambda: e.remove_flavor(name), "Cohort": lambda: e.remove_cohort(name),
             "ClusterQueue": lambda: e.remove_cluster_queue(name),
             "LocalQueue": lambda: e.remove_local_queue(obj["metadata"].get("namespace", "default"), name),
             }.get(kind, lambda: None)()
        if kind == "LocalQueue":
            self.queue_view.local_queues.discard((obj["metadata"].get("namespace", "default"), name))
        self.queue_status.changed()
        self.mark_dirty()

    def is_managed(self, job: dict) -> bool:
        return is_managed(job, job["metadata"].get("namespace", "default"), self.queue_view, self.options.managed_jobs)

    def _on_job(self, job: dict) -> None:
        if not self.recovered or not self.is_managed(job):
            return
        key = W_key(job)
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
        st = self.jobs.get(W_key(job))
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
        st = JobState(key=W_key(job), namespace=meta["namespace"], name=meta["name"], uid=meta["uid"],
                      wl_name=W.workload_name(meta["name"], meta["uid"]),
                      created=W.parse_time(meta.get("creationTimestamp")) or time.time())
        self.jobs[st.key] = st
        return st

    def workload_spec(self, st: JobState, job: dict, queued_at: float | None = None) -> WorkloadSpec:
        """The engine's view of the Job as it stands (its current pod template: after a refused
        template change it still carries its old flavor's nodeSelector, which then limits the
        flavors it can be given)."""
        model = self._job_model(job)
        assert self.engine is not None
        return convert.workload_from_job(model, self.priorities, created=queued_at or st.created,
                                         seq=self.engine.next_seq())

    def _job_model(self, job: dict) -> core.Job:
        """The Job validated, its pod template validated once per distinct template: Jobs made
        from one template (most of them) share one model - validating each whole Job was a twelfth
        of the controller's CPU in bench/kueue_realtime.py - and the engine computes the pod set of
        a shared template once (convert.pod_set_from_template)."""
        spec = job.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        if not isinstance(template, dict):
            return core.Job.model_validate(job)
        key = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
        model = self._templates.get(key)
        if model is None:
            try:
                model = core.PodTemplateSpec.model_validate(template)
            except ValidationError:
                return core.Job.model_validate(job)  # raises, naming the field from the Job down
            if len(self._templates) >= 4096:
                self._templates.clear()
            self._templates[key] = model
        return core.Job.model_validate({**job, "spec": {**spec, "template": model}})

    def priority_of(self, job: dict) -> int:
        try:
            return self.priorities.priority_of(self._job_model(job))
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
        for name in ("namespaces",):
            for obj in self.informers[name].list():
                self._on_namespace(obj)
        for kind in _SPEC_KINDS:
            for obj in self.informers[kind.name].list():
                self._apply_spec(engine, kind.kind, obj)
        workloads = self.informers["workloads"]
        jobs = [j for j in self.informers["jobs"].list() if self.is_managed(j)]
        jobs.sort(key=lambda j: (j["metadata"].get("creationTimestamp", ""), W_key(j)))
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


def W_key(obj: dict) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


_BOOKKEEPING = ("resourceVersion", "managedFields", "generation")


def _spec_of(obj: dict) -> tuple:
    """Everything of a quota object but its status and the metadata the API server keeps."""
    meta = obj.get("metadata") or {}
    return ({k: v for k, v in obj.items() if k not in ("status", "metadata")},
            {k: v for k, v in meta.items() if k not in _BOOKKEEPING})


def _owner_job(obj: dict) -> str:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == "Job" and ref.get("controller"):
            return ref.get("name", "")
    return ""


_SPEC_KINDS = (K.PRIORITY_CLASSES, K.WORKLOAD_PRIORITY_CLASSES, K.RESOURCE_FLAVORS, K.COHORTS, K.CLUSTER_QUEUES,
               K.LOCAL_QUEUES)
