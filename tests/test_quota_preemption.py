"""Classic preemption (Kueue docs: concepts/preemption.md, concepts/cluster_queue.md "Preemption";
pkg/scheduler/preemption/preemption_test.go)."""

import pytest

from tests.scenarios.sim import run

MSG = "couldn't assign flavors to pod set main: "


@pytest.fixture(scope="module")
def reclaim():
    return run("reclaim-within-cohort.yaml")


@pytest.mark.parametrize(
    "case, preempted",
    [("never", False), ("lower-vs-high", False), ("lower-vs-low", True), ("any", True)],
)
def test_reclaim_within_cohort_policies(reclaim, case, preempted):
    if preempted:
        assert (f"{case}/borrowed", "InCohortReclamation") in reclaim.preempted_at(10.0)
        assert f"{case}/reclaim" in reclaim.admitted_at(10.0)
    else:
        assert all(job != f"{case}/borrowed" for job, _ in reclaim.preempted_at(10.0))
        assert reclaim.final_pending()[f"{case}/reclaim"] == MSG + "insufficient unused quota for cpu in flavor default, 2 more needed"


def test_within_cluster_queue_lower_priority():
    r = run("within-cluster-queue.yaml")
    assert r.preempted_at(10.0) == [("ns/low", "InClusterQueue")]
    assert r.admitted_at(10.0) == ["ns/high"]
    # equal priority is never a victim under LowerPriority
    assert r.preempted_at(20.0) == []
    assert r.final_pending()["ns/high-2"] == MSG + "insufficient unused quota for cpu in flavor default, 2 more needed"


def test_within_cluster_queue_lower_or_newer_equal_priority():
    r = run("within-lower-or-newer-equal.yaml")
    assert r.admitted_at(1.0) == ["ns/new"]
    assert r.preempted_at(5.0) == [("ns/new", "InClusterQueue")]
    assert r.admitted_at(5.0) == ["ns/old"]


def test_within_cluster_queue_lower_priority_spares_newer_equal():
    r = run("within-lower-only.yaml")
    assert r.events("Preempted") == []
    assert r.final["admitted"] == ["ns/new"]


def test_borrow_within_cohort_below_threshold():
    r = run("borrow-within-cohort.yaml")
    assert r.preempted_at(10.0) == [("b/b-1", "InCohortReclaimWhileBorrowing")]
    (adm,) = r.events("Admitted", "a/a-1")
    assert (adm["time"], adm["borrowing"]) == (10.0, True)


def test_borrow_within_cohort_respects_max_priority_threshold():
    r = run("borrow-within-cohort-threshold.yaml")
    assert r.events("Preempted") == []
    assert r.final_pending() == {"a/a-1": MSG + "insufficient unused quota for cpu in flavor default, 2 more needed"}


def test_no_preemption_while_borrowing_without_borrow_within_cohort():
    r = run("borrow-within-cohort-never.yaml")
    assert r.events("Preempted") == []
    assert r.final_pending() == {"a/a-1": MSG + "insufficient unused quota for cpu in flavor default, 2 more needed"}


def test_candidates_lowest_priority_then_most_recent():
    r = run("candidates-lowest-priority-first.yaml")
    assert r.preempted_at(10.0) == [("ns/v2", "InClusterQueue"), ("ns/v1", "InClusterQueue")]
    assert r.admitted_at(10.0) == ["ns/p"]


def test_minimal_victim_set():
    r = run("candidates-minimal-set.yaml")
    assert r.preempted_at(10.0) == [("ns/x1", "InClusterQueue")]
    assert sorted(r.final["admitted"]) == ["ns/p", "ns/x2"]


def test_borrowing_queues_are_preempted_first():
    r = run("candidates-borrowers-first.yaml")
    assert r.preempted_at(10.0) == [("b/b-2", "InCohortReclamation")]
    assert sorted(r.final["admitted"]) == ["a/a-new", "a/a-own", "b/b-1"]


def test_queue_within_guarantee_is_never_a_reclaim_target():
    r = run("reclaim-guarantee.yaml")
    assert [(e["time"], e["job"], e["reason"]) for e in r.events("Preempted")] == [(10.0, "b/b-2", "InCohortReclamation")]
    assert r.final_pending()["a/a-2"] == MSG + "insufficient unused quota for cpu in flavor default, 2 more needed"
    assert sorted(r.final["admitted"]) == ["a/a-1", "b/b-1", "c/c-1"]


def test_victim_requeued_resumes_and_keeps_progress():
    r = run("preempted-resumes.yaml")
    assert r.preempted_at(10.0) == [("ns/low", "InClusterQueue")]
    assert [e["time"] for e in r.admissions("ns/low")] == [0.0, 20.0]
    # 10 s done before the preemption, 20 s after: finished at 40, not 50
    assert [(e["time"], e["job"]) for e in r.events("Finished")] == [(20.0, "ns/high"), (40.0, "ns/low")]
    assert r.final["finished"] == ["ns/high", "ns/low"] and r.final["pending"] == []


def test_within_cluster_queue_preemption_may_leave_the_preemptor_borrowing():
    r = run("within-while-borrowing.yaml")
    assert r.preempted_at(10.0) == [("a/a-low", "InClusterQueue")]
    (adm,) = r.events("Admitted", "a/a-high")
    assert (adm["time"], adm["borrowing"]) == (10.0, True)
