"""A victim's reservation is cleared only once a live list shows its pods gone; that list asks the
API for the Job's own pods by its selector, not for every pod of the namespace (issue 16)."""

import asyncio
from urllib.parse import parse_qs, urlsplit

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from tests.controller_support import Harness, eventually
from tests.faults_support import OPTS, FaultRun
from tests.metrics_support import flame_reclaimed


async def test_the_victims_pods_are_listed_by_their_jobs_selector():
    async with Harness(pod_deletion_delay=0.05) as h:
        _, _, c_keys = await flame_reclaimed(h)
        lists = [urlsplit(path) for method, path in h.api.requests
                 if method == "GET" and urlsplit(path).path == "/api/v1/namespaces/team-c/pods"]
        assert lists, "the victims' pods were confirmed gone by a live list"
        selectors = {h.job(*k)["spec"]["selector"]["matchLabels"]["controller-uid"] for k in c_keys}
        for url in lists:
            (query,) = parse_qs(url.query)["labelSelector"]
            key, _, uid = query.partition("=")
            assert key == "controller-uid" and uid in selectors, url
        assert h.pods.violations == [] and h.observer.violations == []


async def test_a_victim_is_suspended_once_though_its_job_changes_meanwhile():
    """Kueue suspends a Job that runs without its reservation on every event of it; while a
    victim's suspension is on the wire, the events that come meanwhile wait for it rather than
    send their own (two at once carry the same resourceVersion: one is refused with 409 and read
    again, a request and a read the real server charges as much as a write)."""
    async with FaultRun() as run:
        h, flame, faults = run.h, run.flame, run.h.api.faults
        await h.controller(OPTS)
        await flame.borrow()
        gate = asyncio.Event()
        hold = faults.add(r"/namespaces/team-c/jobs/[^/]+$", method="PATCH", hold=gate, times=1)
        for job in flame.later:
            await h.submit(job)
        await eventually(lambda: hold.hits == 1, what="a victim's suspension on the wire")
        (victim,) = [k for k in flame.keys if k[0] == "team-c"
                     and W.is_true(h.workload_of(*k), "Evicted") and h.running(*k)]
        path = f"/apis/batch/v1/namespaces/{victim[0]}/jobs/{victim[1]}"
        sent = len(h.api.requests)
        for n in range(3):  # its owner's edits: each an event of the running Job
            await h.edit(K.JOBS, *victim, lambda job, n=n: job["metadata"].setdefault("annotations", {}).update(
                {"example.com/touched": str(n)}))
            await asyncio.sleep(0.2)
        assert [r for r in h.api.requests[sent:] if r == ("PATCH", path)] == []
        assert h.running(*victim)
        gate.set()
        await flame.reclaimed()
        assert not h.running(*victim)
        assert h.pods.violations == [] and h.observer.violations == []
