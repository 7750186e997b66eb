"""Minimal histories that broke an invariant of tests/test_invariants_engine.py, kept as plain
tests. Each is xfail(strict=True) until the engine is fixed: when the fix lands the test passes,
strict xfail turns that into a failure, and the marker comes off."""

from __future__ import annotations

import pytest

from tests.strategies.quota_oracle import InvariantViolation, run_history
from tests.strategies.quota_world import CohortW, Q, QueueW, Submit, World

SHARED = ((("cpu", "nvidia.com/gpu"), ("f0",)),)


@pytest.mark.xfail(strict=True, raises=InvariantViolation, reason="engine bug: fair-sharing preemption and borrowWithinCohort reclaim "
                                       "preempt each other in a cycle inside one pass (MAX_ROUNDS reached)")
def test_no_preemption_cycle_between_fair_sharing_and_borrow_within_cohort():
    # cq-0 (weight 0, so any borrowing makes its share the maximum) sits under c1, which
    # keeps everything at home (lendingLimit 0) and may borrow 2 cpu from c0. A priority-0
    # workload of cq-2 takes cq-0's priority-2 borrower by fair sharing (InCohortFairSharing);
    # that one takes it back with borrowWithinCohort (InCohortReclaimWhileBorrowing, 0 < 2);
    # and so on until the safety net stops the pass after some 200 decisions, every one of
    # which a controller would carry out. Meanwhile workloads that fit are left waiting.
    world = World(
        flavors=("f0",),
        cohorts=(CohortW("c0", None, (Q("f0", "cpu", 3), Q("f0", "nvidia.com/gpu", 0))),
                 CohortW("c1", "c0", (Q("f0", "cpu", 0, 2, 0), Q("f0", "nvidia.com/gpu", 0, 4, 0)))),
        queues=(QueueW("cq-0", "c1", SHARED, (Q("f0", "cpu", 3), Q("f0", "nvidia.com/gpu", 3)),
                       reclaim="Any", borrow="LowerPriority", weight=0),
                QueueW("cq-2", "c0", SHARED, (Q("f0", "cpu", 4), Q("f0", "nvidia.com/gpu", 3)), reclaim="Any")),
        fair=("LessThanOrEqualToFinalShare",),
    )
    history = [
        Submit(queue=1, ns=0, priority=2, count=1, cpu=2, gpu=1, copies=2),
        Submit(queue=2, ns=1, priority=2, count=2, cpu=1, gpu=0, copies=4),
        Submit(queue=3, ns=0, priority=2, count=2, cpu=1, gpu=0, copies=2),
        Submit(queue=5, ns=1, priority=0, count=1, cpu=1, gpu=1, copies=1),
    ]
    run_history(world, history)
