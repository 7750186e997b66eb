"""Carrying the engine's decisions out through the API, in an order that keeps the API's record
within quota at every instant:

- writes for one workload run one after another (a chain per key);
- a write that frees quota in the API's record (Finished, a deleted Workload, an eviction that
  has seen its pods gone) is a *release*; an admission waits for every release that was under
  way when it was decided, so it never lands in the record before the room it uses is freed;
- a victim's quota counts until its pods are gone: only then is its reservation cleared.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Awaitable, Callable

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller.kubeapi import CALL_CLASS, CALL_TAG, INFORM, URGENT, is_status
from gpuqueue.extender.controller.status import cluster_queue_status, local_queue_status, queue_counts, same_status
from gpuqueue.extender.kube import retry_on_conflict
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.model import Admission

if TYPE_CHECKING:
    from gpuqueue.extender.controller.controller import Controller
    from gpuqueue.extender.controller.job_state import JobState

log = logging.getLogger("gpuqueue.controller")


class Actions:
    def __init__(self, ctl: "Controller") -> None:
        self.ctl = ctl
        self.kube = ctl.kube
        self.writes = ctl.writes
        self.event = ctl.events.event
        self._created: dict[str, asyncio.Future] = {}
        self.evicting: dict[str, Admission] = {}  # victims whose reservation still stands in the API
        self._pending_latest: dict[str, object] = {}  # key -> the newest pending write queued for it
        self._waiters: dict[str, asyncio.Event] = {}
        self.status_dirty = True
        self.refused: list[str] = []  # keys whose new pod template the API refused (for tests/logs)

    def poke(self, uid: str) -> None:
        ev = self._waiters.get(uid)
        if ev is not None:
            ev.set()

    async def _wait_until(self, uid: str, predicate: Callable[[], bool]) -> None:
        ev = self._waiters.setdefault(uid, asyncio.Event())
        try:
            while not predicate():
                ev.clear()
                try:
                    await asyncio.wait_for(ev.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._waiters.pop(uid, None)

    def forget_writes(self) -> None:
        """The writes were cancelled (Writes.cancel_all)."""
        self._created.clear()
        self.evicting.clear()
        self._pending_latest.clear()

    # -- reads and read-modify-writes -----------------------------------------------------------------------
    def job(self, st: "JobState") -> dict | None:
        return self.ctl.informers["jobs"].get(st.key)

    def workload(self, st: "JobState") -> dict | None:
        """The cached Workload; until the watch brings it, the one our create returned."""
        cached = self.ctl.informers["workloads"].get(f"{st.namespace}/{st.wl_name}")
        if cached is None and st.wl_created is not None:
            return st.wl_created
        return cached

    async def _update(self, kind: K.Kind, namespace: str | None, name: str, cached: dict | None,
                      change: Callable[[dict], dict | None], subresource: str | None = None,
                      protect: Callable[[dict], dict] = W.json_copy) -> dict | None:
        """Read-modify-write of one object, retried on conflict. The cached object saves the first
        read: if it is stale, the write it leads to fails with 409 and is made again from a live
        read. But a cache behind the API can also make a needed write look needless (a watch
        stalled or cut, our own last write not seen yet): "nothing to write" is trusted only when
        judged on a live read.

        `change` gets the cached object through `protect` - a copy deep enough that what change
        edits is not the cache's (W.status_copy for changes that only set status fields, identity
        for changes that build a new object) - and a live read as it is (nobody else holds it)."""
        first = None
        if cached is not None:
            body = change(protect(cached))
            if body is not None:
                first = _Computed(body)

        async def read():
            nonlocal first
            if first is not None:
                computed, first = first, None
                return computed
            return await self.kube.get(kind, namespace, name)

        async def send(body):
            return await self.kube.replace(kind, body, subresource)

        def guarded(obj):
            if isinstance(obj, _Computed):
                return obj.body
            return change(obj)

        return await retry_on_conflict(read, guarded, send, attempts=8)

    async def _update_workload(self, st: "JobState", change: Callable[[dict], dict | None]) -> dict | None:
        """`change` edits only `status` fields (it sets them, and replaces lists rather than
        editing them in place)."""
        try:
            return await self._update(K.WORKLOADS, st.namespace, st.wl_name, self.workload(st), change, "status",
                                      protect=W.status_copy)
        except Exception as exc:
            if is_status(exc, 404):
                return None  # the Job (and with it the Workload) is gone
            raise

    async def _update_job(self, st: "JobState", change: Callable[[dict], dict | None]) -> dict | None:
        """`change` returns a new object (W.admitted_job, W.suspended_job, W.restored_job copy)
        and leaves the one it is given as it was."""
        def checked(job: dict) -> dict | None:
            if job["metadata"].get("uid") != st.uid:
                return None
            return change(job)

        try:
            return await self._update(K.JOBS, st.namespace, st.name, self.job(st), checked, protect=_as_is)
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise

    # -- decisions ----------------------------------------------------------------------------------------------
    def apply(self, dec: d.Decision) -> None:
        st = self.ctl.jobs.get(dec.key)
        if st is None:
            return
        if isinstance(dec, d.Admitted):
            self.admit(st, dec.admission)
        elif isinstance(dec, d.Preempted):
            self.ctl.metrics.preemptions.labels(dec.preemptor_cluster_queue, dec.reason).inc()
            preemptor = self.ctl.jobs.get(dec.preemptor)
            paths = (self._path(dec.preemptor_cluster_queue), self._path(dec.cluster_queue))

            async def message() -> str:
                # the preemptor's Workload may still be on its way to the API: its UID goes in the message
                created = self._created.get(dec.preemptor)
                if created is not None:
                    await asyncio.gather(asyncio.shield(created), return_exceptions=True)
                return W.preemption_message(self._workload_uid(preemptor), preemptor.uid if preemptor else "",
                                            dec.reason, *paths)

            self.evict(st, "Preempted", message, dec.reason, dec.cluster_queue)
        elif isinstance(dec, d.Evicted):
            async def fixed(text=dec.message) -> str:
                return text

            self.evict(st, dec.reason, fixed, None, dec.cluster_queue)
        elif isinstance(dec, d.Pending):
            self.pending(st, dec.cluster_queue, dec.message, dec.reason)

    def _workload_uid(self, st: "JobState | None") -> str:
        if st is None:
            return ""
        wl = self.workload(st)
        return st.wl_uid or (wl or {}).get("metadata", {}).get("uid", "")

    def _chain_of(self, cq: str) -> list[str] | None:
        """The ClusterQueue and its cohorts up to the root; None without an engine or on a cycle."""
        engine = self.ctl.engine
        if engine is None:
            return None
        parts = [cq]
        spec = engine.state.cq_specs.get(cq)
        cohort = spec.cohort if spec else None
        seen: set[str] = set()
        while cohort:
            if cohort in seen:
                return None
            seen.add(cohort)
            parts.append(cohort)
            cspec = engine.state.cohort_specs.get(cohort)
            cohort = cspec.parent if cspec else None
        return parts

    def _path(self, cq: str) -> str:
        """Kueue's `/cohort/.../clusterqueue` path of a ClusterQueue in the cohort tree."""
        parts = self._chain_of(cq)
        return "/" + "/".join(reversed(parts)) if parts else ""

    def tree(self, cq: str | None) -> str | None:
        """The cohort tree a ClusterQueue's quota lives in (the scope of its releases and
        admissions, see releases.py); None when it cannot be told."""
        parts = self._chain_of(cq) if cq else None
        if not parts:
            return None
        return f"cohort/{parts[-1]}" if len(parts) > 1 else f"clusterqueue/{cq}"

    # -- Workload lifecycle -------------------------------------------------------------------------------
    def ensure_workload(self, st: "JobState") -> None:
        async def create():
            CALL_TAG.set(_creation_tag(st.key))  # admit() may move it up (this task's context only)
            if st.phase == "admitted":
                CALL_CLASS.set(URGENT)
            if self.workload(st) is not None:
                return
            job = self.job(st)
            if job is None:
                return
            pc = W.priority_class_of(job, self.ctl.priorities.workload_classes, self.ctl.priorities.pod_classes)
            priority = st.priority if st.priority is not None else self.ctl.priority_of(job)
            body = W.build_workload(job, priority, pc)
            try:
                created = await self.kube.create(K.WORKLOADS, st.namespace, body)
            except Exception as exc:
                if is_status(exc, 409):
                    return  # already there (a previous term created it)
                if is_status(exc, 404):
                    return  # namespace gone
                raise
            st.wl_uid = created["metadata"].get("uid", "")
            st.wl_created = created
            self.event(st, "CreatedWorkload", f"Created Workload: {st.namespace}/{st.wl_name}")

        task = self.writes.chain(st.key, create)
        self._created[st.key] = task
        task.add_done_callback(lambda t, k=st.key: self._created.pop(k, None) if self._created.get(k) is t else None)

    def pending(self, st: "JobState", cq: str | None, message: str, reason: str) -> None:
        def change(wl: dict) -> dict | None:
            if (wl.get("status") or {}).get("admission"):
                return None  # admitted meanwhile; a later decision says otherwise if it is not
            c = W.condition(wl, "QuotaReserved")
            if c is not None and c.get("status") == "False" and c.get("message") == message and c.get(
                    "reason") == reason:
                return None
            status = wl.setdefault("status", {})
            status["conditions"] = W.set_condition(status.get("conditions") or [], "QuotaReserved", "False", reason,
                                                   message, W.now_rfc3339(), wl["metadata"].get("generation"))
            return wl

        first = W.condition(self.workload(st), "QuotaReserved") is None
        token = self._pending_latest[st.key] = object()

        async def write():
            # Written only if it is still the last word when its turn in the chain comes: with a
            # deep write queue a workload is often admitted, or given a newer message, meanwhile
            # (a workload admitted at its first look never shows QuotaReserved=False, as in Kueue).
            if self._pending_latest.get(st.key) is not token:
                return
            del self._pending_latest[st.key]
            if st.phase != "pending":
                return
            CALL_TAG.set(_pending_tag(st.key))  # admit() withdraws it while it waits for a connection
            try:
                result = await self._update_workload(st, change)
            except asyncio.CancelledError:
                if self.ctl.leader and st.phase != "pending" and not asyncio.current_task().cancelling():
                    return  # withdrawn: the workload was admitted meanwhile (the chain goes on)
                raise
            if result is not None and first and st.phase == "pending":
                self.event(st, "Pending", message)

        self.writes.chain(st.key, write, call_class=INFORM)

    def admit(self, st: "JobState", admission: Admission) -> None:
        st.phase = "admitted"
        barrier = self.writes.barrier(admission.cluster_queue)
        if st.key in self._created:  # its Workload is still to be created: that call is now urgent too
            self.kube.promote(_creation_tag(st.key))
        self.kube.withdraw(_pending_tag(st.key))  # a pending message still waiting is moot
        engine = self.ctl.engine
        flavors = [engine.state.flavors[f] for f in sorted(set(admission.flavors_of(W.MAIN).values()))
                   if f in engine.state.flavors] if engine else []
        resumed = W.is_true(self.workload(st), "Requeued") or W.condition(self.workload(st), "Evicted") is not None

        async def write():
            if barrier is not None and not await self.writes.wait(barrier):
                return  # a release was abandoned: this replica is stopping, the next one decides
            if not self.ctl.leader or self.ctl.jobs.get(st.key) is not st or st.phase != "admitted":
                return
            st.maybe_reserved = True  # from the moment the write may land, whatever its outcome
            wrote = await self._update_workload(st, lambda wl: _reserve(wl, admission))
            if wrote is None and self.workload(st) is None:
                return
            await self._unsuspend(st, admission, flavors, resumed)

        self.writes.chain(st.key, write, call_class=URGENT)

    async def _unsuspend(self, st: "JobState", admission: Admission, flavors, resumed: bool,
                         only_suspended: bool = False) -> None:
        def change(job: dict) -> dict | None:
            if only_suspended and not job["spec"].get("suspend"):
                return None
            return _unsuspended(job, flavors)

        try:
            result = await self._update_job(st, change)
        except Exception as exc:
            if is_status(exc, 422):
                await self._refused(st, admission, exc)
                return
            raise
        if result is not None:
            created = st.created
            self.ctl.metrics.admission_wait.labels(admission.cluster_queue).observe(max(0.0, time.time() - created))
            self.event(st, "Resumed" if resumed else "Started",
                       f"Admitted by clusterQueue {admission.cluster_queue}")

    async def _refused(self, st: "JobState", admission: Admission, exc: Exception) -> None:
        """Kubernetes 1.24 lets a Job's pod template scheduling fields change only while it is
        suspended and has never started. Give the quota back, say why, and queue the Job again:
        its current template (still carrying the flavor it ran on) limits where it can go."""
        body = getattr(exc, "body", "") or ""
        log.warning("the API refused the pod template of %s for flavor(s) %s: %s", st.key,
                    admission.flavors_of(W.MAIN), body[:300])
        self.refused.append(st.key)
        engine = self.ctl.engine
        rid = self.writes.release(admission.cluster_queue)
        if engine is not None:
            engine.finish(st.key)
        st.phase = "blocked"
        st.refusals += 1
        flavors = ", ".join(sorted(set(admission.flavors_of(W.MAIN).values())))
        message = (f"couldn't admit to flavor {flavors}: the API refused the change of the Job's pod template "
                   f"(its nodeSelector and tolerations may change only while it is suspended and has never "
                   f"started, Kubernetes 1.24); waiting for quota in a flavor its template already matches")

        async def give_back():
            await self._update_workload(st, lambda wl: _unreserve(wl, "Pending", message))
            self.event(st, "AdmissionRefused", message, "Warning")

        self.writes.chain(st.key, give_back, release=rid)
        delay = min(60.0, self.ctl.options.resubmit_backoff * (2 ** (st.refusals - 1)))
        asyncio.get_running_loop().call_later(delay, self.ctl.resubmit, st)
        self.ctl.mark_dirty()

    def ensure_running(self, st: "JobState", admission: Admission) -> None:
        """The Job of an admitted Workload must run: after a restart (the last leader may have
        died between the two writes), or when someone suspended it by hand."""
        engine = self.ctl.engine
        flavors = [engine.state.flavors[f] for f in sorted(set(admission.flavors_of(W.MAIN).values()))
                   if f in engine.state.flavors] if engine else []

        async def write():
            # The decision may not be written yet (its write waits for releases, and may be
            # abandoned): a Job is never started without its reservation in the API's record.
            wl = self.workload(st)
            if not self.ctl.leader or st.phase != "admitted" or not (wl and W.is_true(wl, "QuotaReserved")):
                return
            await self._unsuspend(st, admission, flavors, resumed=False, only_suspended=True)

        self.writes.chain(st.key, write)

    def suspend_unadmitted(self, st: "JobState") -> None:
        """A managed Job running without a reservation (created unsuspended with no webhook in
        front, or its Workload deleted): suspend it; its pods count until they are gone."""
        rid = self.writes.release()

        async def write():
            if st.phase in ("pending", "blocked"):
                changed = await self._update_job(
                    st, lambda job: None if job["spec"].get("suspend") else W.suspended_job(job))
                if changed is not None:
                    await self._wait_stopped(st)

        self.writes.chain(st.key, write, release=rid)

    def evict(self, st: "JobState", reason: str, make_message: Callable[[], Awaitable[str]],
              preempted_reason: str | None, cluster_queue: str | None = None) -> None:
        st.phase = "evicting"
        self._note_evicting(st)
        rid = self.writes.release(cluster_queue)
        message = ""

        def mark(wl: dict) -> dict | None:
            status = wl.setdefault("status", {})
            if not status.get("admission"):
                return None
            now, gen = W.now_rfc3339(), wl["metadata"].get("generation")
            conds = W.set_condition(status.get("conditions") or [], "Evicted", "True", reason, message, now, gen)
            if preempted_reason is not None:
                conds = W.set_condition(conds, "Preempted", "True", preempted_reason, message, now, gen)
            if W.is_true(wl, "Evicted") and conds == status.get("conditions"):
                return None
            status["conditions"] = conds
            return wl

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
            marked = await self._update_workload(st, mark)
            if marked is not None:
                self.event(st, "Stopped" if preempted_reason is None else "Preempted", message)
            await self._complete_eviction(st, reason, message, rid)

        self.writes.chain(st.key, write, release=rid)

    def _note_evicting(self, st: "JobState") -> None:
        adm = ((self.workload(st) or {}).get("status") or {}).get("admission")
        if adm:
            try:
                self.evicting[st.key] = W.admission_from_status(adm)
            except (KeyError, ValueError):
                pass

    def resume_eviction(self, st: "JobState", cluster_queue: str | None = None) -> None:
        st.phase = "evicting"
        self._note_evicting(st)
        rid = self.writes.release(cluster_queue)
        wl = self.workload(st)
        c = W.condition(wl, "Evicted") or {}

        async def write():
            await self._complete_eviction(st, c.get("reason", "Preempted"), c.get("message", ""), rid)

        self.writes.chain(st.key, write, release=rid)

    async def _complete_eviction(self, st: "JobState", reason: str, message: str, rid: int | None = None) -> None:
        """Suspend the Job, wait until its pods are gone, clear the reservation - the release
        `rid`, marked done right there, so the preemptor waiting on it is written one round trip
        sooner - then restore the Job's own pod template (before any re-admission of this Job:
        that write waits in the same chain)."""
        await self._update_job(st, lambda job: None if job["spec"].get("suspend") else W.suspended_job(job))
        await self._wait_stopped(st)
        await self._update_workload(st, lambda wl: _requeued(wl, reason, message))
        if rid is not None:
            self.writes.released(rid)
        self._evicted(st)
        try:
            await self._update_job(st, _restored)
        except Exception as exc:
            if not is_status(exc, 422):
                raise
            # 1.24 keeps startTime on suspend, so the template stays as admitted: the Job can only
            # come back on the same flavor (its nodeSelector says so to the engine).
            log.info("%s keeps its admitted pod template (the API refused the restore)", st.key)

    def _evicted(self, st: "JobState") -> None:
        """The victim's reservation is gone from the API."""
        st.maybe_reserved = False
        self.evicting.pop(st.key, None)
        self.status_dirty = True
        if st.phase == "evicting":
            st.phase = "pending"

    async def _wait_stopped(self, st: "JobState") -> None:
        """Until the Job is suspended and its pods are gone - confirmed by a live list, not only
        the pod cache: 1.24's job controller sets `status.active` to 0 as soon as it marks the
        pods for deletion, and a pod watch that lags may never have shown them to us; clearing
        the reservation then would hand out GPUs that terminating pods still hold."""
        pause = 0.05
        while True:
            await self._wait_until(st.uid, lambda: self._stopped(st))
            if self.ctl.jobs.get(st.key) is not st or not await self._live_pods(st):
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _live_pods(self, st: "JobState") -> int:
        listed = await self.kube.request("GET", K.PODS.path(st.namespace))
        return sum(1 for pod in listed.get("items") or ()
                   if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                   and any(ref.get("uid") == st.uid for ref in pod["metadata"].get("ownerReferences") or ()))

    def _stopped(self, st: "JobState") -> bool:
        if self.ctl.jobs.get(st.key) is not st:
            return True
        job = self.job(st)
        if job is None:
            return True
        return bool(job["spec"].get("suspend")) and not (job.get("status") or {}).get("active") and \
            self.ctl.pods_gone(st.uid)

    def finish_workload(self, st: "JobState", how: str, cluster_queue: str | None = None) -> None:
        """`cluster_queue`: where the engine had it admitted (None: not admitted there, or unknown -
        the API may still show a reservation, so every admission waits for this write)."""
        rid = self.writes.release(cluster_queue)

        def change(wl: dict) -> dict | None:
            if W.is_true(wl, "Finished"):
                return None
            status = wl.setdefault("status", {})
            reason, message = ("Succeeded", "Job finished successfully") if how == "Complete" else (
                "Failed", "Job failed")
            status["conditions"] = W.set_condition(status.get("conditions") or [], "Finished", "True", reason,
                                                   message, W.now_rfc3339(), wl["metadata"].get("generation"))
            return wl

        async def write():
            await self._update_workload(st, change)

        self.writes.chain(st.key, write, release=rid)

    def delete_workload(self, st: "JobState") -> None:
        """The Job is gone: the API's garbage collector removes the Workload too, but not at once;
        delete it here so its reservation leaves the record before anything uses the room."""
        rid = self.writes.release()

        async def write():
            await self.kube.delete(K.WORKLOADS, st.namespace, st.wl_name)

        self.writes.chain(st.key, write, release=rid)

    # -- ClusterQueue and LocalQueue status ---------------------------------------------------------------
    async def status_loop(self) -> None:
        CALL_CLASS.set(INFORM)
        while True:
            await asyncio.sleep(self.ctl.options.status_interval)
            if not self.ctl.leader or not self.ctl.recovered or self.ctl.engine is None or not self.status_dirty:
                continue
            self.status_dirty = False
            try:
                await self.write_queue_status()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                log.exception("queue status update failed")
                self.status_dirty = True

    async def write_queue_status(self) -> None:
        engine = self.ctl.engine
        assert engine is not None
        counts = queue_counts(engine, self.evicting)
        self.ctl.metrics.update(engine, counts)
        writes = []
        for cq in self.ctl.informers["clusterqueues"].list():
            name = cq["metadata"]["name"]
            status = cluster_queue_status(engine, name, counts.cq.get(name), cq.get("status") or {},
                                          cq["metadata"].get("generation"))
            if not same_status(cq.get("status") or {}, status):
                writes.append(self._write_status(K.CLUSTER_QUEUES, cq, status))
        for lq in self.ctl.informers["localqueues"].list():
            meta = lq["metadata"]
            key = f"{meta.get('namespace')}/{meta['name']}"
            status = local_queue_status(engine, lq, counts.lq.get(key), lq.get("status") or {})
            if not same_status(lq.get("status") or {}, status):
                writes.append(self._write_status(K.LOCAL_QUEUES, lq, status))
        await asyncio.gather(*writes)

    async def _write_status(self, kind: K.Kind, obj: dict, status: dict) -> None:
        def change(fresh: dict) -> dict | None:
            if same_status(fresh.get("status") or {}, status):
                return None
            fresh["status"] = status
            return fresh

        meta = obj["metadata"]
        try:
            await self._update(kind, meta.get("namespace"), meta["name"], obj, change, "status", protect=W.status_copy)
        except Exception as exc:  # noqa: BLE001
            if not is_status(exc, 404):
                raise


