"""The engine's decisions carried out on Workloads: created for each Job, the pending message, the
reservation (admission), eviction and requeueing, Finished, deletion. Each is a write in the Job's
chain (writes.py), so the API's record stays within quota at every instant:

- an admission waits for every release under way in its cohort tree when it was decided;
- a victim's quota counts until its pods are gone: only then is its reservation cleared.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Awaitable, Callable

from gpuqueue.extender.controller.writes import cohorts
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.writes.events import EventRecorder
from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.writes.jobs import JobSteering
from gpuqueue.extender.controller.client.kubeapi import CALL_CLASS, CALL_TAG, INFORM, URGENT, KubeApi, is_status
from gpuqueue.extender.controller.serving.metrics import Metrics
from gpuqueue.extender.controller.writes.workload_records import WorkloadRecordKeeping
from gpuqueue.extender.controller.writes.records import WorkloadRecords
from gpuqueue.extender.controller.writes.writes import Writes
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.model import Admission
from gpuqueue.jobframework.integration import Finished

log = logging.getLogger("gpuqueue.controller")


class WorkloadWrites(WorkloadRecordKeeping):
    def __init__(self, sched: Scheduling, kube: KubeApi, workloads: WorkloadRecords, jobs: JobSteering,
                 writes: Writes, events: EventRecorder, metrics: Metrics, priorities: convert.PriorityResolver,
                 priority_of: Callable[..., int], status_changed: Callable[[], None],
                 departed: Callable[[JobState, d.Decision], None],
                 evicted: Callable[[JobState], None] = lambda st: None) -> None:
        """`status_changed`: the queues' status may show something else now (QueueStatus.changed);
        `departed`: takes the engine's decisions about a gone Job's reservation (Departures.decided);
        `evicted`: a victim's reservation is gone from the API and its Job is pending again (whether
        the write's watch event came before its response or after)."""
        self.sched = sched
        self.kube = kube
        self.workloads = workloads
        self.jobs = jobs
        self.writes = writes
        self.events = events
        self.metrics = metrics
        self.priorities = priorities
        self.priority_of = priority_of
        self.status_changed = status_changed
        self.departed = departed
        self.on_evicted = evicted
        self._created: dict[str, asyncio.Future] = {}
        self.evicting: dict[str, Admission] = {}  # victims whose reservation still stands in the API
        self._pending_latest: dict[str, _PendingMessage] = {}  # key -> the pending message to write
        self._pending_queue: collections.deque[_PendingMessage] = collections.deque()  # by due time
        self._pending_sweep: asyncio.TimerHandle | None = None

    def forget_writes(self) -> None:
        """The writes were cancelled (Writes.cancel_all)."""
        self._created.clear()
        self.evicting.clear()
        self._pending_latest.clear()
        self._pending_queue.clear()
        if self._pending_sweep is not None:
            self._pending_sweep.cancel()
            self._pending_sweep = None

    # -- decisions ----------------------------------------------------------------------------------------------
    def apply(self, dec: d.Decision) -> None:
        st = self.sched.jobs.get(dec.key)
        if st is None:
            return
        if st.phase == "departed":
            self.departed(st, dec)
        elif isinstance(dec, d.Admitted):
            self.admit(st, dec.admission)
        elif isinstance(dec, d.Preempted):
            preemptor = self.sched.jobs.get(dec.preemptor)
            engine = self.sched.engine
            paths = (cohorts.path(engine, dec.preemptor_cluster_queue), cohorts.path(engine, dec.cluster_queue))

            async def message() -> str:
                # the preemptor's Workload may still be on its way to the API: its UID goes in the message
                created = self._created.get(dec.preemptor)
                if created is not None:
                    await asyncio.gather(asyncio.shield(created), return_exceptions=True)
                return W.preemption_message(self.workloads.uid(preemptor), preemptor.uid if preemptor else "",
                                            dec.reason, *paths)

            self.evict(st, "Preempted", message, dec.reason, dec.cluster_queue, dec.preemptor_cluster_queue)
        elif isinstance(dec, d.Evicted):
            async def fixed(text=dec.message) -> str:
                return text

            self.evict(st, dec.reason, fixed, None, dec.cluster_queue)
        elif isinstance(dec, d.Pending):
            self.pending(st, dec.cluster_queue, dec.message, dec.reason)

    # -- created, pending, admitted -------------------------------------------------------------------------------
    def ensure_workload(self, st: JobState) -> None:
        async def create():
            CALL_TAG.set(_creation_tag(st.key))  # admit() may move it up (this task's context only)
            if st.phase == "admitted":
                CALL_CLASS.set(URGENT)
            if self.workloads.get(st) is not None:
                return
            job = self.jobs.job(st)
            if job is None:
                return
            pc = W.priority_class_of(job, self.priorities.workload_classes, self.priorities.pod_classes, st.kind)
            priority = st.priority if st.priority is not None else self.priority_of(job, st.kind)
            body = W.build_workload(job, priority, pc, st.queue_name, st.kind, st.wl_name)
            try:
                created = await self.kube.create(K.WORKLOADS, st.namespace, body)
            except Exception as exc:
                if is_status(exc, 409):
                    return  # already there (a previous term created it)
                if is_status(exc, 404):
                    return  # namespace gone
                raise
            st.wl_uid = created["metadata"].get("uid", "")
            self.workloads.created(st, created)
            self.events.event(st, "CreatedWorkload", f"Created Workload: {st.namespace}/{st.wl_name}")

        task = self.writes.chain(st.key, create)
        self._created[st.key] = task
        task.add_done_callback(lambda t, k=st.key: self._created.pop(k, None) if self._created.get(k) is t else None)

    def pending(self, st: JobState, cq: str | None, message: str, reason: str) -> None:
        """QuotaReserved=False with the engine's message - written only for a Workload still pending
        `pending_message_delay` seconds after it was found pending, with the latest message
        (coalesced), and never while a call waits for a connection (the API behind): it informs, and
        competed with creations and admissions for the API server while Jobs arrived (issue 16). Kueue
        writes it at the first evaluation; docs/controller.md says why gpuqueue does not."""
        waiting = self._pending_latest.get(st.key)
        if waiting is not None and waiting.st is st:
            waiting.message, waiting.reason = message, reason  # the write, when it comes, says the latest
            return
        # (an entry of an earlier Job of this name, forgotten before its turn, is replaced: left,
        # its turn would find that Job gone and drop it, and this Workload would never be told)
        loop = asyncio.get_running_loop()
        waiting = self._pending_latest[st.key] = _PendingMessage(st, message, reason,
                                                                 loop.time() + self.writes.options.pending_message_delay)
        self._pending_queue.append(waiting)
        self._sweep_at(waiting.due)

    def _sweep_at(self, when: float) -> None:
        if self._pending_sweep is None:
            self._pending_sweep = asyncio.get_running_loop().call_at(when, self._sweep_pending)

    def _drop_pending(self, st: JobState) -> None:
        self._pending_latest.pop(st.key, None)  # its entry in the queue is skipped when its time comes
        self.kube.withdraw(_pending_tag(st.key))  # one already chained and waiting for a connection is moot

    def _sweep_pending(self) -> None:
        """The pending messages that are due, written while no call waits for a connection (the API
        keeps up), a connection's worth at a time: one timer for all of them, not one each."""
        self._pending_sweep = None
        now = asyncio.get_running_loop().time()
        if self.kube.waiting():
            self._sweep_at(now + self.writes.options.pending_message_delay)
            return
        batch = self.writes.options.concurrency
        queue = self._pending_queue
        while queue and queue[0].due <= now and batch > 0:
            waiting = queue.popleft()
            st = waiting.st
            if self._pending_latest.get(st.key) is not waiting:
                continue  # admitted, or forgotten, meanwhile
            if st.phase != "pending" or self.sched.jobs.get(st.key) is not st or not self.sched.leader:
                del self._pending_latest[st.key]
                continue
            self._write_pending(waiting)
            batch -= 1
        if queue:
            self._sweep_at(queue[0].due if batch > 0 else now + 0.05)

    def _write_pending(self, waiting: _PendingMessage) -> None:
        st = waiting.st

        def change(wl: dict) -> dict | None:
            if (wl.get("status") or {}).get("admission"):
                return None  # admitted meanwhile; a later decision says otherwise if it is not
            c = W.condition(wl, "QuotaReserved")
            if c is not None and c.get("status") == "False" and c.get("message") == waiting.message and c.get(
                    "reason") == waiting.reason:
                return None
            status = wl.setdefault("status", {})
            status["conditions"] = W.set_condition(status.get("conditions") or [], "QuotaReserved", "False",
                                                   waiting.reason, waiting.message, W.now_rfc3339(),
                                                   wl["metadata"].get("generation"))
            return wl

        async def write():
            # Written only if it is still the word of the engine when its turn in the chain comes
            # (a workload admitted meanwhile never shows QuotaReserved=False, as in Kueue).
            if self._pending_latest.get(st.key) is not waiting:
                return
            del self._pending_latest[st.key]
            if st.phase != "pending":
                return
            first = W.condition(self.workloads.get(st), "QuotaReserved") is None
            CALL_TAG.set(_pending_tag(st.key))  # admit() withdraws it while it waits for a connection
            try:
                result = await self.workloads.update(st, change)
            except asyncio.CancelledError:
                if self.sched.leader and st.phase != "pending" and not asyncio.current_task().cancelling():
                    return  # withdrawn: the workload was admitted meanwhile (the chain goes on)
                raise
            if result is not None and first and st.phase == "pending":
                self.events.event(st, "Pending", waiting.message)
                self.events.on_workload(st, self.workloads.uid(st), "Pending", waiting.message, "Warning")

        self.writes.chain(st.key, write, call_class=INFORM)

    def admit(self, st: JobState, admission: Admission) -> None:
        """The reservation first (the record), then the Job started."""
        st.phase = "admitted"
        barrier = self.writes.barrier(admission.cluster_queue)
        if st.key in self._created:  # its Workload is still to be created: that call is now urgent too
            self.kube.promote(_creation_tag(st.key))
        self._drop_pending(st)
        flavors = self.jobs.flavors(admission)
        wl = self.workloads.get(st)
        resumed = W.is_true(wl, "Requeued") or W.condition(wl, "Evicted") is not None
        held = self.sched.engine.state.admitted.get(st.key) if self.sched.engine is not None else None
        # Kueue's wait: from creation, or the last requeue, to the decision
        counted = (held.spec.queue_name, held.admitted_at[0] - held.queue_ts[0]) if held is not None else None

        async def write():
            if barrier is not None and not await self.writes.wait(barrier):
                return  # a release was abandoned: this replica is stopping, the next one decides
            if not self.sched.leader or self.sched.jobs.get(st.key) is not st or st.phase != "admitted":
                return
            st.maybe_reserved = True  # from the moment the write may land, whatever its outcome
            wrote = await self.workloads.update(st, lambda wl: W.reserved(wl, admission))
            if wrote is None and self.workloads.get(st) is None:
                return
            if wrote is not None and counted is not None:
                self.metrics.admitted_workload(admission.cluster_queue, st.namespace, *counted)
                uid, cq = self.workloads.uid(st), admission.cluster_queue
                self.events.on_workload(st, uid, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}, wait time "
                                        f"since queued was {counted[1]:.0f}s")
                self.events.on_workload(st, uid, "Admitted", f"Admitted by ClusterQueue {cq}, wait time since "
                                        "reservation was 0s")
            await self.jobs.unsuspend(st, admission, flavors, resumed)
            await self.jobs.retry_parked(st, admission)

        self.writes.chain(st.key, write, call_class=URGENT)

    def retry_parked(self, st: JobState, admission: Admission) -> None:
        """A new leader's part for a workload admitted before it led: pods that kube-scheduler
        parked while no leader ran (a call to the replica that died, a refusal during the change)
        wait for no admission write of this term, so they are moved here once."""
        async def write():
            if not self.sched.leader or self.sched.jobs.get(st.key) is not st or st.phase != "admitted":
                return
            if await self.jobs.retry_parked(st, admission):
                log.info("%s: pods waiting for a node since before this term moved back to kube-scheduler", st.key)

        self.writes.chain(st.key, write, call_class=URGENT)

    # -- evicted and requeued --------------------------------------------------------------------------------------
    def evict(self, st: JobState, reason: str, make_message: Callable[[], Awaitable[str]],
              preempted_reason: str | None, cluster_queue: str | None = None,
              preempting_cluster_queue: str | None = None, event_message: str | None = None,
              admission: Admission | None = None, status_fields: dict | None = None,
              underlying_cause: str = "") -> None:
        """`event_message`: the Job's Event says this instead of the condition's message;
        `admission`: the reservation being taken back, as the engine held it; `status_fields`:
        written with the Evicted condition (a PodsReadyTimeout's requeueState);
        `underlying_cause`: the eviction counter's label (a PodsReadyTimeout's WaitForStart or
        WaitForRecovery)."""
        st.phase = "evicting"
        engine = self.sched.engine
        requeued = (engine.pending.get(st.key) or engine.inactive.get(st.key)) if engine is not None else None
        local_queue = requeued.spec.queue_name if requeued is not None else ""
        self._note_evicting(st, admission)
        rid = self.writes.release(cluster_queue)
        message = ""

        first_try = True

        async def write():
            nonlocal message, first_try
            skip, first_try = first_try and not st.maybe_reserved, False  # (a retry finishes what it began)
            if skip:
                # Preempted before its admission was written (the admission, chained before this,
                # saw the Job was no longer admitted and wrote nothing): the API holds no
                # reservation for it and its Job was never unsuspended, so there is nothing to undo.
                self._evicted(st)
                return
            message = await make_message()
            marked = await self.workloads.mark_evicted(st, reason, message, preempted_reason, status_fields)
            if marked is not None:
                self.events.event(st, "Stopped" if preempted_reason is None else "Preempted",
                                  event_message or message)
                uid = self.workloads.uid(st)
                self.events.on_workload(st, uid, f"EvictedDueTo{reason}", message)
                if preempted_reason is not None:
                    self.events.on_workload(st, uid, "Preempted", message)
                if cluster_queue is not None:
                    counted, cause = d.counted_eviction(reason, underlying_cause)
                    self.metrics.evicted_workload(cluster_queue, st.namespace, local_queue, counted, cause,
                                                  preempting_cluster_queue, preempted_reason)
            await self._complete_eviction(st, reason, message, rid)

        self.writes.chain(st.key, write, release=rid)

    def _note_evicting(self, st: JobState, admission: Admission | None = None) -> None:
        if admission is not None:
            self.evicting[st.key] = admission
            return
        adm = ((self.workloads.get(st) or {}).get("status") or {}).get("admission")
        if adm:
            try:
                self.evicting[st.key] = W.admission_from_status(adm)
            except (KeyError, ValueError):
                pass

    def resume_eviction(self, st: JobState, cluster_queue: str | None = None) -> None:
        st.phase = "evicting"
        self._note_evicting(st)
        rid = self.writes.release(cluster_queue)
        wl = self.workloads.get(st)
        c = W.condition(wl, "Evicted") or {}

        async def write():
            await self._complete_eviction(st, c.get("reason", "Preempted"), c.get("message", ""), rid)

        self.writes.chain(st.key, write, release=rid)

    async def _complete_eviction(self, st: JobState, reason: str, message: str, rid: int | None = None) -> None:
        """Suspend the Job, wait until its pods are gone, clear the reservation - the release
        `rid`, marked done right there, so the preemptor waiting on it is written one round trip
        sooner - then restore the Job's own pod template (before any re-admission of this Job:
        that write waits in the same chain)."""
        await self.jobs.suspend(st)
        await self.jobs.wait_stopped(st, fenced=lambda: self.workloads.refuses_pods(st))
        # held out of its queue: deactivated (also by Kueue itself: DeactivatedDueTo...), or backing off
        queued = not reason.startswith(d.DEACTIVATED) and reason != d.PODS_READY_TIMEOUT
        await self.workloads.update(st, lambda wl: W.requeued(wl, reason, message, queued))
        if rid is not None:
            self.writes.released(rid)
        self._evicted(st)
        await self.jobs.restore(st)

    def _evicted(self, st: JobState) -> None:
        """The victim's reservation is gone from the API."""
        st.maybe_reserved = False
        self.evicting.pop(st.key, None)
        self.status_changed()
        if st.phase == "evicting":
            st.phase = "pending"
            self.on_evicted(st)

    # -- finished and deleted -----------------------------------------------------------------------------------
    def finish_workload(self, st: JobState, done: Finished, cluster_queue: str | None = None) -> None:
        """Finished=True, reason Succeeded or Failed, with the owner's own word on how it ended (its
        terminal condition's message), and the owner's `FinishedWorkload` Event, as Kueue's job
        reconciler writes them. `cluster_queue`: where the engine had it admitted (None: not admitted
        there, or unknown - the API may still show a reservation, so every admission waits for this
        write)."""
        rid = self.writes.release(cluster_queue)

        def change(wl: dict) -> dict | None:
            if W.is_true(wl, "Finished"):
                return None
            status = wl.setdefault("status", {})
            status["conditions"] = W.set_condition(status.get("conditions") or [], "Finished", "True",
                                                   "Succeeded" if done.succeeded else "Failed", done.message,
                                                   W.now_rfc3339(), wl["metadata"].get("generation"))
            return wl

        async def write():
            if await self.workloads.update(st, change) is not None:
                self.events.event(st, "FinishedWorkload", f"Workload '{st.namespace}/{st.wl_name}' is declared finished")

        self.writes.chain(st.key, write, release=rid)

    def delete_workload(self, st: JobState) -> None:
        """The Job is gone: the API's garbage collector removes the Workload too, but not at once;
        delete it here so its reservation leaves the record before anything uses the room."""
        rid = self.writes.release()

        async def write():
            await self.kube.delete(K.WORKLOADS, st.namespace, st.wl_name)

        self.writes.chain(st.key, write, release=rid)

    def delete_extra(self, st: JobState, wl: dict) -> None:
        """A second Workload of a tracked Job (not the one gpuqueue made for it) showing a
        reservation: deleted, as Kueue deletes the Workloads of a Job beyond the one that matches
        it. Its reservation was never the engine's, so it is no release."""
        meta = wl["metadata"]

        async def write():
            if await self.kube.delete(K.WORKLOADS, meta["namespace"], meta["name"], uid=meta.get("uid")) is not None:
                self.events.event(st, "DeletedWorkload",
                                  f"Deleted not matching Workload: {meta['namespace']}/{meta['name']}")

        self.writes.chain(st.key, write)




class _PendingMessage:
    """The pending message a Workload is to be told (the latest), and when it is due."""

    __slots__ = ("st", "message", "reason", "due")

    def __init__(self, st: JobState, message: str, reason: str, due: float) -> None:
        self.st, self.message, self.reason, self.due = st, message, reason, due


def _creation_tag(key: str) -> str:
    return "create-workload:" + key


def _pending_tag(key: str) -> str:
    return "pending-message:" + key
