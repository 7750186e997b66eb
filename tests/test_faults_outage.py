"""The API server unreachable for a while (its port closed: connection refused), then back on the
same port with the same store, while the controller keeps running: 2.5 s (longer than the
controller's write retries used to last and than its scaled watch backoff) and the full 30 s
(longer than the Lease's renew deadline, 10 s, and its duration, 15 s: the leader stops
leading, and leads again once the API is back)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from tests.controller_support import eventually
from tests.faults_support import OPTS, FaultRun, assert_clean, baseline, converge, report

DOWN = 2.5  # seconds


async def outage(api, seconds: float) -> float:
    port = api.port
    await api.stop()
    await asyncio.sleep(seconds)
    await api.start(port=port)
    return time.monotonic()


async def _leader_after(ctl, seconds: float) -> bool:
    await asyncio.sleep(seconds)
    return ctl.leader


@pytest.mark.parametrize("when, down", [("borrow", DOWN), ("reclaim", DOWN), ("reclaim", 30.0)])
async def test_api_unreachable_then_back(when, down):
    target = await baseline()
    async with FaultRun() as run:
        h, flame = run.h, run.flame
        # as deployed (--leader-elect), with the Lease's own timings: 15 s duration, 10 s deadline
        ctl = await h.controller(dataclasses.replace(OPTS, leader_elect=True, retry_period=0.2))
        await eventually(lambda: ctl.ready and ctl.leader, what="leading")
        if when == "borrow":
            for job in flame.jobs:
                await h.submit(job)
            await asyncio.sleep(0.02)  # the controller is writing its first admissions
            back = await outage(h.api, down)
            await flame.borrow_done()
            phase_s = time.monotonic() - back
            await flame.reclaim()
        else:
            await flame.borrow()
            for job in flame.later:
                await h.submit(job)
            await asyncio.sleep(0.02)  # evictions under way
            leading_late_in_outage = asyncio.create_task(_leader_after(ctl, down - 1.0))
            back = await outage(h.api, down)
            if down > ctl.options.renew_deadline:
                assert await leading_late_in_outage is False, "the leader kept leading with no Lease renewed"
            await flame.reclaimed()
            phase_s = time.monotonic() - back
        await flame.resume()
        took = await converge(h, target)
        report(f"outage {down}s during {when}", h, phase_done_after_back_s=phase_s, final_converge_s=took,
               watch_restarts=sum(i.watch_starts for i in ctl.informers.values()))
        assert_clean(run)
        assert ctl.ready and ctl.leader
