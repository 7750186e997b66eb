"""The stand-in scheduler's queue behaves as kube-scheduler's (shared/data/kube-scheduler-retries.md:
when a real 1.24 and 1.36 asked the extender again), on a clock the test moves by hand."""

from __future__ import annotations

import pytest

from tests.standin.schedqueue import (ASSIGNED_POD_DELETED, CURRENT, MAX_UNSCHEDULABLE, NODE_CHANGED, POD_BOUND,
                                      POD_CREATED, V1_24, SchedulingQueue, backoff)


class Clock:
    t = 0.0

    def now(self) -> float:
        return self.t


def tries(version: str, *, error: bool, events: dict[float, str] = {}, until: float = 100.0) -> list[float]:
    """When a pod that always fails this way is tried, with ``events`` at those times."""
    clock = Clock()
    q = SchedulingQueue(clock, version)
    q.add("p", (0,))
    out, pending, tick = [], dict(events), 0
    while clock.t <= until:
        for at in [a for a in pending if a <= clock.t]:
            q.event(pending.pop(at))
        for uid in q.due():
            out.append(round(clock.t, 2))
            q.attempt(uid)
            q.failed(uid, error=error)
        tick += 1
        clock.t = tick / 100
    return out


def test_backoff_doubles_from_one_second_to_ten():
    assert [backoff(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_an_extender_error_is_parked_on_1_24_and_backed_off_on_current():
    # 1.24: not again until a Node is added (85 s in the recording); a pod created or bound does not move it
    assert tries(V1_24, error=True, events={75.0: POD_CREATED, 75.1: POD_BOUND, 85.0: NODE_CHANGED}) == [0.0, 85.0]
    # current: 1, 2, 4, 8, then every 10 s, whatever happens
    assert tries(CURRENT, error=True, until=45.0) == [0.0, 1.0, 3.0, 7.0, 15.0, 25.0, 35.0, 45.0]


def test_an_unschedulable_pod_comes_back_on_an_event_that_could_help_or_after_five_minutes():
    assert tries(CURRENT, error=False, events={75.0: POD_CREATED, 85.0: NODE_CHANGED}) == [0.0, 75.0, 85.0]
    assert tries(V1_24, error=False, events={40.0: ASSIGNED_POD_DELETED}) == [0.0, 40.0]
    assert tries(V1_24, error=False, until=MAX_UNSCHEDULABLE + 1) == [0.0, MAX_UNSCHEDULABLE]


def test_a_pod_moved_before_its_backoff_is_over_waits_for_it():
    # failed at 0 and 2 (moved at 2), at 2.5 a Node: its 2 s backoff runs to 4
    assert tries(V1_24, error=False, events={2.0: NODE_CHANGED, 2.5: NODE_CHANGED}, until=10) == [0.0, 2.0, 4.0]


def test_a_failure_while_a_helpful_event_happened_during_the_attempt_goes_to_backoff():
    clock = Clock()
    q = SchedulingQueue(clock, V1_24)
    q.add("p", (0,))
    q.attempt("p")
    q.event(NODE_CHANGED)  # during the attempt
    q.failed("p", error=True)
    clock.t = 1.0
    assert q.due() == ["p"]


@pytest.mark.parametrize("version, again", [(V1_24, 0.0), (CURRENT, 1.0)])
def test_a_pod_updated_during_an_attempt_at_it_is_tried_again_not_parked(version, again):
    # 1.24 PriorityQueue.Update puts a pod in no queue (in flight) in the active queue; current
    # requeues a pod an in-flight event could help (any event, when the extender refused it)
    clock = Clock()
    q = SchedulingQueue(clock, version)
    q.add("p", (0,))
    q.attempt("p")
    q.updated("p")  # e.g. an annotation written on the pod meanwhile
    q.failed("p", error=False, by_extender=True)
    clock.t = again
    assert q.due() == ["p"]
    # without the update it would wait for an event or the five-minute flush
    q.attempt("p")
    q.failed("p", error=False, by_extender=True)
    clock.t = again + 20.0
    assert q.due() == []


def test_an_unknown_version_is_a_one_line_error():
    with pytest.raises(ValueError, match="one of 1.24, current"):
        SchedulingQueue(Clock(), "1.30")
