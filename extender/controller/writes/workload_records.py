"""Workloads kept true to their Job and to the engine: spec.active followed (Kueue's stop and resume),
a pending Workload's spec updated when its Job changes, a reservation the engine did not make
set back, a second Workload for a tracked Job deleted. A part of WorkloadWrites (a mixin over its
writers), kept apart for its size."""

from __future__ import annotations

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.podsready import pods_ready
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.core.job_state import JobState
from gpuqueue.extender.controller.client.kubeapi import is_status
from gpuqueue.extender.controller.writes.records import read_modify_write
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.model import Admission


# what reservation_of answers while a write of ours that changes the reservation is under way
UNSETTLED = object()


class WorkloadRecordKeeping:
    # -- deactivated and reactivated (spec.active) ------------------------------------------------------------
    def deactivate(self, st: JobState, evicted: d.Evicted | None) -> None:
        """Kueue's deactivation carried out: an admitted Job is evicted (`evicted`, the engine's
        decision: its Job suspended, its reservation cleared once its pods are gone, Requeued false);
        a pending one is told it is held out of its queue: Evicted (unless it already shows an
        eviction, as Kueue) and Requeued false, reason Deactivated. A deactivation Kueue's rules
        made (waitForPodsReady's limit) says so: DeactivatedDueTo<cause>."""
        if evicted is not None:
            self.apply(pods_ready.told_with_cause(self.workloads.get(st), evicted))
            return

        def change(wl: dict) -> dict | None:
            out = W.with_requeued(wl, False, d.DEACTIVATED, d.DEACTIVATED_MESSAGE)
            if W.is_true(wl, "Evicted"):
                return out
            out = out if out is not None else wl
            status = out.setdefault("status", {})
            status["conditions"] = W.set_condition(status.get("conditions") or [], "Evicted", "True", d.DEACTIVATED,
                                                   d.DEACTIVATED_MESSAGE, W.now_rfc3339(),
                                                   out["metadata"].get("generation"))
            return out

        async def write():
            await self.workloads.update(st, change)

        self.writes.chain(st.key, write)

    def reactivate(self, st: JobState) -> None:
        """spec.active is true again: the Workload says it is queued again (Requeued true)."""
        def change(wl: dict) -> dict | None:
            c = W.condition(wl, "Requeued")
            if c is None or c.get("status") != "False" or c.get("reason") != d.DEACTIVATED:
                return None
            return W.with_requeued(wl, True, d.REACTIVATED, d.REACTIVATED_MESSAGE)

        async def write():
            await self.workloads.update(st, change)

        self.writes.chain(st.key, write)

    # -- the record kept true --------------------------------------------------------------------------------------
    def update_spec(self, st: JobState) -> None:
        """A pending Workload's spec made to match its Job again (Kueue's updateWorkloadToMatchJob):
        its pod sets, and the LocalQueue the Job is in now. Never the spec of a Workload showing a
        reservation: an admitted Job that changed is evicted first (this write follows in its
        chain)."""
        async def write():
            job = self.jobs.job(st)
            if job is None or job["metadata"].get("uid") != st.uid or self.sched.jobs.get(st.key) is not st:
                return
            pod_sets = st.kind.workload_pod_sets(job)

            def change(wl: dict) -> dict | None:
                if W.shows_reservation(wl) or not W.pod_sets_differ(wl, pod_sets, st.queue_name):
                    return None
                wl["spec"] = {**(wl.get("spec") or {}), "podSets": pod_sets, "queueName": st.queue_name}
                return wl

            await self._write_spec(st, change, f"Updated not matching Workload for suspended job: "
                                               f"{st.namespace}/{st.wl_name}")

        self.writes.chain(st.key, write)

    async def _write_spec(self, st: JobState, change, event_message: str) -> None:
        """A spec change of the Job's Workload (a live read where the cache is stale), then the
        Job's `UpdatedWorkload` Event if it was written; a Workload gone meanwhile is left."""
        try:
            updated = await read_modify_write(self.kube, K.WORKLOADS, st.namespace, st.wl_name,
                                              self.workloads.get(st), change, protect=W.status_copy)
        except Exception as exc:
            if is_status(exc, 404):
                return
            raise
        if updated is not None:
            self.events.event(st, "UpdatedWorkload", event_message)

    def update_priority(self, st: JobState, class_name: str, value: int) -> None:
        """The Workload takes the WorkloadPriorityClass its Job's label names now, and its value
        (Kueue's UpdateWorkloadPriority), with the Job's `UpdatedWorkload` Event. Not a Workload
        whose priority comes from its pods' PriorityClass; no class added to one holding a
        reservation (its CRD refuses that)."""
        async def write():
            def change(wl: dict) -> dict | None:
                spec = wl.get("spec") or {}
                ref = spec.get("priorityClassRef")
                if ref is not None and ref.get("kind") != W.WORKLOAD_PRIORITY_CLASS:
                    return None
                if ref is None and W.shows_reservation(wl):
                    return None
                if ref is not None and ref.get("name") == class_name and spec.get("priority") == value:
                    return None
                wl["spec"] = {**spec, "priority": value, "priorityClassRef": W.workload_priority_class_ref(class_name)}
                return wl

            await self._write_spec(st, change, f"Updated workload priority class: {st.namespace}/{st.wl_name}")

        self.writes.chain(st.key, write)

    def add_owners(self, st: JobState) -> None:
        """The pods a pod group counts now that do not own its Workload yet (joined after it was
        made) are added to its ownerReferences, as Kueue does: the extender finds a pod's
        Workload through them."""
        async def write():
            job = self.jobs.job(st)
            if job is None or job["metadata"].get("uid") != st.uid or self.sched.jobs.get(st.key) is not st:
                return
            refs = st.kind.owner_references(job)
            added = []

            def change(wl: dict) -> dict | None:
                have = {r.get("uid") for r in wl["metadata"].get("ownerReferences") or ()}
                added[:] = [r for r in refs if r["uid"] not in have]
                if not added:
                    return None
                wl["metadata"] = {**wl["metadata"],
                                  "ownerReferences": [*(wl["metadata"].get("ownerReferences") or ()), *added]}
                return wl

            try:
                updated = await read_modify_write(self.kube, K.WORKLOADS, st.namespace, st.wl_name,
                                                  self.workloads.get(st), change)
            except Exception as exc:
                if is_status(exc, 404):
                    return
                raise
            if updated is not None:
                self.events.event(st, "OwnerReferencesAdded", f"Added {len(added)} owner reference(s)")

        self.writes.chain(st.key, write)

    def reservation_of(self, st: JobState) -> Admission | None | object:
        """The reservation the API should show for the Job: the engine's admission (an evicted
        Job's until its pods are gone), None, or UNSETTLED while a write of ours that changes it
        may be under way."""
        if self.sched.jobs.get(st.key) is not st:
            return UNSETTLED
        engine = self.sched.engine
        if st.phase == "admitted":
            w = engine.state.admitted.get(st.key) if engine is not None else None
            return w.admission if w is not None and st.maybe_reserved else UNSETTLED
        if st.phase == "evicting":
            return self.evicting.get(st.key, UNSETTLED) if st.maybe_reserved else None
        if st.phase in ("pending", "blocked"):
            return UNSETTLED if st.maybe_reserved else None
        return UNSETTLED  # finished, departed

    def record_is_true(self, st: JobState, wl: dict) -> bool:
        if W.is_true(wl, "Finished") and st.phase not in ("finished", "departed"):
            return False  # a Finished Workload counts for nothing: only its Job's end says so
        expected = self.reservation_of(st)
        if expected is UNSETTLED:
            return True
        if expected is None:
            return not W.shows_reservation(wl)
        return W.with_admission(W.status_copy(wl), expected) is None

    def set_back(self, st: JobState) -> None:
        """The controller is the authority on reservations: a Workload showing one the engine did
        not make (a tenant wrote `status.admission` or QuotaReserved), a reservation edited or
        cleared, or Finished while its Job runs on (a record that counts nothing), is set back to
        what the engine holds - judged when the write's turn comes, on the record as it is then."""
        async def write():
            expected = self.reservation_of(st)
            if expected is UNSETTLED and st.phase in ("finished", "departed"):
                return

            def change(wl: dict) -> dict | None:
                unfinished = W.without_condition(wl, "Finished") if st.phase != "finished" else None
                wl = unfinished or wl
                if expected is UNSETTLED:
                    return unfinished
                if expected is None:
                    if not W.shows_reservation(wl):
                        return unfinished
                    pending = self.sched.engine.pending.get(st.key) if self.sched.engine is not None else None
                    message = (pending.message if pending is not None and pending.message else d.PENDING_EVALUATION)
                    reason = pending.reason if pending is not None and pending.message else "Pending"
                    return W.unreserved(wl, reason, message)
                return W.with_admission(wl, expected) or unfinished

            if await self.workloads.update(st, change) is not None:
                what = "pending" if expected is None else f"the reservation in ClusterQueue {expected.cluster_queue}"
                self.events.event(st, "WorkloadStatusReverted", f"The Workload's reservation was not gpuqueue's: "
                                  f"set back to {what}", "Warning")

        self.writes.chain(st.key, write)
