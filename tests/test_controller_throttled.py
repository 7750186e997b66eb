"""A write the API server throttles (429 Too Many Requests, from priority and fairness or
max-in-flight) is made again no sooner than the Retry-After the server gave (issue 16: the retry
came after 50 ms whatever the server said)."""

import time

from tests.controller_support import Harness, eventually, scenario


async def test_a_throttled_write_waits_the_retry_after_the_server_gave():
    objects, jobs, _ = scenario("together-quota.yaml")
    async with Harness() as h:
        for obj in objects:
            await h.apply(obj)
        await h.controller()
        throttled = h.api.faults.add(r"/workloads$", method="POST", status=429, retry_after=1, times=1)
        started = time.monotonic()
        await h.submit(jobs[0])
        await eventually(lambda: h.workload_of("default", "gpu-job-a") is not None, what="the Workload created")
        waited = time.monotonic() - started
        assert throttled.hits == 1
        assert 1.0 <= waited < 3.0
        await eventually(lambda: h.running("default", "gpu-job-a"), what="admitted after all")
