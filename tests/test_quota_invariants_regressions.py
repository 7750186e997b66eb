"""Minimal histories that broke an invariant of tests/test_quota_invariants.py, kept as plain
tests: each failed until the engine was fixed (a workload preempted in a pass neither
preempts nor is preempted again in the same pass)."""

from __future__ import annotations

import pytest

from tests.strategies.quota_oracle import InvariantViolation, run_history
from tests.strategies.quota_world import CohortW, Q, QueueW, SetQuota, Submit, World

SHARED = ((("cpu", "nvidia.com/gpu"), ("f0",)),)


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


def test_no_cascade_of_equal_priority_preemptions_within_a_cluster_queue():
    # Four priority-0 workloads run in cq-1 (two cpu flavors). Two priority-1 ones arrive and
    # preempt three of them. The victims, requeued at their eviction time, are still "older" by
    # creation time than the priority-0 workloads left running, so each preempts a newer
    # equal-priority one (LowerOrNewerEqualPriority), which preempts the next: job-2 and job-1
    # are each preempted twice in one pass. Kueue, as far as we know, compares the queue-order
    # timestamp (the eviction time for a requeued workload), so a victim cannot do this.
    world = World(
        flavors=("f0", "f1", "f2"),
        cohorts=(CohortW("c0", None, (), 500), CohortW("c1"), CohortW("c2")),
        queues=(QueueW("cq-0", "c0", ((("cpu",), ("f1", "f2", "f0")),),
                       (Q("f1", "cpu", 1), Q("f2", "cpu", 5), Q("f0", "cpu", 5))),
                QueueW("cq-1", "c0", ((("cpu",), ("f0", "f1")), (("nvidia.com/gpu",), ("f2",))),
                       (Q("f0", "cpu", 1), Q("f1", "cpu", 1), Q("f2", "nvidia.com/gpu", 1)),
                       within="LowerOrNewerEqualPriority")),
        fair=("LessThanOrEqualToFinalShare",),
    )
    history = [Submit(queue=1, ns=0, priority=0, count=1, cpu=2, gpu=0, copies=4),
               Submit(queue=1, ns=0, priority=1, count=1, cpu=3, gpu=0, copies=2)]
    run_history(world, history)


def test_no_preemption_cycle_between_queues_sharing_a_child_cohort():
    # cq-0 and cq-1 own nothing and live in c1 (lendingLimit 0 on cpu, may borrow 4 from c0,
    # which owns 3 cpu). cq-0 runs a priority-1 borrower of all 3 cpu; a priority-2 arrival in
    # cq-1 takes it with borrowWithinCohort (InCohortReclaimWhileBorrowing); cq-0's next
    # priority-1 workload takes the cpu back by fair sharing (InCohortFairSharing: cq-1's
    # weight is 500); and so on, until the pass's safety net stops it after 503 decisions.
    world = World(
        flavors=("f0",),
        cohorts=(CohortW("c0", None, (Q("f0", "cpu", 3), Q("f0", "nvidia.com/gpu", 0))),
                 CohortW("c1", "c0", (Q("f0", "cpu", 0, 4, 0), Q("f0", "nvidia.com/gpu", 2)))),
        queues=(QueueW("cq-0", "c1", SHARED, (Q("f0", "cpu", 0), Q("f0", "nvidia.com/gpu", 0)), reclaim="Any"),
                QueueW("cq-1", "c1", SHARED, (Q("f0", "cpu", 0), Q("f0", "nvidia.com/gpu", 0)),
                       reclaim="LowerPriority", borrow="LowerPriority", weight=500)),
        fair=("LessThanInitialShare",),
    )
    history = [Submit(queue=6, ns=0, priority=1, count=1, cpu=3, gpu=1, copies=3),
               Submit(queue=1, ns=0, priority=2, count=1, cpu=3, gpu=0, copies=2)]
    run_history(world, history)


def test_over_admission_after_a_quota_cut_leaves_a_lending_limit_reserve_usable():
    # cq-0 lends at most 2 of its 10 cpu (lendingLimit 2: 8 stay at home). cq-1 runs 12 (its
    # 10 plus the 2 cq-0 lends); then cq-1's quota is cut to 5, leaving the cohort 5 over
    # (7 lendable, 12 used). Kueue's available() subtracts that deficit from cq-0's reserve,
    # so cq-0 could run only 3 of its guaranteed 8. Running cq-0's 8 adds nothing to the
    # cohort's usage, so all 8 are admitted at once; cq-1's excess is not made any larger.
    world = World(
        flavors=("f0",),
        cohorts=(CohortW("c0"),),
        queues=(QueueW("cq-0", "c0", ((("cpu",), ("f0",)),), (Q("f0", "cpu", 10, None, 2),)),
                QueueW("cq-1", "c0", ((("cpu",), ("f0",)),), (Q("f0", "cpu", 10),))),
    )
    history = [Submit(queue=1, copies=12),
               SetQuota(node=1, entry=0, nominal=5),
               Submit(queue=0, copies=9)]
    run = run_history(world, history)
    states = {}
    for key, job in run.jobs.items():
        states.setdefault((job.op.queue, job.state), []).append(key)
    assert {k: len(v) for k, v in states.items()} == {(1, "admitted"): 12, (0, "admitted"): 8, (0, "pending"): 1}
    ninth = states[(0, "pending")][0]
    # What must be freed before the ninth fits counts the cohort's deficit: 1 + 5 (cpu here is in millicores).
    assert run.engine.pending_message(ninth) == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f0, 6m more needed")
