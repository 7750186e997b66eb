"""Cohorts: borrowing idle quota, Cohort objects with quota and parents, borrowingLimit, lendingLimit
(Kueue docs: concepts/cluster_queue.md "Cohort", "BorrowingLimit"; concepts/cohort.md)."""

from tests.scenarios.sim import run

MSG = "couldn't assign flavors to pod set main: "


def test_borrows_idle_quota_of_the_cohort():
    r = run("cohort-borrowing.yaml")
    (adm,) = r.events("Admitted", "a/a-1")
    assert (adm["time"], adm["borrowing"]) == (0.0, True)
    assert r.last_pending_message("a/a-2") == MSG + "insufficient unused quota for cpu in flavor default, 1 more needed"
    # a-1 done: a-2 fits in team-a's own quota
    assert [(e["time"], e["borrowing"]) for e in r.admissions("a/a-2")] == [(10.0, False)]


def test_workload_within_nominal_goes_before_one_that_borrows():
    r = run("cohort-nominal-first.yaml")
    assert r.admitted_at(1.0) == ["b/b-2"]
    assert r.final_pending() == {"a/a-2": MSG + "insufficient unused quota for cpu in flavor default, 2 more needed"}


def test_cohort_object_owns_quota_anyone_may_borrow():
    r = run("cohort-object-quota.yaml")
    assert [(e["job"], e["borrowing"]) for e in r.events("Admitted")] == [("ns/a-1", True)]
    assert r.final_pending() == {"ns/a-2": MSG + "insufficient unused quota for cpu in flavor default, 1 more needed"}


def test_cohort_tree_lends_from_every_level():
    r = run("cohort-hierarchy.yaml")
    assert [(e["job"], e["borrowing"]) for e in r.events("Admitted", at=0.0)] == [("a/a-1", True)]
    assert r.last_pending_message("a/a-2") == (
        MSG + "insufficient quota for cpu in flavor default, previously considered podsets requests (0) + "
        "current podset request (5) > maximum capacity (4)"
    )
    # cq-b, under its nominal quota, reclaims across the tree from cq-a, which borrows
    assert r.preempted_at(10.0) == [("a/a-1", "InCohortReclamation")]
    assert [(e["job"], e["borrowing"]) for e in r.events("Admitted", at=10.0)] == [("b/b-1", False)]


def test_borrowing_limit_caps_what_a_queue_may_borrow():
    r = run("borrowing-limit.yaml")
    assert [(e["job"], e["borrowing"]) for e in r.events("Admitted")] == [("a/a-1", True)]
    assert r.final_pending() == {
        "a/a-2": MSG + "insufficient unused quota for cpu in flavor default, 1 more needed",
        "a/a-3": MSG + "insufficient quota for cpu in flavor default, previously considered podsets requests (0) + "
        "current podset request (4) > maximum capacity (3)",
    }


def test_lending_limit_caps_what_a_queue_lends():
    r = run("lending-limit.yaml")
    assert [(e["job"], e["borrowing"]) for e in r.events("Admitted")] == [("a/a-1", True), ("b/b-1", False)]
    assert r.final_pending() == {
        "a/a-2": MSG + "insufficient quota for cpu in flavor default, previously considered podsets requests (0) + "
        "current podset request (4) > maximum capacity (3)",
        "b/b-2": MSG + "insufficient unused quota for cpu in flavor default, 1 more needed",
    }


def test_lent_quota_is_reclaimed_by_its_owner():
    r = run("lending-limit-reclaim.yaml")
    assert r.preempted_at(10.0) == [("a/a-1", "InCohortReclamation")]
    assert r.admitted_at(10.0) == ["b/b-2"]
    assert r.final["usage"] == {"team-a": {}, "team-b": {"default": {"cpu": "4"}}}
