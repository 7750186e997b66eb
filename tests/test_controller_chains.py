"""Writes chained per Workload: each waits for the one before it, whatever that one's outcome,
but when the replica stops leading none of them runs any more (a controller killed half-way
through a decision must not write the rest of it afterwards)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.extender.controller.actions import Actions
from gpuqueue.extender.controller.options import Options


def _actions() -> Actions:
    return Actions(SimpleNamespace(kube=None, leader=True, options=Options()))


async def test_a_write_runs_after_the_one_before_it_failed():
    actions, ran = _actions(), []


    async def first():
        await asyncio.sleep(0.01)
        ran.append("first")
        raise ApiException(status=404, reason="Not Found")  # permanent: given up, not retried

    async def second():
        ran.append("second")

    actions.chain("k", first)
    await actions.chain("k", second)
    assert ran == ["first", "second"]


async def test_stopping_cancels_the_writes_waiting_behind_a_stuck_one():
    actions, ran = _actions(), []
    stuck = asyncio.Event()

    async def first():
        await stuck.wait()  # a request the API never answers
        ran.append("first")

    async def second():
        ran.append("second")

    actions.chain("k", first)
    actions.chain("k", second)
    await asyncio.sleep(0.01)
    actions.ctl.leader = False
    await actions.cancel_all()
    stuck.set()
    await asyncio.sleep(0.05)
    assert ran == []
