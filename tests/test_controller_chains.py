"""Writes chained per Workload: each waits for the one before it, whatever that one's outcome,
but when the replica stops leading none of them runs any more (a controller killed half-way
through a decision must not write the rest of it afterwards)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.extender.controller.options import Options
from gpuqueue.extender.controller.writes.writes import Writes


def _writes(ctl: SimpleNamespace) -> Writes:
    return Writes(lambda: ctl.leader, Options())


async def test_a_write_runs_after_the_one_before_it_failed():
    ctl = SimpleNamespace(leader=True)
    writes, ran = _writes(ctl), []


    async def first():
        await asyncio.sleep(0.01)
        ran.append("first")
        raise ApiException(status=404, reason="Not Found")  # permanent: given up, not retried

    async def second():
        ran.append("second")

    writes.chain("k", first)
    await writes.chain("k", second)
    assert ran == ["first", "second"]


async def test_stopping_cancels_the_writes_waiting_behind_a_stuck_one():
    ctl = SimpleNamespace(leader=True)
    writes, ran = _writes(ctl), []
    stuck = asyncio.Event()

    async def first():
        await stuck.wait()  # a request the API never answers
        ran.append("first")

    async def second():
        ran.append("second")

    writes.chain("k", first)
    writes.chain("k", second)
    await asyncio.sleep(0.01)
    ctl.leader = False
    await writes.cancel_all()
    stuck.set()
    await asyncio.sleep(0.05)
    assert ran == []
