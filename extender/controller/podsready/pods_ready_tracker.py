"""Kueue's waitForPodsReady carried out (the rules: pods_ready.py). Beside the controller, over its
caches, engine and writers:

- the Workload's PodsReady condition written as its pods become ready or are lost: a batch/v1 Job
  by its status (ready + succeeded >= its pod count, as Kueue's Job adapter), every other kind by
  its pods up their owner chain, ready or succeeded, against the admitted pod count;
- an admitted Workload timed out (its deadline read from its own conditions, so a new leader
  finds it again) is evicted with reason PodsReadyTimeout and requeueState (count, requeueAt)
  in the same write, held out of its queue until requeueAt, then queued again (Requeued=True,
  BackoffFinished); past backoffLimitCount it is deactivated instead;
- blockAdmission: no scheduling pass while an admitted Workload's pods are not all ready;
- Kueue's metrics for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.podsready import pods_ready as PR
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.core.job_state import JobState
from gpuqueue.extender.controller.client.kubeapi import is_status
from gpuqueue.extender.controller.podsready.pods_ready_metrics import PodsReadyMetrics
from gpuqueue.extender.controller.writes.records import read_modify_write
from gpuqueue.kube import object_key

log = logging.getLogger("gpuqueue.controller.podsready")


def _fmt(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class PodsReadyTracker:
    def __init__(self, ctl, cfg: PR.WaitForPodsReady | None, state_of: Callable[[dict], JobState | None],
                 state_of_workload: Callable[[dict], JobState | None],
                 submit: Callable[[JobState, dict, float | None], None]) -> None:
        """`ctl`: the Controller (its caches, engine, writers and Jobs; not imported: it imports
        this); `state_of` / `state_of_workload`: the tracked Job of an object of a queued kind / of
        a Workload; `submit(st, job, queued_at)`: give the engine the Job as it is."""
        self.ctl = ctl
        self.cfg = cfg
        self.state_of, self.state_of_workload, self.submit = state_of, state_of_workload, submit
        self.metrics = PodsReadyMetrics(ctl.metrics.registry, ctl.metrics.local_queue_metrics)
        self._timers: dict[str, asyncio.TimerHandle] = {}  # key -> the timeout or requeue timer
        self._pods: dict[str, dict[str, bool]] = {}  # owner uid -> pod key -> ready or succeeded
        self._keys: dict[str, str] = {}  # a tracked Job's uid -> its key (pods find their Job by it)
        self._writing: set[str] = set()  # keys whose PodsReady write is chained and not done
        self._released: set[str] = set()  # keys queued again whose BackoffFinished is not yet seen
        if cfg is None:
            return
        inf = ctl.informers
        inf["workloads"].add_handler(on_add=lambda wl: self._on_workload(None, wl), on_update=self._on_workload)
        inf["pods"].add_handler(on_add=self._on_pod, on_update=lambda old, new: self._on_pod(new),
                                on_delete=lambda pod: self._on_pod(pod, gone=True))
        for kind in {k.kind.name for k in ctl.kinds if k.kind.name in inf and k.kind is not K.PODS}:
            inf[kind].add_handler(on_update=lambda old, new: self._on_owner(new))

    @property
    def enabled(self) -> bool:
        return self.cfg is not None

    # -- events ------------------------------------------------------------------------------------------
    def _on_owner(self, obj: dict) -> None:
        st = self.state_of(obj) if self.ctl.recovered else None
        if st is not None:
            self.judge(st)

    def _on_pod(self, pod: dict, gone: bool = False) -> None:
        key = object_key(pod)
        phase = (pod.get("status") or {}).get("phase")
        counted = not gone and not (pod.get("metadata") or {}).get("deletionTimestamp") and phase != "Failed"
        ready = phase == "Succeeded" or any(c.get("type") == "Ready" and c.get("status") == "True"
                                            for c in (pod.get("status") or {}).get("conditions") or ())
        for uid in self.ctl.pod_owners.uids(pod):
            pods = self._pods.setdefault(uid, {})
            if counted:
                pods[key] = ready
            else:
                pods.pop(key, None)
                if not pods:
                    del self._pods[uid]
        if self.ctl.recovered:
            for uid in self.ctl.pod_owners.uids(pod):
                st = self.ctl.jobs.get(self._keys.get(uid, ""))
                if st is not None and st.uid == uid and st.kind.kind is not K.JOBS:  # a Job says it by its status
                    self.judge(st)

    def _on_workload(self, old: dict | None, wl: dict) -> None:
        if self.ctl.leader and old is not None and not W.is_true(old, "Evicted") and W.is_true(wl, "Evicted"):
            self._observe_eviction(wl)
        if not self.ctl.recovered:
            return
        st = self.state_of_workload(wl)
        if st is None or st.wl_name != wl["metadata"]["name"]:
            return
        self.judge(st)
        if self.cfg.block_admission:
            self.ctl.mark_dirty()  # a Workload that held admission may no longer

    def rebuilt(self) -> None:
        """A new term: every tracked Job judged from what its Workload says (timers set again; a
        Workload in its backoff held out of the queue the rebuild put it in)."""
        if self.cfg is None:
            return
        self.forget()
        for st in list(self.ctl.jobs.values()):
            wl = self.ctl.workload_writes.workloads.get(st)
            if st.phase == "evicting" and (W.condition(wl, "Evicted") or {}).get("reason") == PR.PODS_READY_TIMEOUT:
                self.ctl.engine.delete(st.key)  # queued again once its backoff is over, not when its pods are gone
            self.judge(st)

    # -- judging one Job ---------------------------------------------------------------------------------
    def judge(self, st: JobState) -> None:
        ctl = self.ctl
        if self.cfg is None or not ctl.leader or ctl.engine is None or ctl.jobs.get(st.key) is not st:
            return
        wl = ctl.workload_writes.workloads.get(st)
        if wl is None:
            return
        self._keys[st.uid] = st.key
        if st.key in self._released:
            if PR.requeue_at(wl, W.parse_time) is not None:
                return  # queued again; its BackoffFinished is on its way
            self._released.discard(st.key)
        if PR.deactivation_cause(wl) is not None or (not W.is_active(wl) and W.is_true(wl, "Evicted")):
            self._deactivate(st, wl)
            return
        if st.phase in ("pending", "blocked") and PR.requeue_at(wl, W.parse_time) is not None:
            self._hold(st, wl)
            return
        if self._condition_due(st, wl) is not None and st.key not in self._writing:
            self._write_condition(st)
        self._time(st, wl)

    def _ready(self, st: JobState, wl: dict) -> bool:
        job = self.ctl.job_steering.job(st)
        if job is None:
            return False
        if st.kind.kind is K.JOBS:
            spec, status = job.get("spec") or {}, job.get("status") or {}
            count = spec.get("parallelism", 1)
            if spec.get("completions") is not None:
                count = min(count, spec["completions"])
            return int(status.get("ready") or 0) + int(status.get("succeeded") or 0) >= count
        wanted = sum(int(a.get("count") or 0) for a in ((wl.get("status") or {}).get("admission") or {}).get(
            "podSetAssignments") or ())
        return sum(self._pods.get(st.uid, {}).values()) >= wanted

    def _condition_due(self, st: JobState, wl: dict) -> tuple[str, str, str] | None:
        """The PodsReady condition the Workload should show now, when it shows another: only once
        it was admitted (Kueue writes it on pending ones too, from their creation)."""
        if W.is_true(wl, "Admitted") and not W.is_true(wl, "Evicted") and st.phase == "admitted":
            want = PR.pods_ready_condition(wl, self._ready(st, wl))
        elif W.condition(wl, PR.PODS_READY) is not None:
            want = ("False", PR.WAIT_FOR_START, PR.NOT_READY_MESSAGE)
        else:
            return None
        return None if PR.shows(wl, want[0], want[1]) else want

    def _write_condition(self, st: JobState) -> None:
        ctl = self.ctl
        wrote: list[tuple[str, str, str]] = []

        def change(wl: dict) -> dict | None:
            want = self._condition_due(st, wl)
            if want is None:
                return None
            wrote[:] = [want]
            status = wl.setdefault("status", {})
            status["conditions"] = W.set_condition(status.get("conditions") or [], PR.PODS_READY, *want,
                                                   W.now_rfc3339(), wl["metadata"].get("generation"))
            return wl

        async def write():
            self._writing.discard(st.key)
            if ctl.jobs.get(st.key) is not st:
                return
            written = await ctl.workload_writes.workloads.update(st, change)
            if written is not None and wrote and wrote[0][0] == "True":
                self.metrics.ready(written, st.namespace)

        self._writing.add(st.key)
        ctl.writes.chain(st.key, write)

    # -- timing out ----------------------------------------------------------------------------------------
    def _time(self, st: JobState, wl: dict) -> None:
        due = PR.deadline(wl, self.cfg, W.parse_time) if st.phase == "admitted" else None
        self._set_timer(st, due[1] if due else None, lambda: self._timed_out(st))

    def _set_timer(self, st: JobState, when: float | None, fire) -> None:
        old = self._timers.pop(st.key, None)
        if old is not None:
            old.cancel()
        if when is not None:
            loop = asyncio.get_running_loop()
            self._timers[st.key] = loop.call_later(max(0.0, when - time.time()), fire)

    def _timed_out(self, st: JobState) -> None:
        ctl = self.ctl
        self._timers.pop(st.key, None)
        if not ctl.leader or ctl.engine is None or ctl.jobs.get(st.key) is not st or st.phase != "admitted":
            return
        wl = ctl.workload_writes.workloads.get(st)
        due = PR.deadline(wl, self.cfg, W.parse_time) if wl is not None else None
        if due is None:
            return
        if due[1] > time.time():
            self._time(st, wl)
            return
        if self._ready(st, wl):
            return  # ready by now (its PodsReady write is on its way): a running gang is never evicted
        if PR.exceeds_limit(wl, self.cfg):
            self._deactivation_target(st)
            return
        held = ctl.engine.state.admitted.get(st.key)
        if held is None:
            return
        now = time.time()
        message = PR.timeout_message(st.namespace, st.wl_name)
        state = PR.requeue_state(wl, self.cfg, now, _fmt)

        async def fixed() -> str:
            return message

        log.info("workload %s/%s: %s (requeue %d at %s)", st.namespace, st.wl_name, message, state["count"],
                 state["requeueAt"])
        ctl.engine.evict(st.key, now)
        ctl.workload_writes.evict(st, PR.PODS_READY_TIMEOUT, fixed, None, held.admission.cluster_queue,
                                  admission=held.admission, status_fields={"requeueState": state},
                                  underlying_cause=due[0])
        ctl.engine.delete(st.key)  # held out until requeueAt (_hold)
        ctl.mark_dirty()

    # -- backoff --------------------------------------------------------------------------------------------
    def _hold(self, st: JobState, wl: dict) -> None:
        """Evicted for its pods' readiness and cleared: out of its queue until requeueAt."""
        ctl = self.ctl
        if st.key in ctl.engine.pending:
            ctl.engine.delete(st.key)
        st.phase = "blocked"
        self._set_timer(st, PR.requeue_at(wl, W.parse_time), lambda: self._requeue(st))

    def _requeue(self, st: JobState) -> None:
        """The backoff is over: Requeued=True BackoffFinished (requeueAt dropped, count kept), and
        queued again at its eviction's time (or its creation's)."""
        ctl = self.ctl
        self._timers.pop(st.key, None)
        job = ctl.job_steering.job(st)
        if (ctl.engine is None or not ctl.leader or ctl.jobs.get(st.key) is not st or st.phase != "blocked"
                or job is None):
            return
        wl = ctl.workload_writes.workloads.get(st)

        def change(wl: dict) -> dict | None:
            if PR.requeue_at(wl, W.parse_time) is None:
                return None
            out = W.with_requeued(wl, True, PR.BACKOFF_FINISHED, PR.BACKOFF_FINISHED_MESSAGE) or wl
            out["status"]["requeueState"] = {k: v for k, v in out["status"]["requeueState"].items() if k != "requeueAt"}
            return out

        async def write():
            await ctl.workload_writes.workloads.update(st, change)

        ctl.writes.chain(st.key, write)
        self._released.add(st.key)
        self.submit(st, job, PR.queue_time(wl, self.cfg, st.created, W.parse_time))
        ctl.mark_dirty()

    # -- deactivation after backoffLimitCount --------------------------------------------------------------
    def _deactivation_target(self, st: JobState) -> None:
        def change(wl: dict) -> dict | None:
            if PR.deactivation_cause(wl) is not None:
                return None
            status = wl.setdefault("status", {})
            status["conditions"] = W.set_condition(status.get("conditions") or [], PR.DEACTIVATION_TARGET, "True",
                                                   PR.REQUEUING_LIMIT_EXCEEDED, PR.REQUEUING_LIMIT_MESSAGE,
                                                   W.now_rfc3339(), wl["metadata"].get("generation"))
            return wl

        async def write():
            await self.ctl.workload_writes.workloads.update(st, change)

        self.ctl.writes.chain(st.key, write)

    def _deactivate(self, st: JobState, wl: dict) -> None:
        """Kueue's workload controller: a DeactivationTarget turns spec.active false; once the
        eviction that follows is written, the target and requeueState go."""
        ctl = self.ctl
        if W.is_active(wl):
            async def write():
                def change(live: dict) -> dict | None:
                    if (live.get("spec") or {}).get("active") is False:
                        return None
                    live["spec"] = {**(live.get("spec") or {}), "active": False}
                    return live
                try:
                    await read_modify_write(ctl.kube, K.WORKLOADS, st.namespace, st.wl_name,
                                            ctl.workload_writes.workloads.get(st), change, protect=W.status_copy)
                except Exception as exc:
                    if not is_status(exc, 404):
                        raise
            ctl.writes.chain(st.key, write)
            return
        if PR.deactivation_cause(wl) is None and not (wl.get("status") or {}).get("requeueState"):
            return

        def tidy(live: dict) -> dict | None:
            if not W.is_true(live, "Evicted") or W.is_active(live):
                return None
            out = W.without_condition(live, PR.DEACTIVATION_TARGET) or live
            out["status"].pop("requeueState", None)
            return out

        async def write():
            await ctl.workload_writes.workloads.update(st, tidy)

        ctl.writes.chain(st.key, write)

    # -- blockAdmission --------------------------------------------------------------------------------------
    def holds_admission(self) -> bool:
        """Kueue's blockAdmission: no admission while a Workload holding a reservation has not had
        all its pods ready."""
        ctl = self.ctl
        if self.cfg is None or not self.cfg.block_admission or ctl.engine is None:
            return False
        for key in ctl.engine.state.admitted:
            st = ctl.jobs.get(key)
            if st is not None and st.phase == "admitted" and not W.is_true(
                    ctl.workload_writes.workloads.get(st), PR.PODS_READY):
                return True
        return False

    def _observe_eviction(self, wl: dict) -> None:
        ready = W.condition(wl, PR.PODS_READY)
        evicted = W.condition(wl, "Evicted") or {}
        adm = (wl.get("status") or {}).get("admission") or {}
        if ready is None or ready.get("status") != "True" or not adm:
            return
        since, at = W.parse_time(ready.get("lastTransitionTime")), W.parse_time(evicted.get("lastTransitionTime"))
        if since is not None and at is not None:
            self.metrics.ready_to_evicted(adm.get("clusterQueue", ""), evicted.get("reason", ""), max(0.0, at - since))

    def forget(self) -> None:
        """This replica stopped leading: its timers and what it had under way go."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._writing.clear()
        self._released.clear()
