"""Random 500s (and 429s) on a fraction of the controller's requests - reads, writes, list and
watch alike - for the whole FLAME walkthrough: the record never goes over quota, no Job is lost,
and once the faults stop the API holds what a fault-free run leaves."""

from __future__ import annotations

import time

import pytest

import os

from tests.faults_support import OPTS, FaultRun, assert_clean, baseline, converge, report


RATE = float(os.environ.get("FAULT_RATE", "0"))  # overrides the rates below, for longer runs by hand


@pytest.mark.parametrize("seed,rate", [(1, 0.2), (2, 0.2), (3, 0.35)])
async def test_random_server_errors_during_flame(seed, rate):
    target = await baseline()
    async with FaultRun() as run:
        h, faults = run.h, run.h.api.faults
        faults.seed(seed)
        faults.add("", status=500, rate=RATE or rate, times=10**9)  # every kind of request
        faults.add("", status=429, rate=0.05, times=10**9)
        await h.controller(OPTS)
        await run.flame.borrow()
        await run.flame.reclaim()
        await run.flame.resume()
        faults.clear()
        stopped = time.monotonic()
        took = await converge(h, target)
        report(f"500s rate {RATE or rate} seed {seed}", h, converge_s=took, after_stop_s=time.monotonic() - stopped)
        assert faults.injected["500"] >= 10
        assert_clean(run)
