"""Releases under way, and admissions waiting for them (see "The order of writes" in
docs/controller.md): an admission decided while releases are being written waits until every
one of them that could matter has ended, so the API's record never shows more than the quota.

Releases are numbered in the order they start; an admission remembers the last number it saw and
waits until no release up to it is open. Waiting costs O(log n), not one future per open
release per admission: with thousands of writes queued (Kueue's baseline in real time) gathering
them all for each admission was a third of the controller's CPU.

Quota is counted per cohort tree (a ClusterQueue without a cohort is a tree of its own): room
freed in one tree is never used in another. So a release carries the tree it frees room in - its
*scope* - and an admission waits only for the releases of its own tree, plus those of no known
scope (None: every admission waits for them). Otherwise a victim's eviction, which stays open
until its pods are gone, held back every admission in the cluster. When the trees change (a
ClusterQueue or Cohort moves) `regroup()` makes the releases open at that moment count for every
admission decided later, whatever its tree.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass

Scope = str | None


@dataclass(frozen=True, slots=True)
class _Mark:
    upto: int  # the last release started (in this sequence) before the decision
    abandoned_mark: int  # how many releases of the sequence had been abandoned by then


@dataclass(frozen=True, slots=True)
class Barrier:
    marks: tuple[tuple["_Sequence", _Mark], ...]
    epoch: int  # cancel_all() starts a new one: a barrier from before it never clears


class _Sequence:
    """The releases of one scope: which are open, which were abandoned, who waits."""

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._last = 0
        self._open_heap: list[int] = []  # the open ids, and some ended ones not yet popped
        self._abandoned: list[int] = []  # ids of releases given up on
        self._waiters: list[tuple[int, int, int, asyncio.Future]] = []  # (upto, mark, tie, future)
        self._tie = itertools.count()

    def start(self, rid: int) -> None:
        self._last = rid
        self._open.add(rid)
        heapq.heappush(self._open_heap, rid)

    def end(self, rid: int, abandoned: bool) -> None:
        self._open.discard(rid)
        if abandoned:
            self._abandoned.append(rid)
        self._wake()

    def mark(self) -> _Mark | None:
        return _Mark(self._last, len(self._abandoned)) if self._open else None

    def passed(self, mark: _Mark) -> bool:
        """No release up to the mark is open any more."""
        oldest = self._oldest_open()
        return oldest is None or oldest > mark.upto

    async def wait(self, mark: _Mark) -> bool:
        if self.passed(mark):
            return self._clean(mark)
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (mark.upto, mark.abandoned_mark, next(self._tie), fut))
        return await fut

    def cancel(self) -> None:
        for *_, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()

    def __len__(self) -> int:
        return len(self._open)

    def _oldest_open(self) -> int | None:
        heap = self._open_heap
        while heap and heap[0] not in self._open:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _clean(self, mark: _Mark) -> bool:
        return not any(rid <= mark.upto for rid in self._abandoned[mark.abandoned_mark:])

    def _wake(self) -> None:
        oldest = self._oldest_open()
        while self._waiters and (oldest is None or self._waiters[0][0] < oldest):
            upto, abandoned_mark, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(self._clean(_Mark(upto, abandoned_mark)))


class Releases:
    def __init__(self, epoch: int = 0) -> None:
        self._epoch = epoch
        self._seq = 0
        self._sequences: dict[Scope, _Sequence] = {}
        self._scope_of: dict[int, Scope] = {}  # open release -> its scope
        self._wide: list[tuple[_Sequence, _Mark]] = []  # releases open at the last regroup()

    def start(self, scope: Scope = None) -> int:
        """A release freeing room in the tree `scope` (None: unknown, every admission waits for it)."""
        self._seq += 1
        self._sequences.setdefault(scope, _Sequence()).start(self._seq)
        self._scope_of[self._seq] = scope
        return self._seq

    def end(self, rid: int, *, abandoned: bool = False) -> None:
        """The release was written (or given up after every retry), or - abandoned - cancelled."""
        scope = self._scope_of.pop(rid, _UNKNOWN)
        if scope is _UNKNOWN:
            return
        self._sequences[scope].end(rid, abandoned)

    def regroup(self) -> None:
        """The cohort trees changed: what is open now counts for every later admission."""
        self._wide = self._live_wide() + [(s, m) for s in self._sequences.values() if (m := s.mark()) is not None]

    def barrier(self, scope: Scope = None) -> Barrier | None:
        """What an admission decided now in tree `scope` must wait for (None: every release);
        None when nothing is under way."""
        if not self._scope_of:
            return None
        if scope is None:
            sequences = list(self._sequences.values())
        else:
            sequences = [s for s in (self._sequences.get(scope), self._sequences.get(None)) if s is not None]
        marks = [(s, m) for s in sequences if (m := s.mark()) is not None]
        self._wide = self._live_wide()
        marks += [w for w in self._wide if all(w[0] is not s for s, _ in marks)]
        return Barrier(tuple(marks), self._epoch) if marks else None

    async def wait(self, barrier: Barrier) -> bool:
        """Wait until every release the barrier covers has ended. False if one of them was
        abandoned (this replica is stopping, or a release was given up: the next decision says)."""
        ok = True
        for sequence, mark in barrier.marks:
            if barrier.epoch != self._epoch:
                return False
            ok = await sequence.wait(mark) and ok
        return ok and barrier.epoch == self._epoch

    def cancel_all(self) -> None:
        for s in self._sequences.values():
            s.cancel()
        self.__init__(self._epoch + 1)

    def __len__(self) -> int:
        return len(self._scope_of)

    def _live_wide(self) -> list[tuple[_Sequence, _Mark]]:
        return [(s, m) for s, m in self._wide if not s.passed(m)]


_UNKNOWN = object()
