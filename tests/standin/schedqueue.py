"""kube-scheduler's scheduling queue, as far as the stand-in scheduler needs it, and the clocks it
runs on.

A pod waits in one of three places (pkg/scheduler/internal/queue): active (tried next, oldest
first), backoff (1 s after the end of its last failed attempt, doubling to 10 s), or with the
unschedulable pods, which come back only when a cluster event that could help them happens, or
after five minutes there. Both leave on kube-scheduler's periodic flushes, not at once: a pod whose
backoff is over becomes active at the next of the flushes that run every second
(flushBackoffQCompleted), a pod five minutes unschedulable at the next of those that run every 30 s
(flushUnschedulablePodsLeftover), both ticking from the queue's start. Which events help, and where
an extender ``Error`` sends a pod, depend on the version (measured on real kube-schedulers:
shared/data/kube-scheduler-retries.md):

- 1.24: an ``Error`` is parked with the unschedulable pods, like a pod no node fits; they move on a
  Node added or changed or an assigned pod deleted, not on pods created or bound; a pod's own
  status update (kube-scheduler's PodScheduled=False) moves nothing;
- current (1.36): an ``Error`` goes to backoff (retried whatever happens); the unschedulable pods
  also move on a pod created, bound or deleted; a pod the extender refused (no plugin rejected it)
  also moves on any update of its own, its status included (kube-scheduler's own PodScheduled=False
  write, the first time it changes); and while no pod is active, a pod in backoff for being
  unschedulable (not for an ``Error``) is tried at once (SchedulerPopFromBackoffQ, on by default
  since 1.33). So an extender-refused pod is tried a second time right after its first attempt.

A pod's own update (not its status) moves it too, in both; one that comes during an attempt at it
sends it to be tried again when the attempt fails (1.24: to the active pods at once; current: to
backoff). Moving a pod whose backoff is not over
puts it in backoff, as kube-scheduler does; and a pod that fails while such an event happened
during its attempt goes to backoff rather than the unschedulable pods (moveRequestCycle).
"""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

INITIAL_BACKOFF = 1.0  # podInitialBackoffSeconds
MAX_BACKOFF = 10.0  # podMaxBackoffSeconds
MAX_UNSCHEDULABLE = 300.0  # podMaxInUnschedulablePodsDuration: the flush
BACKOFF_FLUSH = 1.0  # flushBackoffQCompleted's period
UNSCHEDULABLE_FLUSH = 30.0  # flushUnschedulablePodsLeftover's period
V1_24, CURRENT = "1.24", "current"
VERSIONS = (V1_24, CURRENT)

# the cluster events that move unschedulable pods, per version
NODE_CHANGED, ASSIGNED_POD_DELETED, POD_CREATED, POD_BOUND = "NodeChanged", "AssignedPodDeleted", "PodCreated", "PodBound"
MOVES = {V1_24: frozenset({NODE_CHANGED, ASSIGNED_POD_DELETED}),
         CURRENT: frozenset({NODE_CHANGED, ASSIGNED_POD_DELETED, POD_CREATED, POD_BOUND})}


class RealClock:
    """The event loop's time; waits are real."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def idle(self, wake: asyncio.Event, until: float | None) -> None:
        """Wait for ``wake`` or until the clock reads ``until`` (None: only ``wake``)."""
        timeout = None if until is None else max(until - self.now(), 0.0)
        try:
            await asyncio.wait_for(wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass


class VirtualClock(RealClock):
    """Real time plus the idle time skipped: when the scheduler has nothing to do before a timer
    (a backoff, the flush) and no write wakes it for ``quiet`` real seconds, the clock jumps to the
    timer. Waits then cost ``quiet``, and what happens meanwhile elsewhere is late in virtual
    time, never early: times measured on it are not shorter than kube-scheduler's would be."""

    def __init__(self, quiet: float = 0.05) -> None:
        self.quiet = quiet
        self.skipped = 0.0

    def now(self) -> float:
        return asyncio.get_running_loop().time() + self.skipped

    async def idle(self, wake: asyncio.Event, until: float | None) -> None:
        if until is None:
            await wake.wait()
            return
        left = until - self.now()
        if left <= 0:
            return
        try:
            await asyncio.wait_for(wake.wait(), min(left, self.quiet))
            return
        except asyncio.TimeoutError:
            pass
        left = until - self.now()
        if left > 0 and not wake.is_set():
            self.skipped += left


def backoff(attempts: int) -> float:
    return min(INITIAL_BACKOFF * 2 ** max(attempts - 1, 0), MAX_BACKOFF) if attempts > 0 else 0.0


ACTIVE, BACKOFF, UNSCHEDULABLE = "active", "backoff", "unschedulable"


