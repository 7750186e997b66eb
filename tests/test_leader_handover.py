"""A leader that shuts down cleanly releases its Lease (client-go's ReleaseOnCancel); the other
replica must take it at once, not a whole retry period later: issue 36 asks a SIGTERM to hand over,
first write included, within 2 s, with the shipped timings (15 s / 10 s / 2 s)."""

from __future__ import annotations

import asyncio
import time

from gpuqueue.extender.controller.leadership.leader import LeaderElector
from tests.controller_support import Harness, eventually


async def test_a_released_lease_is_taken_within_half_a_second_with_the_shipped_timings():
    async with Harness() as h:
        await h.namespace("gpuqueue-system")
        started: dict[str, float] = {}

        def elector(name: str) -> LeaderElector:
            async def on_started():
                started[name] = time.monotonic()

            async def on_stopped():
                pass
            return LeaderElector(h.kube, namespace="gpuqueue-system", name="gpuqueue-extender", identity=name,
                                 on_started=on_started, on_stopped=on_stopped)

        first = asyncio.create_task(elector("a").run())
        await eventually(lambda: "a" in started, what="a leads")
        second = asyncio.create_task(elector("b").run())
        await asyncio.sleep(0.1)  # b has read the Lease: held by a
        released = time.monotonic()
        first.cancel()  # a clean shutdown: the Lease is released
        try:
            await eventually(lambda: "b" in started, timeout=5, what="b leads")
            assert started["b"] - released < 0.7, started["b"] - released
        finally:
            second.cancel()
            for t in (first, second):
                try:
                    await t
                except (asyncio.CancelledError, Exception):
                    pass
