"""Waits for a Job to stop (its pods gone) are woken by every change of the Job, each of them."""

import asyncio

from gpuqueue.extender.controller.writes.jobs import JobSteering


def steering() -> JobSteering:
    return JobSteering(sched=None, kube=None, informers={}, workloads=None, writes=None, events=None,
                       admission_wait=None, resubmit=lambda st: None, mark_dirty=lambda: None,
                       resubmit_backoff=1.0, owners=object())


async def test_a_wait_is_woken_after_another_wait_on_the_same_job_ended():
    # e.g. an eviction's wait for a victim's pods beside a stop's wait for the same Job
    js = steering()
    done = {"eviction": False, "stop": False}
    eviction = asyncio.create_task(js._wait_until("uid-1", lambda: done["eviction"]))
    stop = asyncio.create_task(js._wait_until("uid-1", lambda: done["stop"]))
    await asyncio.sleep(0.01)
    done["eviction"] = True
    js.poke("uid-1")
    await asyncio.wait_for(eviction, 0.2)
    done["stop"] = True
    js.poke("uid-1")
    # woken by the poke, not by the once-a-second look that catches a missed one
    await asyncio.wait_for(stop, 0.2)
    assert js._waiters == {}
