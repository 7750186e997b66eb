"""A pod of an admitted workload that kube-scheduler failed with an `Error` is moved back to be
scheduled by the leader.

An extender call that fails - cut by a replica that died, or answered `Error` by a follower that
waited out its caches (docs/extender.md) - is an `Error` to kube-scheduler, which writes the pod
PodScheduled=False with reason SchedulerError. Then 1.24 parks the pod until a Node event or the
five-minute flush (../shared/data/kube-scheduler-retries.md); current versions back off (1 s
doubling to 10 s). No admission write of the leader's comes for a workload admitted already, so
the leader moves such pods here (WorkloadWrites.retry_parked: within the admission's room, so a
tenant's extra pods cost nothing), at once, and while the errors go on again after a floor that
doubles from MIN_FLOOR to MAX_FLOOR, per workload.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites

SCHEDULER_ERROR = "SchedulerError"
MIN_FLOOR, MAX_FLOOR = 1.0, 8.0


def failed_with_error(pod: dict) -> bool:
    """Unbound, and kube-scheduler's last attempt ended in an Error (not a refusal: an unschedulable
    pod is moved by the cluster events that could help it)."""
    if (pod.get("spec") or {}).get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == SCHEDULER_ERROR
               for c in (pod.get("status") or {}).get("conditions") or ())


class SchedulerErrors:
    def __init__(self, sched: Scheduling, workload_writes: WorkloadWrites,
                 owners: Callable[[dict], Iterable[str]], clock: Callable[[], float] = time.monotonic) -> None:
        self.sched, self.workload_writes, self.owners, self.clock = sched, workload_writes, owners, clock
        self._next: dict[str, tuple[float, float]] = {}  # workload key -> (not before, floor after that)

    def on_pod(self, pod: dict) -> None:
        engine = self.sched.engine
        if not (self.sched.leader and self.sched.recovered and engine is not None) or not failed_with_error(pod):
            return
        owners = set(self.owners(pod))
        if not owners:
            return
        for st in self._admitted(owners):
            admitted = engine.state.admitted.get(st.key)
            if admitted is None:
                continue
            now = self.clock()
            if len(self._next) > 4096:  # keys of workloads gone since
                self._next = {k: v for k, v in self._next.items() if k in self.sched.jobs}
            not_before, floor = self._next.get(st.key, (0.0, MIN_FLOOR))
            if now < not_before:
                continue
            self._next[st.key] = (now + floor, min(floor * 2, MAX_FLOOR))
            self.workload_writes.retry_parked(st, admitted.admission)

    def _admitted(self, uids: set[str]) -> list[JobState]:
        return [st for st in self.sched.jobs.values() if st.uid in uids and st.phase == "admitted"]
