"""A pod of an admitted workload that kube-scheduler failed with an `Error` is moved back to be
scheduled by the leader.

An extender call that fails - cut by a replica that died, or answered `Error` by a follower that
waited out its caches (docs/extender.md) - is an `Error` to kube-scheduler, which writes the pod
PodScheduled=False with reason SchedulerError (1.24: reason Unschedulable, the error itself as the
message, where a pod no node fits gets "0/N nodes are available: ..."). Then 1.24 parks the pod until a Node event or the
five-minute flush (../shared/data/kube-scheduler-retries.md); current versions back off (1 s
doubling to 10 s). No admission write of the leader's comes for a workload admitted already, so
the leader moves such pods here (WorkloadWrites.retry_parked: within the admission's room, so a
tenant's extra pods cost nothing), at once, and while the errors go on again after a floor that
doubles from MIN_FLOOR to MAX_FLOOR, per workload. The next look is a timer, not the pod's next
event: kube-scheduler writes nothing when a pod fails again with the same condition.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Callable, Iterable

from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites

SCHEDULER_ERROR = "SchedulerError"
# kube-scheduler's messages for a pod that is unschedulable, not failed: its FitError, and no Node at all
_NOT_AN_ERROR = re.compile(r"^(\d+/\d+ nodes are available|no nodes available to schedule pods)")
MIN_FLOOR, MAX_FLOOR = 1.0, 8.0


def failed_with_error(pod: dict) -> bool:
    """Unbound, and kube-scheduler's last attempt ended in an Error (not a refusal: an unschedulable
    pod is moved by the cluster events that could help it)."""
    if (pod.get("spec") or {}).get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("reason") == SCHEDULER_ERROR or (
                c.get("reason") == "Unschedulable" and not _NOT_AN_ERROR.match(c.get("message") or ""))
    return False


class SchedulerErrors:
    def __init__(self, sched: Scheduling, workload_writes: WorkloadWrites,
                 owners: Callable[[dict], Iterable[str]], pods_of: Callable[[str], list[dict]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sched, self.workload_writes, self.owners, self.pods_of = sched, workload_writes, owners, pods_of
        self.clock = clock
        self._next: dict[str, tuple[float, float]] = {}  # workload key -> (not before, floor after that)
        self._looks: dict[str, asyncio.TimerHandle] = {}  # workload key -> its next look

    def on_pod(self, pod: dict) -> None:
        if not self._leading() or not failed_with_error(pod):
            return
        owners = set(self.owners(pod))
        for st in (st for st in self.sched.jobs.values() if st.uid in owners and st.phase == "admitted"):
            self._retry(st)

    def _leading(self) -> bool:
        return bool(self.sched.leader and self.sched.recovered and self.sched.engine is not None)

    def _retry(self, st: JobState) -> None:
        admitted = self.sched.engine.state.admitted.get(st.key)
        if admitted is None:
            return
        now = self.clock()
        not_before, floor = self._next.get(st.key, (0.0, MIN_FLOOR))
        if now < not_before:
            self._look_later(st, not_before - now)
            return
        self._next[st.key] = (now + floor, min(floor * 2, MAX_FLOOR))
        self.workload_writes.retry_parked(st, admitted.admission)
        self._look_later(st, floor)

    def _look_later(self, st: JobState, delay: float) -> None:
        if st.key not in self._looks:
            self._looks[st.key] = asyncio.get_running_loop().call_later(delay, self._look, st)

    def _look(self, st: JobState) -> None:
        self._looks.pop(st.key, None)
        still = (self._leading() and self.sched.jobs.get(st.key) is st and st.phase == "admitted"
                 and any(map(failed_with_error, self.pods_of(st.uid))))
        if still:
            self._retry(st)
        else:
            self._next.pop(st.key, None)
