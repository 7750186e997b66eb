"""ClusterQueue and LocalQueue status, and the queue gauges on /metrics, stay current while the API
server is behind: their writes give way to creations for `status_max_delay` only (to admissions and
releases always); the gauges cost no request and are brought up to the engine when /metrics is read.

(Found in bench/kueue_realtime.py baseline with the real-1.24 cost model: one status write per
queue in a 350 s run, so `kubectl get clusterqueues` and the gauges showed one moment of the run
until its end.)"""

from __future__ import annotations

import asyncio
import copy
import dataclasses

from gpuqueue.extender.controller.serving.ops import start_ops
from tests.controller_support import FAST, Harness, eventually, scenario
from tests.metrics_support import scrape, Scrape

CQ = "gpu-cluster-queue"
BACKLOG = 30  # Jobs whose Workload creations, 0.15 s each on one connection, keep the API behind ~4.5 s


async def _behind(h: Harness, **options):
    """gpu-job-a admitted on a quiet API; then BACKLOG Jobs that cannot fit, whose Workload
    creations queue for the controller's one connection. Returns (controller, Workload count)."""
    objects, jobs, later = scenario("together-quota.yaml")
    for obj in objects:
        await h.apply(obj)
    ctl = await h.controller(dataclasses.replace(FAST, concurrency=1, **options))
    await h.submit(jobs[0])
    await eventually(lambda: (h.cluster_queue(CQ).get("status") or {}).get("admittedWorkloads") == 1,
                     what="a admitted and shown")
    h.api.faults.add(r"/namespaces/default/workloads$", method="POST", delay=0.15, times=10_000)
    for i in range(BACKLOG):
        job = copy.deepcopy(later[0])
        job["metadata"]["name"] = f"gpu-job-{i}"
        await h.submit(job)

    def created() -> int:
        return sum(1 for i in range(BACKLOG) if h.workload_of("default", f"gpu-job-{i}") is not None)
    return ctl, created


async def test_cluster_queue_status_is_written_while_creations_keep_the_api_behind():
    async with Harness() as h:
        _, created = await _behind(h, status_max_delay=0.5)
        shown: list[int] = []
        for _ in range(200):
            if created() >= BACKLOG:
                break
            pending = (h.cluster_queue(CQ).get("status") or {}).get("pendingWorkloads") or 0
            if pending and pending not in shown:
                shown.append(pending)
            await asyncio.sleep(0.02)
        # written at least twice while creations still waited, each time nearer the engine's count
        assert len(shown) >= 2 and shown == sorted(shown), shown
        await eventually(lambda: (h.cluster_queue(CQ).get("status") or {}).get("pendingWorkloads") == BACKLOG,
                         what="every pending Workload shown once the API caught up")


async def test_queue_gauges_follow_the_engine_while_the_status_write_waits():
    async with Harness() as h:
        ctl, created = await _behind(h, status_max_delay=60.0)  # the status write waits out the backlog
        ops = await start_ops(ctl, "127.0.0.1", 0, metrics_auth=None)
        url = f"http://127.0.0.1:{ops.addresses[0][1]}/metrics"

        async def pending() -> int:
            status, text = await scrape(url)
            assert status == 200, text
            m = Scrape(text)
            return int(sum(m.value("kueue_pending_workloads", cluster_queue=CQ, status=s) or 0
                           for s in ("active", "inadmissible")))

        try:
            await eventually(lambda: created() > 0, what="the first creation through")
            before = await pending()
            assert before > 0
            await h.finish_job("default", "gpu-job-a")  # its quota goes to one of the pending Jobs
            seen = before
            while created() < BACKLOG - 5 and seen == before:
                seen = await pending()
                await asyncio.sleep(0.05)
            assert seen == before - 1, f"the gauge showed {seen} pending ({before} before a finished), " \
                                       f"{created()} of {BACKLOG} Workloads created"
            assert not (h.cluster_queue(CQ).get("status") or {}).get("pendingWorkloads")  # its write still waits
        finally:
            await ops.cleanup()


async def test_a_batch_that_failed_in_part_ends_before_the_next_so_no_older_status_lands_last():
    """One batch: the ClusterQueue's write refused (422), the LocalQueue's held by the server. A
    second Job is admitted meanwhile. The held write, once let go, must not land after the next
    batch's: the LocalQueue would show 1 admitted Workload after it showed the 2 it has."""
    from tests.standin import resources as R

    async with Harness() as h:
        objects, jobs, _ = scenario("together-quota.yaml")
        for obj in objects:
            await h.apply(obj)
        written: list[int] = []
        h.api.observe(lambda w: written.append((w.new.get("status") or {}).get("admittedWorkloads", 0))
                      if w.resource is R.LOCAL_QUEUES and w.subresource == "status" else None)
        await h.controller()
        await eventually(lambda: written, what="the LocalQueue's first status")
        gate = asyncio.Event()
        held = h.api.faults.add(r"/localqueues/gpu-queue/status$", method="PATCH", hold=gate)
        refused = h.api.faults.add(r"/clusterqueues/gpu-cluster-queue/status$", method="PATCH", status=422)
        small = copy.deepcopy(jobs[0])
        small["spec"]["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}}
        for name in ("one", "two"):
            job = copy.deepcopy(small)
            job["metadata"]["name"] = name
            await h.submit(job)
            if name == "one":
                await eventually(lambda: held.hits == 1 and refused.hits == 1, what="the first batch's two writes")
        await eventually(lambda: h.running("default", "two"), what="two admitted")
        await asyncio.sleep(0.3)  # later batches, if any, have had their turn
        gate.set()
        await eventually(lambda: written[-1] == 2, what="the LocalQueue showing both")
        await asyncio.sleep(0.3)
        seen = [n for n in written if n]
        assert seen == sorted(seen), written
