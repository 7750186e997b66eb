"""Minimal fault histories that broke the controller once, kept as regression tests."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from tests.faults_support import OPTS, FaultRun, assert_clean, baseline, converge, report
from tests.standin import resources as R
from tests.controller_support import eventually


async def test_victim_suspension_failing_longer_than_the_retries():
    """The API answers 500 to every write of team-c's Jobs for longer than the controller's
    retries last, just as A reclaims: the victims' suspensions must not be given up (that left
    them running on reclaimed quota and A's jobs waiting forever)."""
    target = await baseline()
    async with FaultRun() as run:
        h, faults = run.h, run.h.api.faults
        await h.controller(OPTS)
        await run.flame.borrow()
        faults.add(r"/namespaces/team-c/jobs/", method="PATCH", status=500, times=10**9)
        for job in run.flame.later:
            await h.submit(job)
        await asyncio.sleep(2.0)  # the retries of OPTS last under a second
        faults.clear()
        stopped = time.monotonic()
        await run.flame.reclaimed()
        await run.flame.resume()
        took = await converge(h, target)
        report("victim suspension refused 2 s", h, converge_s=took, after_stop_s=time.monotonic() - stopped)
        assert_clean(run)


async def test_a_victim_suspension_given_up_never_lets_the_preemptor_in():
    """With bounded retries (write_retries=2) the same fault makes the controller give the
    victims' suspensions up. It used to count a given-up release as done and write A's
    admissions anyway: the cohort's record showed 10 of 8 GPUs. A release given up is now
    abandoned: the two of A that need them wait, the record stays within quota."""
    async with FaultRun() as run:
        h, faults = run.h, run.h.api.faults
        ctl = await h.controller(dataclasses.replace(OPTS, write_retries=2))
        await run.flame.borrow()
        faults.add(r"/namespaces/team-c/jobs/", method="PATCH", status=500, times=10**9)
        for job in run.flame.later:
            await h.submit(job)
        await eventually(lambda: faults.injected["500"] >= 4, what="both victims' suspensions refused twice")
        await ctl.writes.idle()
        faults.clear()
        await asyncio.sleep(0.3)
        assert sum(h.running(*k) for k in run.flame.a_keys) == 2  # the two that fit the free GPUs
        assert all(h.running(*k) for k in run.flame.keys)
        assert_clean(run)


async def test_victim_reservation_kept_while_the_pods_watch_lags():
    """The pods watch stalls while C's pods are created, so the controller's pod cache has never
    seen them. 1.24's job controller drops `status.active` to 0 as soon as it marks the pods
    for deletion, so "suspended, not active, no pods in the cache" held at once and the victims'
    reservations were cleared while their pods still ran (pods without a reservation for the
    pod deletion delay: GPUs used twice). The reservation now stays until a live list of the
    Job's pods comes back empty."""
    target = await baseline()
    async with FaultRun(pod_deletion_delay=0.3) as run:
        h, faults = run.h, run.h.api.faults
        await h.controller(OPTS)
        gate = asyncio.Event()
        await eventually(lambda: h.api.open_watches >= 11, what="watches open")
        stalled = faults.add(r"/pods$", watch=True, hold=gate, times=1)
        h.api.drop_watches(R.PODS)  # the pods watch reconnects into the stall
        await eventually(lambda: stalled.hits == 1, what="pods watch stalled")
        await run.flame.borrow()
        for job in run.flame.later:
            await h.submit(job)
        await asyncio.sleep(1.0)
        gate.set()
        await run.flame.reclaimed()
        await run.flame.resume()
        took = await converge(h, target)
        report("pods watch lagging during reclaim", h, converge_s=took)
        assert_clean(run)


async def test_readmission_while_the_workloads_watch_lags_behind_the_eviction():
    """The Workloads watch stalls before A reclaims, so the controller's cache never sees C's
    victims evicted (Evicted=True, then the reservation cleared): it still shows them admitted
    to group-c. When A finishes, the engine gives the victims the same admission again; judged
    on that stale cache the Workload write looked like a no-op and was skipped, while the Job
    (whose watch was fine) was unsuspended: a Job running on a Workload that says Evicted and
    holds no reservation, for good. A write found needless on a cached object is now checked
    against a live read."""
    target = await baseline()
    async with FaultRun() as run:
        h, faults = run.h, run.h.api.faults
        await h.controller(OPTS)
        await run.flame.borrow()
        gate = asyncio.Event()
        await eventually(lambda: h.api.open_watches >= 11, what="watches open")
        stalled = faults.add(r"/workloads$", watch=True, hold=gate, times=1)
        h.api.drop_watches(R.WORKLOADS)  # the workloads watch reconnects into the stall
        await eventually(lambda: stalled.hits == 1, what="workloads watch stalled")
        await run.flame.reclaim()
        await run.flame.resume()
        gate.set()
        took = await converge(h, target, timeout=5.0)
        report("workloads watch lagging through eviction and readmission", h, converge_s=took)
        assert_clean(run)
