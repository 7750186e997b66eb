"""Pending messages (QuotaReserved=False) are written only for Workloads that stay pending: once
a Workload has waited `pending_message_delay`, with the engine's latest message, and not while
creations, admissions or releases wait for a connection (issue 16; Kueue writes one at the first
evaluation - docs/controller.md)."""

import asyncio
import copy
import dataclasses

from gpuqueue.extender.controller.core import workload as W
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


async def _b_waits_behind_a(h: Harness, delay: float, **options) -> list[str]:
    """gpu-job-a admitted, gpu-job-b submitted with no room left (its Workload created): the
    pending messages written for b from then on."""
    objects, jobs, later = scenario("together-quota.yaml")
    for obj in objects:
        await h.apply(obj)
    await h.controller(dataclasses.replace(FAST, pending_message_delay=delay, **options))
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


async def test_no_pending_message_is_written_while_other_writes_wait_for_a_connection():
    """One connection, held by a Workload creation while another creation waits for it: the API
    is behind, so b's due message waits too - and is written once the creations went."""
    async with Harness() as h:
        seen = await _b_waits_behind_a(h, 0.5, concurrency=1)
        gate = asyncio.Event()
        held = h.api.faults.add(r"/namespaces/default/workloads$", method="POST", hold=gate)
        _, _, later = scenario("together-quota.yaml")
        for name in ("gpu-job-c", "gpu-job-d"):
            job = copy.deepcopy(later[0])
            job["metadata"]["name"] = name
            await h.submit(job)
        await eventually(lambda: held.hits == 1, what="c's creation holding the one connection")
        await asyncio.sleep(1.2)  # b's message is due after 0.5 s
        assert seen == [] and W.condition(h.workload_of("default", "gpu-job-b"), "QuotaReserved") is None
        # not even queued behind them (withdraw finds no such call waiting; it would cancel one)
        assert not h.controllers[0].kube.withdraw("pending-message:default/gpu-job-b")
        gate.set()
        await eventually(lambda: seen, timeout=5, what="b's message once the creations went")
        assert h.workload_of("default", "gpu-job-c") is not None and h.workload_of("default", "gpu-job-d") is not None


async def test_a_job_made_again_under_a_deleted_ones_name_is_told_why_it_waits():
    """b deleted while its pending message waits for its delay, and a new b (another uid, the same
    name) submitted at once: the new Workload is told why it waits. (A namespace deleted and made
    again with the same Jobs did this on a real 1.36: the new Workload had no status at all.)"""
    async with Harness() as h:
        seen = await _b_waits_behind_a(h, 1.0)
        first = h.job("default", "gpu-job-b")
        h.api.cluster.delete(R.JOBS, "default", "gpu-job-b", grace_period=0)
        await eventually(lambda: h.workload_of("default", "gpu-job-b") is None, what="b's Workload gone")
        _, _, later = scenario("together-quota.yaml")
        await h.submit(later[0])
        await eventually(lambda: (h.job("default", "gpu-job-b") or {}).get("metadata", {}).get("uid")
                         not in (None, first["metadata"]["uid"]), what="the new b")
        await eventually(lambda: W.condition(h.workload_of("default", "gpu-job-b") or {}, "QuotaReserved"),
                         timeout=6, what="the new b's pending message")
        assert seen[-1].startswith("couldn't assign flavors to pod set main: insufficient unused quota")
