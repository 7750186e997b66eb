"""The API server unreachable for a while (its port closed: connection refused), then back on the
same port with the same store, while the controller keeps running. The scaled stand-in for "30 s
down": longer than the controller's write retries used to last and than its watch backoff."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults_support import OPTS, FaultRun, assert_clean, baseline, converge, report

DOWN = 2.5  # seconds


async def outage(api, seconds: float) -> float:
    port = api.port
    await api.stop()
    await asyncio.sleep(seconds)
    await api.start(port=port)
    return time.monotonic()


@pytest.mark.parametrize("when", ["borrow", "reclaim"])
async def test_api_unreachable_then_back(when):
    target = await baseline()
    async with FaultRun() as run:
        h, flame = run.h, run.flame
        ctl = await h.controller(OPTS)
        if when == "borrow":
            for job in flame.jobs:
                await h.submit(job)
            await asyncio.sleep(0.02)  # the controller is writing its first admissions
            back = await outage(h.api, DOWN)
            await flame.borrow_done()
            phase_s = time.monotonic() - back
            await flame.reclaim()
        else:
            await flame.borrow()
            for job in flame.later:
                await h.submit(job)
            await asyncio.sleep(0.02)  # evictions under way
            back = await outage(h.api, DOWN)
            await flame.reclaimed()
            phase_s = time.monotonic() - back
        await flame.resume()
        took = await converge(h, target)
        report(f"outage {DOWN}s during {when}", h, phase_done_after_back_s=phase_s, final_converge_s=took,
               watch_restarts=sum(i.watch_starts for i in ctl.informers.values()))
        assert_clean(run)
        assert ctl.ready
