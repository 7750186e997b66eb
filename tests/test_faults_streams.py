"""Slow answers, watch streams that stall or are cut mid-stream, and watch history expiring (410),
all at random through the FLAME walkthrough."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.faults_support import OPTS, FaultRun, assert_clean, baseline, converge, report


@pytest.mark.parametrize("seed", [1, 2])
async def test_slow_answers_and_stalled_or_dropped_watches(seed):
    target = await baseline()
    rng = random.Random(seed)
    async with FaultRun() as run:
        h, faults, api = run.h, run.h.api.faults, run.h.api
        faults.seed(seed)
        faults.add("", watch=False, delay=0.15, rate=0.1, times=10**9)  # slow reads and writes
        faults.add("", watch=False, delay=0.03, rate=0.3, times=10**9)
        faults.add("", watch=True, stall_after=1, stall=0.4, rate=0.3, times=10**9)  # events arrive late
        faults.add("", watch=True, drop_after=2, rate=0.3, times=10**9)  # cut after two events
        cuts = {"dropped": 0, "compactions": 0}

        async def network():
            # besides the per-stream faults: now and then every open stream cut at once, or the
            # watch history forgotten (the next resume gets 410 Gone and relists)
            while True:
                await asyncio.sleep(rng.uniform(0.1, 0.4))
                if rng.random() < 0.5:
                    cuts["dropped"] += api.drop_watches()
                else:
                    api.compact()
                    cuts["compactions"] += 1

        await h.controller(OPTS)
        chaos = asyncio.create_task(network())
        try:
            await run.flame.borrow()
            await run.flame.reclaim()
            await run.flame.resume()
        finally:
            chaos.cancel()
        faults.clear()
        stopped = time.monotonic()
        took = await converge(h, target)
        report(f"streams seed {seed}", h, converge_s=took, after_stop_s=time.monotonic() - stopped, **cuts)
        assert faults.injected["drop"] >= 3 and faults.injected["stall"] >= 3 and faults.injected["delay"] >= 10
        assert_clean(run)
