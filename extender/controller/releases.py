"""Releases under way, and admissions waiting for them (see "The order of writes" in
docs/controller.md): an admission decided while releases are being written waits until every
one of them has ended, so the API's record never shows more than the quota.

Releases are numbered in the order they start; an admission remembers the last number it saw and
waits until no release up to it is open. Waiting costs O(log n), not one future per open
release per admission: with thousands of writes queued (Kueue's baseline in real time) gathering
them all for each admission was a third of the controller's CPU."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Barrier:
    upto: int  # the last release started before the decision
    abandoned_mark: int  # how many releases had been abandoned by then
    epoch: int  # cancel_all() starts a new one: a barrier from before it never clears


class Releases:
    def __init__(self, epoch: int = 0) -> None:
        self._epoch = epoch
        self._seq = 0
        self._open: set[int] = set()
        self._open_heap: list[int] = []  # the open ids, and some ended ones not yet popped
        self._abandoned: list[int] = []  # ids of releases given up on because this replica stopped leading
        self._waiters: list[tuple[int, int, int, asyncio.Future]] = []  # (upto, mark, tie, future)
        self._tie = itertools.count()

    def start(self) -> int:
        self._seq += 1
        self._open.add(self._seq)
        heapq.heappush(self._open_heap, self._seq)
        return self._seq

    def end(self, rid: int, *, abandoned: bool = False) -> None:
        """The release was written (or given up after every retry), or - abandoned - cancelled."""
        if rid not in self._open:
            return
        self._open.discard(rid)
        if abandoned:
            self._abandoned.append(rid)
        self._wake()

    def barrier(self) -> Barrier | None:
        """What an admission decided now must wait for; None when no release is under way."""
        if not self._open:
            return None
        return Barrier(self._seq, len(self._abandoned), self._epoch)

    async def wait(self, barrier: Barrier) -> bool:
        """Wait until every release up to the barrier has ended. False if one of them was abandoned
        (this replica is stopping: the next leader decides instead)."""
        if barrier.epoch != self._epoch:
            return False
        oldest = self._oldest_open()
        if oldest is None or oldest > barrier.upto:
            return self._clean(barrier)
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (barrier.upto, barrier.abandoned_mark, next(self._tie), fut))
        return await fut

    def cancel_all(self) -> None:
        for *_, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self.__init__(self._epoch + 1)

    def __len__(self) -> int:
        return len(self._open)

    def _oldest_open(self) -> int | None:
        heap = self._open_heap
        while heap and heap[0] not in self._open:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _clean(self, barrier: Barrier) -> bool:
        return not any(rid <= barrier.upto for rid in self._abandoned[barrier.abandoned_mark:])

    def _wake(self) -> None:
        oldest = self._oldest_open()
        while self._waiters and (oldest is None or self._waiters[0][0] < oldest):
            upto, mark, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(self._clean(Barrier(upto, mark, self._epoch)))