@dataclass
class Queued:
    uid: str
    order: tuple  # oldest first among the active pods
    where: str = ACTIVE
    attempts: int = 0
    last_try: float = -math.inf
    since: float = 0.0  # when it went where it is
    cycle: int = 0  # the scheduling cycle of its last attempt
    error: bool = False  # its last attempt ended in an extender Error
    by_extender: bool = False  # ... or in the extender refusing every node (no plugin rejected it)
    in_flight: bool = False  # an attempt at it is under way
    updated_in_flight: bool = False  # ... and the pod itself changed meanwhile

    @property
    def backoff_until(self) -> float:
        return self.last_try + backoff(self.attempts)


class SchedulingQueue:
    def __init__(self, clock: RealClock, version: str = V1_24) -> None:
        if version not in VERSIONS:
            raise ValueError(f"kube-scheduler version {version!r}: one of {', '.join(VERSIONS)}")
        self.clock = clock
        self.version = version
        self.started = clock.now()  # the periodic flushes tick from here
        self.pods: dict[str, Queued] = {}
        self.moves = 0  # unschedulable pods moved by a cluster event
        self.flushed = 0  # moved by the five-minute flush
        self.cycle = 0  # scheduling attempts so far
        self.move_cycle = -1  # the cycle during which a moving event last happened

    def add(self, uid: str, order: tuple) -> None:
        if uid not in self.pods:
            self.pods[uid] = Queued(uid, order, since=self.clock.now())

    def forget(self, uid: str) -> None:
        self.pods.pop(uid, None)

    def updated(self, uid: str) -> None:
        """The pod itself changed (not its status): as a cluster event, for it alone."""
        q = self.pods.get(uid)
        if q is not None and q.in_flight:
            q.updated_in_flight = True
        elif q is not None and q.where == UNSCHEDULABLE:
            self._move(q)

    def status_updated(self, uid: str) -> None:
        """The pod's status changed (kube-scheduler's own PodScheduled=False, for one)."""
        q = self.pods.get(uid)
        if q is not None and q.where == UNSCHEDULABLE and q.by_extender and self.version == CURRENT:
            self._move(q)

    def event(self, kind: str) -> None:
        if kind not in MOVES[self.version]:
            return
        self.move_cycle = self.cycle
        for q in self.pods.values():
            if q.where == UNSCHEDULABLE:
                self.moves += 1
                self._move(q)

    def _move(self, q: Queued) -> None:
        now = self.clock.now()
        q.where, q.since = (BACKOFF if q.backoff_until > now else ACTIVE), now

    def attempt(self, uid: str) -> None:
        """An attempt at ``uid`` starts."""
        self.cycle += 1
        q = self.pods.get(uid)
        if q is not None:
            q.cycle = self.cycle
            q.in_flight, q.updated_in_flight = True, False

    def failed(self, uid: str, *, error: bool, by_extender: bool = False) -> None:
        """An attempt failed: no node fits (``error`` False; ``by_extender``: the extender refused
        every node) or the extender answered an Error."""
        q = self.pods.get(uid)
        if q is None:
            return
        now = self.clock.now()
        q.attempts += 1
        q.last_try = q.since = now
        q.error, q.by_extender = error, by_extender or error
        q.in_flight = False
        if q.updated_in_flight:
            # 1.24: the update put the pod in the active queue beside the attempt (Update: "not in any
            # of the queues"), and a pod active already is not parked; current: an event during the
            # attempt that could help it (any, when no plugin rejected it) requeues it
            q.where = ACTIVE if self.version == V1_24 else BACKOFF
            return
        parked = not (error and self.version == CURRENT) and self.move_cycle < q.cycle
        q.where = UNSCHEDULABLE if parked else BACKOFF

    def _tick(self, t: float, period: float) -> float:
        """The first tick of a flush of ``period`` at or after ``t``."""
        return self.started + max(math.ceil((t - self.started) / period - 1e-9), 0) * period

    def _ready_at(self, q: Queued) -> float:
        if q.where == BACKOFF:
            return self._tick(q.backoff_until, BACKOFF_FLUSH)
        return self._tick(q.since + MAX_UNSCHEDULABLE, UNSCHEDULABLE_FLUSH)

    def due(self) -> list[str]:
        """The pods to try now, oldest first: the active ones, those whose backoff is over, and the
        unschedulable ones flushed; on current, when none is, the unschedulable one in backoff
        whose backoff ends first."""
        now = self.clock.now()
        for q in self.pods.values():
            if q.where == BACKOFF and self._ready_at(q) <= now:
                q.where = ACTIVE
            elif q.where == UNSCHEDULABLE and self._ready_at(q) <= now:
                self.flushed += 1
                self._move(q)
        active = sorted((q for q in self.pods.values() if q.where == ACTIVE), key=lambda q: q.order)
        if not active and self.version == CURRENT:
            early = [q for q in self.pods.values() if q.where == BACKOFF and not q.error]
            if early:
                first = min(early, key=lambda q: (q.backoff_until, q.order))
                first.where = ACTIVE
                active = [first]
        return [q.uid for q in active]

    def next_timer(self) -> float | None:
        """When a pod next becomes due without an event (None: none will)."""
        times = [self._ready_at(q) for q in self.pods.values() if q.where in (BACKOFF, UNSCHEDULABLE)]
        return min(times) if times else None
