"""Issue 9's invariants of the quota engine, on random quota trees and random histories.

After every step of every history (tests/strategies/quota_oracle.py checks them, with quota
arithmetic of its own): (1) no ClusterQueue or Cohort goes over what it may use; (2) preemption
follows the policies and never takes from a queue within its nominal quota; (3) every workload is
in exactly one state and the engine agrees; (4) a replay decides the same; (5) nothing that fits
waits. Budgets: the "ci" profile (default) runs in well under a minute; the "long" profile runs
100,000 histories per test (see docs/reliability.md).
"""

from __future__ import annotations

from hypothesis import given

from tests.strategies.quota_oracle import run_history

from tests.strategies.quota_world import contended_worlds, histories, workload_operations, worlds


@given(worlds(), histories())
def test_invariants_hold_on_random_quota_trees_and_histories(world, history):
    run_history(world, history)


@given(contended_worlds(), histories(ops=workload_operations()))
def test_invariants_hold_under_contention_in_one_cohort(world, history):
    run_history(world, history)
