"""The controller: watch caches feed the quota engine; a debounced scheduling pass turns the
engine's decisions into writes (workload_writes.py, jobs.py). As Kueue's manager wires a cache, a
queue manager and one reconciler per kind, Controller owns the informers, the kinds it queues, the
term (leader, recovered, engine) and the pass, and wires the parts in one place (__init__,
_wire_handlers): JobReconciler (job_reconciler.py), WorkloadReconciler (workload_events.py),
PodGroupReconciler (pod_group_events.py), RebuildFromApi (rebuild.py). The parts see the
controller only as Scheduling (job_state.py); docs/controller.md lists what each reads and writes.

Only the leader writes. On becoming leader it rebuilds a fresh engine from what the API holds
(every Workload holding a reservation first, before any pass), so nothing is admitted twice.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from kubernetes_asyncio import client

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.writes import cohorts
from gpuqueue.extender.controller.client.cached_fields import transform_for
from gpuqueue.extender.controller.writes.events import EventRecorder
from gpuqueue.extender.controller.queues.default_queue_label import DefaultQueueLabels
from gpuqueue.extender.controller.reconcilers.departures import Departures
from gpuqueue.extender.controller.reconcilers.following import Following
from gpuqueue.extender.controller.writes.jobs import JobSteering
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status, skip_environment_lookups
from gpuqueue.extender.controller.leadership.leader import LeaderElector
from gpuqueue.extender.controller.core.job_state import JobState
from gpuqueue.extender.controller.serving.metrics import Metrics
from gpuqueue.extender.controller.reconcilers.job_reconciler import JobReconciler
from gpuqueue.extender.controller.reconcilers.scheduler_errors import SchedulerErrors
from gpuqueue.extender.controller.kinds.managed_kinds import RUNTIMES, PodOwners, informer_lookup, managed_kinds
from gpuqueue.extender.controller.options import Options
from gpuqueue.extender.controller.core.owned_workloads import OwnedWorkloads
from gpuqueue.extender.controller.leadership.rebuild import RebuildFromApi
from gpuqueue.extender.controller.reconcilers.workload_events import WorkloadReconciler
from gpuqueue.extender.controller.reconcilers.pod_group_events import PodGroupReconciler
from gpuqueue.extender.controller.queues.queue_status import QueueStatus
from gpuqueue.extender.controller.queues.quota_objects import QuotaObjects
from gpuqueue.extender.controller.kinds.lws_groups import LWS_KIND, LwsGroupKind, with_lws_groups
from gpuqueue.extender.controller.kinds.pod_groups import PodGroupKind, with_groups
from gpuqueue.extender.controller.podsready.pods_ready_tracker import PodsReadyTracker
from gpuqueue.extender.controller.reconcilers.unqueued_events import UnqueuedEvents
from gpuqueue.extender.controller.writes.kueue_finalizers import KueueFinalizers
from gpuqueue.extender.controller.writes.records import WorkloadRecords
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites
from gpuqueue.extender.controller.writes.writes import Writes
from gpuqueue.kube import Informer
from gpuqueue.kube.version import TOO_OLD_FOR_PODS, server_version, too_old_for_gates
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.tas.capacity import NodeSource
from gpuqueue.jobframework.managed import StaticQueueView

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
        # the nodes' free capacity, for flavors that admit only what their nodes hold; set by the
        # extender's view when one serves beside this controller (tas_nodes.py)
        self.node_source: NodeSource | None = None
        # the tracked Jobs: JobReconciler's records, shared with Departures (a gone Job's reservation)
        self.jobs: dict[str, JobState] = {}
        o = self.options
        self.writes = Writes(lambda: self.leader, o, scope_of=lambda cq: cohorts.tree(self.engine, cq))
        self.events = EventRecorder(self.kube, self.writes.spawn, identity, self.metrics.events_dropped, o.event_qps,
                                    o.event_burst)
        records = WorkloadRecords(self.kube, self.informers["workloads"])
        # the parts; a callback names a part built after the one that calls it (the wiring's cycles)
        self.job_steering = JobSteering(self, self.kube, self.informers, records, self.writes, self.events,
                                        self.metrics.job_admission_wait, lambda st: self.job_reconciler.resubmit(st),
                                        self.mark_dirty, o.resubmit_backoff, self.pod_owners)
        self.departures = Departures(self, self.jobs, self.kube, self.writes, self.job_steering, self.mark_dirty,
                                     status_changed=lambda: self.queue_status.changed())
        self.workload_writes = WorkloadWrites(self, self.kube, records, self.job_steering, self.writes, self.events,
                                              self.metrics, self.priorities,
                                              lambda job, kind: self.job_reconciler.priority_of(job, kind),
                                              status_changed=lambda: self.queue_status.changed(),
                                              departed=self.departures.decided,
                                              evicted=lambda st: self.pods_ready.judge(st))
        self.scheduler_errors = SchedulerErrors(self, self.workload_writes, self.job_steering.owners.uids,
                                                self.job_steering.pods_of)
        self.following = Following(self, self.workload_writes,
                                   lambda st, job, queued_at: self.job_reconciler.submit(st, job, queued_at),
                                   self.mark_dirty)
        self.job_reconciler = JobReconciler(self, self.jobs, self.owned, self.queue_view, o.managed_jobs,
                                            self.priorities, self.kube, self.writes, self.job_steering,
                                            self.workload_writes, self.following, self.departures, self.mark_dirty)
        self.workload_reconciler = WorkloadReconciler(self, self.job_reconciler, self.job_steering,
                                                      self.workload_writes, self.mark_dirty)
        self.pod_group_reconciler = PodGroupReconciler(self, self.job_reconciler, self.owned, self.job_steering,
                                                       self.workload_writes, self.events, self.mark_dirty)
        self.queue_status = QueueStatus(self.kube, self.informers["clusterqueues"], self.informers["localqueues"],
                                        self.metrics, self.workload_writes.evicting, o.status_interval,
                                        o.status_max_delay,
                                        engine=lambda: self.engine if self.leader and self.recovered else None)
        self.quota_objects = QuotaObjects(self.priorities, self.queue_view, lambda: self.engine,
                                          lambda: self.writes.releases.regroup(), self.queue_status.changed,
                                          self.mark_dirty, self.following.priority_class_changed)
        self.rebuild = RebuildFromApi(self, self.informers, self.quota_objects, self.job_reconciler,
                                      self.workload_reconciler, self.workload_writes, self.following,
                                      self.departures, self.job_steering)
        self.unqueued_events = UnqueuedEvents(
            self.informers, [(k.kind.name, k.integration) for k in self.kinds if not isinstance(k, PodGroupKind)],
            self.queue_view, o.managed_jobs, o.enforcement, lambda: {k.integration.framework for k in self.kinds},
            self.events)
        self.kueue_finalizers = KueueFinalizers(self.kube, self.informers["workloads"], self.writes,
                                                lambda: self.leader and self.recovered)
        self.default_queue_labels = DefaultQueueLabels(self.kube, self.informers, o.managed_jobs,
                                                       o.enforcement.exempt_namespaces,
                                                       lambda: self.leader and self.recovered)
        self.leader = False
        self.recovered = False
        self.passes = 0
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.elector: LeaderElector | None = None
        self._elector_task: asyncio.Task | None = None
        self._leading_task: asyncio.Task | None = None
        self._stopping = False  # stop() has begun: no term starts
        self._wire_handlers()
        self.pods_ready = PodsReadyTracker(self, o.pods_ready, self.job_reconciler.state_of,
                                           self.job_reconciler.state_of_workload,
                                           self.job_reconciler.submit)  # waitForPodsReady (docs/podsready.md)

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the caches; lead at once, or when the Lease says so (--leader-elect)."""
        await self._skip_missing_kinds()
        await self._refuse_pods_on_old_servers()
        for inf in self.informers.values():
            inf.start()
        self._tasks.append(asyncio.create_task(self._pass_loop(), name="controller:passes"))
        self._tasks.append(asyncio.create_task(self.queue_status.loop(), name="controller:status"))
        self._tasks.append(asyncio.create_task(self.default_queue_labels.loop(), name="controller:default-queue-labels"))
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
        # Writes stop before the elector hands the Lease over (client-go's ReleaseOnCancel asks the
        # same): a follower takes a released Lease within half a second, and must not lead while a
        # write of this term is still on its way.
        self._stopping = True  # and no term starts meanwhile
        self.leader = False
        if self._leading_task is not None and not self._leading_task.done():
            self._leading_task.cancel()
        await self._stop_writing()
        if self._elector_task is not None:
            self._elector_task.cancel()
            try:
                await self._elector_task
            except (asyncio.CancelledError, Exception):
                pass
            self._elector_task = None
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
        if self._stopping:
            return
        self._leading_task = asyncio.create_task(self.become_leader(), name="controller:become-leader")

    async def become_leader(self) -> None:
        self.leader = True
        self.metrics.leader.set(1)
        await self.wait_synced()
        if self.leader and not self.recovered:
            self.engine = QuotaEngine(fair_sharing=self.options.fair_sharing)
            self.engine.nodes = self.node_source
            self.rebuild.run(self.engine)
            self.pods_ready.rebuilt()
            self.recovered = True
            self.mark_dirty()
            self.default_queue_labels.poke()
            self.kueue_finalizers.sweep()
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
        self.pods_ready.forget()
        self.engine = None
        self.job_reconciler.clear()

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
                groups = self.pod_group_reconciler
                on("pods", functools.partial(groups.on_group_pod, kind=kind, gone=False),
                   functools.partial(groups.on_group_pod, kind=kind, gone=True))
                if isinstance(kind, LwsGroupKind):
                    kind.bind(self.informers)
                    on(LWS_KIND.name, functools.partial(groups.on_lws, kind=kind), lambda lws: None)
            else:
                on(kind.kind.name, functools.partial(self.job_reconciler.on_job, kind=kind),
                   self.job_reconciler.on_job_delete)
        workloads = self.workload_reconciler
        self.informers["workloads"].add_handler(on_add=lambda wl: workloads.on_workload(None, wl),
                                                on_update=workloads.on_workload,
                                                on_delete=workloads.on_workload_delete)
        on("pods", self.job_steering.on_pod, self.job_steering.on_pod_delete)
        on("pods", self.scheduler_errors.on_pod, lambda pod: None)

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
        if self.pods_ready.holds_admission():
            return []  # Kueue's blockAdmission: the scheduler waits; a PodsReady write wakes it
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

