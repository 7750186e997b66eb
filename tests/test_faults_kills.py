"""The controller killed at the two points where the API's record is half-way through a decision,
then a new one started: after a Workload's admission is written and before its Job is unsuspended,
and after a victim's eviction is written and before its Job is suspended. The stand-in holds the
second write until the controller is dead, then drops it unhandled (it never reached the API)."""

from __future__ import annotations

import asyncio
import time

import pytest

from gpuqueue.extender.controller.core import workload as W
from tests.controller_support import eventually, job_key
from tests.faults_support import OPTS, FaultRun, assert_clean, baseline, converge, report


@pytest.mark.parametrize("held", [1, 6])
async def test_killed_between_admission_and_unsuspend(held):
    target = await baseline()
    async with FaultRun() as run:
        h, flame, faults = run.h, run.flame, run.h.api.faults
        gate = asyncio.Event()
        hold = faults.add(r"/jobs/[^/]+$", method="PATCH", hold=gate, times=held)  # the unsuspend write
        first = await h.controller(OPTS, identity="first")
        for job in flame.jobs:
            await h.submit(job)
        await eventually(lambda: hold.hits == held, what="unsuspends held")
        await asyncio.sleep(0.1)
        between = [k for k in flame.keys if W.is_true(h.workload_of(*k), "Admitted") and not h.running(*k)]
        assert len(between) >= held  # admission written, Job still suspended
        await h.kill(first)
        gate.set()  # the held writes arrive after their client died: never handled
        await asyncio.sleep(0.1)
        assert all(not h.running(*k) for k in between)
        restarted = time.monotonic()
        await h.controller(OPTS, identity="second")
        await flame.borrow_done()
        borrow_s = time.monotonic() - restarted
        await flame.reclaim()
        await flame.resume()
        took = await converge(h, target)
        report(f"kill between admission and unsuspend (held {held})", h, between=len(between),
               running_after_restart_s=borrow_s, final_converge_s=took)
        assert_clean(run)


async def test_killed_between_eviction_and_suspend():
    target = await baseline()
    async with FaultRun() as run:
        h, flame, faults = run.h, run.flame, run.h.api.faults
        first = await h.controller(OPTS, identity="first")
        await flame.borrow()
        gate = asyncio.Event()
        # the suspends; a Job's stop on one of its events may send a second one of the same Job
        hold = faults.add(r"/namespaces/team-c/jobs/[^/]+$", method="PATCH", hold=gate, times=100)
        for job in flame.later:
            await h.submit(job)
        await eventually(lambda: len(set(hold.paths)) == 2, what="both victims' suspensions held")
        await asyncio.sleep(0.1)
        c_keys = [k for k in flame.keys if k[0] == "team-c"]
        between = [k for k in c_keys if W.is_true(h.workload_of(*k), "Evicted") and h.running(*k)]
        assert len(between) == 2  # eviction written, Jobs still running, their quota still reserved
        assert all(W.is_true(h.workload_of(*k), "QuotaReserved") for k in between)
        # only those that fit without the victims (under load, their starts may still be on the way)
        await eventually(lambda: sum(h.running(*k) for k in flame.a_keys) >= 2, what="A's two that fit running")
        assert sum(h.running(*k) for k in flame.a_keys) == 2
        await h.kill(first)
        gate.set()
        await asyncio.sleep(0.1)
        assert all(h.running(*k) for k in between)
        restarted = time.monotonic()
        await h.controller(OPTS, identity="second")
        await flame.reclaimed()
        reclaim_s = time.monotonic() - restarted
        assert {k for k in c_keys if not h.running(*k)} == set(between)  # the same victims, no others
        await flame.resume()
        took = await converge(h, target)
        report("kill between eviction and suspend", h, reclaimed_after_restart_s=reclaim_s, final_converge_s=took)
        assert_clean(run)