def _creation_tag(key: str) -> str:
    return "create-workload:" + key


def _pending_tag(key: str) -> str:
    return "pending-message:" + key


def _as_is(obj: dict) -> dict:
    return obj


class _Computed:
    """A change already worked out from the cached object (see Actions._update)."""

    __slots__ = ("body",)

    def __init__(self, body: dict) -> None:
        self.body = body


# -- pure status edits --------------------------------------------------------------------------------------

def _reserve(wl: dict, admission: Admission) -> dict | None:
    status = wl.setdefault("status", {})
    new_admission = W.admission_to_status(admission)
    if status.get("admission") == new_admission and W.is_true(wl, "QuotaReserved") and W.is_true(wl, "Admitted") \
            and not W.is_true(wl, "Evicted") and not W.is_true(wl, "Preempted"):
        return None  # an eviction left half-done (marked, reservation kept) is still written over
    now, gen = W.now_rfc3339(), wl["metadata"].get("generation")
    status["admission"] = new_admission
    conds = status.get("conditions") or []
    conds = W.set_condition(conds, "QuotaReserved", "True", "QuotaReserved",
                            W.reserved_message(admission.cluster_queue), now, gen)
    conds = W.set_condition(conds, "Admitted", "True", "Admitted", "The workload is admitted", now, gen)
    for type_ in ("Evicted", "Preempted"):
        c = next((c for c in conds if c.get("type") == type_), None)
        if c is not None and c.get("status") == "True":
            conds = W.set_condition(conds, type_, "False", "QuotaReserved", f"Previously: {c.get('message', '')}",
                                    now, gen)
    status["conditions"] = conds
    return wl


def _unreserve(wl: dict, reason: str, message: str) -> dict | None:
    status = wl.setdefault("status", {})
    now, gen = W.now_rfc3339(), wl["metadata"].get("generation")
    status.pop("admission", None)
    conds = W.set_condition(status.get("conditions") or [], "QuotaReserved", "False", reason, message, now, gen)
    conds = W.set_condition(conds, "Admitted", "False", "NoReservation", "The workload has no reservation", now, gen)
    status["conditions"] = conds
    return wl


def _requeued(wl: dict, reason: str, message: str) -> dict | None:
    out = _unreserve(wl, "Pending", message)
    assert out is not None
    status = out["status"]
    status["conditions"] = W.set_condition(status["conditions"], "Requeued", "True", reason, message,
                                           W.now_rfc3339(), wl["metadata"].get("generation"))
    return out


def _unsuspended(job: dict, flavors) -> dict | None:
    new = W.admitted_job(job, flavors)
    return None if new == job else new


def _restored(job: dict) -> dict | None:
    if not job["spec"].get("suspend"):
        return None
    new = W.restored_job(job)
    return None if new == job else new
