"""Pending messages (QuotaReserved=False) are written only for Workloads that stay pending: once
a Workload has waited `pending_message_delay`, with the engine's latest message, and not while
creations, admissions or releases wait for a connection (issue 16; Kueue writes one at the first
evaluation - docs/controller.md)."""

import asyncio
import dataclasses

from gpuqueue.extender.controller import workload as W
from tests.controller_support import FAST, Harness, eventually, scenario
from tests.standin import resources as R


def _pending_writes(h: Harness, name_part: str) -> list[str]:
    """The messages of QuotaReserved=False that writes to the Workloads of a Job put in the record."""
    seen: list[str] = []

    def observe(write) -> None:
        if write.resource is not R.WORKLOADS or name_part not in write.name:
            return
        c, before = W.condition(write.new, "QuotaReserved"), W.condition(write.old or {}, "QuotaReserved")
        if c is not None and c.get("status") == "False" and c != before:
            seen.append(c["message"])

    h.api.observe(observe)
    return seen


async def _b_waits_behind_a(h: Harness, delay: float) -> list[str]:
    """gpu-job-a admitted, gpu-job-b submitted with no room left (its Workload created): the
    pending messages written for b from then on."""
    objects, jobs, later = scenario("together-quota.yaml")
    for obj in objects:
        await h.apply(obj)
    await h.controller(dataclasses.replace(FAST, pending_message_delay=delay))
    await h.submit(jobs[0])
    await eventually(lambda: h.running("default", "gpu-job-a"), what="a admitted")
    seen = _pending_writes(h, "gpu-job-b")
    await h.submit(later[0])
    await eventually(lambda: h.workload_of("default", "gpu-job-b") is not None, what="b's Workload")
    return seen


async def test_a_workload_that_stays_pending_is_told_why_once_it_waited():
    async with Harness() as h:
        seen = await _b_waits_behind_a(h, 1.0)
        await asyncio.sleep(0.6)
        assert W.condition(h.workload_of("default", "gpu-job-b"), "QuotaReserved") is None  # not yet: it waits
        await eventually(lambda: seen, timeout=5, what="b's pending message")
        assert seen == ["couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                        "flavor gpu-flavor, 4 more needed"]
        await asyncio.sleep(1.5)
        assert len(seen) == 1  # the same message is not written again


async def test_a_workload_admitted_before_the_delay_never_shows_a_pending_message():
    async with Harness() as h:
        seen = await _b_waits_behind_a(h, 1.5)
        await h.finish_job("default", "gpu-job-a")  # a's quota comes back within b's delay
        await eventually(lambda: h.running("default", "gpu-job-b"), what="b admitted")
        await asyncio.sleep(1.5)
        assert seen == []
        assert W.is_true(h.workload_of("default", "gpu-job-b"), "QuotaReserved")
