"""The controller: watch caches feed the quota engine; a debounced scheduling pass turns the
engine's decisions into writes (workload_writes.py, jobs.py). Every change of a tracked Job is
held against what the engine holds for it (equivalence.py): its pod sets, its queue, whether it
may run; a Job stays tracked while it owns a Workload that is not finished, whatever its labels.

Only the leader writes. On becoming leader it rebuilds a fresh engine from what the API holds
(every Workload holding a reservation first, before any pass), so nothing is admitted twice.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from kubernetes_asyncio import client
from pydantic import ValidationError

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller import cohorts
from gpuqueue.extender.controller.cached_fields import transform_for
from gpuqueue.extender.controller.events import EventRecorder
from gpuqueue.extender.controller.departures import Departures
from gpuqueue.extender.controller.following import Following
from gpuqueue.extender.controller.jobs import JobSteering
from gpuqueue.extender.controller.kubeapi import KubeApi, is_status, skip_environment_lookups
from gpuqueue.extender.controller.leader import LeaderElector
from gpuqueue.extender.controller.job_state import JobState
from gpuqueue.extender.controller.metrics import Metrics
from gpuqueue.extender.controller.managed_kinds import (BATCH_JOB, RUNTIMES, ManagedKind, PodOwners,
                                                        controller_ref, informer_lookup, managed_kinds)
from gpuqueue.extender.controller.options import Options
from gpuqueue.extender.controller.owned_workloads import OwnedWorkloads, owner_uids
from gpuqueue.extender.controller.rebuild import RebuildFromApi
from gpuqueue.extender.controller.workload_events import WorkloadEvents
from gpuqueue.extender.controller.pod_group_events import PodGroupEvents
from gpuqueue.extender.controller.queue_status import QueueStatus
from gpuqueue.extender.controller.quota_objects import QuotaObjects
from gpuqueue.extender.controller.lws_groups import LWS_GROUP_KIND, LWS_KIND, LwsGroupKind, with_lws_groups
from gpuqueue.extender.controller.pod_groups import GROUP_KIND, PodGroupKind, with_groups
from gpuqueue.extender.controller.records import WorkloadRecords
from gpuqueue.jobframework.integration import Finished
from gpuqueue.jobframework.kinds.pods import IS_GROUP_WORKLOAD
from gpuqueue.extender.controller.workload_writes import WorkloadWrites
from gpuqueue.extender.controller.writes import Writes
from gpuqueue.kube import Informer
from gpuqueue.kube.version import TOO_OLD_FOR_PODS, server_version, too_old_for_gates
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import WorkloadSpec
from gpuqueue.jobframework.managed import StaticQueueView, queue_name_of, stays_managed

log = logging.getLogger("gpuqueue.controller")


class Controller(RebuildFromApi, WorkloadEvents, PodGroupEvents):
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
        # the kinds it queues (integrations.frameworks), the owners on their pods' chains, runtimes
        enabled = with_lws_groups(with_groups(managed_kinds(self.options.integrations)),
                                  self.options.integrations.frameworks)
        self.kinds = enabled.managed
        self.kinds_by_kind = {k.kind.kind: k for k in self.kinds}
        self.needs = enabled.needs
        self.crd_kinds = enabled.watched
        for kind in (*K.WATCHED, *self.crd_kinds):
            fn, args = kind.list_call(api)
            self.informers[kind.name] = Informer(fn, *args, name=kind.name, watch_timeout=self.options.watch_timeout,
                                                 backoff_initial=self.options.watch_backoff_initial,
                                                 backoff_max=self.options.watch_backoff_max,
                                                 transform=transform_for(kind.name))
        for managed in self.kinds:
            if managed.integration.framework in RUNTIMES:
                managed.lookup = informer_lookup(self.informers, RUNTIMES[managed.integration.framework])
        self.pod_owners = PodOwners({k.kind: self.informers[k.name] for k in (K.JOBS, *self.crd_kinds)})
        self.owned = OwnedWorkloads(self.informers["workloads"])  # first of the Workloads' handlers
        self.priorities = convert.PriorityResolver()
        self.queue_view = StaticQueueView()
        self.engine: QuotaEngine | None = None
        self.jobs: dict[str, JobState] = {}
        o = self.options
        self.writes = Writes(lambda: self.leader, o, scope_of=lambda cq: cohorts.tree(self.engine, cq))
        self.events = EventRecorder(self.kube, self.writes.spawn, identity, self.metrics.events_dropped, o.event_qps,
                                    o.event_burst)
        records = WorkloadRecords(self.kube, self.informers["workloads"])
        self.job_steering = JobSteering(self, self.kube, self.informers, records, self.writes, self.events,
                                        self.metrics.job_admission_wait, self.resubmit, self.mark_dirty,
                                        o.resubmit_backoff, self.pod_owners)
        self.departures = Departures(self, self.jobs, self.kube, self.writes, self.job_steering, self.mark_dirty,
                                     status_changed=lambda: self.queue_status.changed())
        self.workload_writes = WorkloadWrites(self, self.kube, records, self.job_steering, self.writes, self.events,
                                              self.metrics, self.priorities, self.priority_of,
                                              status_changed=lambda: self.queue_status.changed(),
                                              departed=self.departures.decided)
        self.following = Following(self, self.workload_writes, self._submit,
                                   self.mark_dirty)
        self.queue_status = QueueStatus(self.kube, self.informers["clusterqueues"], self.informers["localqueues"],
                                        self.metrics, self.workload_writes.evicting, o.status_interval,
                                        engine=lambda: self.engine if self.leader and self.recovered else None)
        self.quota_objects = QuotaObjects(self.priorities, self.queue_view, lambda: self.engine,
                                          lambda: self.writes.releases.regroup(), self.queue_status.changed,
                                          self.mark_dirty, self.following.priority_class_changed)
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
        await self._skip_missing_kinds()
        await self._refuse_pods_on_old_servers()
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

    async def _skip_missing_kinds(self) -> None:
        """A kind whose CRD is not installed (404 on a first list) is skipped with one log line, as
        Kueue does: its informer is not started (the caches would wait for it forever). Installing
        the CRD later takes a restart."""
        missing = []
        for kind in list(self.crd_kinds):
            try:
                await self.kube.request("GET", kind.path(), query=[("limit", "1")])
            except Exception as exc:  # noqa: BLE001 - any other failure: the informer retries it
                if is_status(exc, 404):
                    log.info("No matching API in the server for job framework, skipped setup of controller: "
                             "%s.%s/%s", kind.plural, kind.group, kind.version)
                    missing.append(kind)
        # a kind that reads a missing one (a RayJob's pods come through RayClusters, a TrainJob's pod
        # sets from its runtime) could not be queued: skipped too
        for managed in self.kinds:
            needs = [k for k in self.needs.get(managed.integration.framework, ()) if k in missing]
            if needs and managed.kind not in missing:
                log.info("integration %s skipped: it needs %s.%s, which is not installed",
                         managed.integration.framework, needs[0].plural, needs[0].group)
                missing.append(managed.kind)
        for kind in missing:
            self.crd_kinds.remove(kind)
            self.informers.pop(kind.name, None)
            self.pod_owners.caches.pop(kind.kind, None)
            self.kinds = [k for k in self.kinds if k.kind is not kind]
            self.kinds_by_kind.pop(kind.kind, None)

    async def _refuse_pods_on_old_servers(self) -> None:
        """Kueue refuses its pod integration on a server older than 1.27, which drops scheduling
        gates (the webhook gates nothing there either); one log line."""
        pod_kinds = [k for k in self.kinds if k.deletes_to_stop]
        if not pod_kinds:
            return
        version = await server_version(self.api, self.options.request_timeout)
        if too_old_for_gates(version):
            log.warning("%s (this API server is %s): pods are not queued; a GPU pod is refused a node by the extender",
                        TOO_OLD_FOR_PODS, (version or {}).get("gitVersion") or "")
            self.kinds = [k for k in self.kinds if not k.deletes_to_stop]
            for kind in pod_kinds:
                self.kinds_by_kind.pop(kind.kind.kind, None)

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
        for kind in self.kinds:
            if isinstance(kind, PodGroupKind):
                on("pods", functools.partial(self._on_group_pod, kind=kind, gone=False),
                   functools.partial(self._on_group_pod, kind=kind, gone=True))
                if isinstance(kind, LwsGroupKind):
                    kind.bind(self.informers)
                    on(LWS_KIND.name, functools.partial(self._on_lws, kind=kind), lambda lws: None)
            else:
                on(kind.kind.name, functools.partial(self._on_job, kind=kind), self._on_job_delete)
        self.informers["workloads"].add_handler(on_add=lambda wl: self._on_workload(None, wl),
                                                on_update=self._on_workload, on_delete=self._on_workload_delete)
        on("pods", self.job_steering.on_pod, self.job_steering.on_pod_delete)

    def is_managed(self, job: dict, workload: dict | None = None, kind: ManagedKind = BATCH_JOB) -> bool:
        """Kueue's rule, and held while it has a Workload that is not finished (stays_managed).
        An object controlled by one of a queued kind (a JobSet's Jobs, a RayJob's RayCluster) is
        queued as part of its owner, not by itself (Kueue's IsOwnerManagedByKueue)."""
        parent = controller_ref(job)
        if parent is not None and parent.get("kind") in self.kinds_by_kind and \
                self.kinds_by_kind[parent["kind"]].kind.api_version == parent.get("apiVersion"):
            return False
        if not kind.queued(job):
            return False
        return stays_managed(job, job["metadata"].get("namespace", "default"), self.queue_view,
                             self.options.managed_jobs, _open(workload, job, kind.finished(job) is not None))

    def _workload_of(self, job: dict, kind: ManagedKind = BATCH_JOB) -> dict | None:
        """Its Workload, found by its UID: one created under gpuqueue's earlier name is kept."""
        meta = job["metadata"]
        return self.owned.find(meta["namespace"], meta["uid"], kind.workload_name(job))

    def _on_job(self, job: dict, held: bool = False, kind: ManagedKind = BATCH_JOB) -> None:
        """`held`: the Job was ours a moment ago (its Workload was deleted): ours still. (Every
        kind it queues comes here: a Job is any of them.)"""
        if not self.recovered or self.kinds_by_kind.get(kind.kind.kind) is not kind:
            return  # (a kind refused at start: the pod integration on an old server)
        meta = job["metadata"]
        key = kind.key(meta["namespace"], meta["name"])
        for pod in kind.releasable(job):
            self._release_pod(key, pod)
        st = self.jobs.get(key)
        if st is not None and st.uid != job["metadata"]["uid"]:
            self._depart(st)  # a new Job of the same name
            st = None
        if st is None:
            if not held and not kind.queued(job):
                return  # (before naming its Workload: every pod of the cluster comes here with `pod` enabled)
            wl = self._workload_of(job, kind)
            if not held and not self.is_managed(job, wl, kind):
                return
            st = self._track(job, wl, kind)
            if kind.finished(job):
                st.phase = "finished"
                return
            if wl is None:
                self.workload_writes.ensure_workload(st)
            self._submit(st, job)
            self._steer(st, job)
            self.mark_dirty()
            return
        if st.phase == "finished":
            return
        done = kind.finished(job)
        if done:
            self._finish(st, done)
            return
        self.following.follow(st, job)
        self._steer(st, job)
        self.job_steering.poke(st.uid)

    def _steer(self, st: JobState, job: dict) -> None:
        """Kueue's steps 7 and 8, on every change of the Job: an admitted Job suspended by someone
        else is started again (the admission stands, with its admitted template: a nodeSelector
        edited meanwhile does not survive; to stop a Job, delete it); a Job running without a
        reservation written is suspended, however often it is started."""
        if not st.kind.suspended(job) and not self.job_steering.may_run(st):
            self.job_steering.stop(st)
        elif st.phase == "admitted" and st.kind.held(job):
            w = self.engine.state.admitted.get(st.key) if self.engine is not None else None
            if w is not None:
                self.job_steering.ensure_running(st, w.admission)

    def _on_job_delete(self, job: dict) -> None:
        st = self.state_of(job)
        if st is None or st.uid != job["metadata"]["uid"]:
            return
        self._depart(st)
        self.mark_dirty()

    # -- jobs and the engine --------------------------------------------------------------------------------
    def state_of(self, obj: dict) -> JobState | None:
        """What it tracks of an object of a kind it queues (by its uid: None for another object of
        the name)."""
        meta = obj["metadata"]
        for kind in self.kinds:
            st = self.jobs.get(kind.key(meta.get("namespace") or "", meta.get("name") or ""))
            if st is not None and st.uid == meta.get("uid"):
                return st
        return None

    def state_of_workload(self, wl: dict) -> JobState | None:
        """What it tracks of a Workload's owner (by its controller reference's kind and name)."""
        ref = W.owner_ref(wl)
        if ((wl["metadata"].get("annotations") or {}).get(IS_GROUP_WORKLOAD) == "true" and not ref
                and GROUP_KIND.kind in self.kinds_by_kind):
            ref = {"kind": GROUP_KIND.kind, "name": wl["metadata"]["name"]}  # owned by its pods, controlled by none
        lws_groups = self.kinds_by_kind.get(LWS_GROUP_KIND.kind)
        if ref.get("kind") == LWS_KIND.kind and isinstance(lws_groups, LwsGroupKind):
            # controlled by its LeaderWorkerSet, one of its groups': the group it was named for
            namespace = wl["metadata"].get("namespace") or ""
            name = lws_groups.record_name(namespace, wl["metadata"]["name"])
            return self.jobs.get(lws_groups.key(namespace, name)) if name else None
        kind = self.kinds_by_kind.get(ref.get("kind", ""))
        if kind is None:
            return None
        return self.jobs.get(kind.key(wl["metadata"].get("namespace") or "", ref.get("name") or ""))

    def _track(self, job: dict, wl: dict | None = None, kind: ManagedKind = BATCH_JOB) -> JobState:
        meta = job["metadata"]
        st = JobState(key=kind.key(meta["namespace"], meta["name"]), namespace=meta["namespace"], name=meta["name"],
                      uid=meta["uid"],
                      wl_name=wl["metadata"]["name"] if wl is not None else kind.workload_name(job),
                      created=W.parse_time(meta.get("creationTimestamp")) or time.time(),
                      queue_name=queue_name_of(job, ((wl or {}).get("spec") or {}).get("queueName")),
                      generation=kind.generation(job), kind=kind)
        self.jobs[st.key] = st
        return st

    def workload_spec(self, st: JobState, job: dict, queued_at: float | None = None) -> WorkloadSpec:
        """The engine's view of the Job as it stands (its current pod templates: after a refused
        template change they still carry the old flavor's nodeSelector, which then limits the
        flavors it can be given), in the LocalQueue its Workload names."""
        adapter = st.kind
        assert self.engine is not None
        return WorkloadSpec(key=st.key, namespace=st.namespace, queue_name=st.queue_name,
                            pod_sets=adapter.pod_sets(job), priority=adapter.priority(job, self.priorities),
                            created=queued_at or st.created, seq=self.engine.next_seq(), uid=st.uid)

    def priority_of(self, job: dict, kind: ManagedKind = BATCH_JOB) -> int:
        try:
            return kind.priority(job, self.priorities)
        except (ValidationError, ValueError):
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
        job = self.job_steering.job(st)
        if self.engine is None or job is None or self.jobs.get(st.key) is not st or st.phase != "blocked":
            return
        st.queue_name = queue_name_of(job, st.queue_name)
        st.generation = st.kind.generation(job)
        self._submit(st, job, queued_at=time.time())
        self.workload_writes.update_spec(st)
        self.mark_dirty()

    def _finish(self, st: JobState, done: Finished) -> None:
        cq = None
        if self.engine is not None:
            w = self.engine.finish(st.key)
            admission = getattr(w, "admission", None)  # an AdmittedWorkload's; a pending one has none
            if admission is not None and st.phase == "admitted":
                cq = admission.cluster_queue
        st.phase = "finished"
        self.workload_writes.finish_workload(st, done, cq)
        self.mark_dirty()

    def _forget(self, st: JobState) -> None:
        if self.engine is not None:
            self.engine.delete(st.key)
        self.workload_writes.evicting.pop(st.key, None)
        self.jobs.pop(st.key, None)
        st.phase = "finished"

    def _depart(self, st: JobState) -> None:
        """The Job is gone (deleted, or replaced by a new one of its name). Its Workload goes too,
        but an admitted one's reservation counts until its pods are gone (departures.py). Other
        Jobs are forgotten at once: a pending one's pods hold no quota, and an evicted one's
        eviction waits for its pods itself."""
        w = self.engine.state.admitted.get(st.key) if self.engine is not None else None
        self._forget(st)
        if w is not None and st.phase == "admitted":
            self.departures.depart(st, w)
        else:
            self.workload_writes.delete_workload(st)

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
        took = time.perf_counter() - started
        self.metrics.pass_duration.observe(took)
        if decisions:
            self.metrics.admission_attempt(any(isinstance(x, d.Admitted) for x in decisions), took)
            self.queue_status.changed()
        return decisions


def _open(workload: dict | None, job: dict, finished: bool) -> bool:
    """A Workload of this Job that is not finished - or says so while the Job is not (only the
    Job's end finishes it): the Job holds or waits for quota."""
    if workload is None or job["metadata"]["uid"] not in owner_uids(workload):
        return False
    return not W.is_true(workload, "Finished") or not finished
