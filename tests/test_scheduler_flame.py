"""The FLAME walkthrough (shared/examples/flame.yaml) placed by the stand-in scheduler with
kube-scheduler's queue (1.24's and the current one's), asking the extender over real TLS on the
controller's caches (issue 25): every admission - the first six Jobs, A's four after the reclaim,
C's two resumed - has its pod bound within 2 s (real time: nothing may wait on a backoff or the
unschedulable pods). On main, 1.24 parked pods the extender answered before its watch caught up
for the five-minute flush."""

from __future__ import annotations

from collections import defaultdict

import aiohttp
import pytest
from kubernetes_asyncio import client

from gpuqueue.extender.controller.controller import Controller
from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
from gpuqueue.extender.scheduler import app as extender_app
from tests.controller_support import FAST, Harness, eventually, job_key, scenario
from tests.extender_support import extender_cert_dir, scheduler_context
from tests.pod_invariant import PodInvariant
from tests.standin import resources as R
from tests.standin.schedqueue import VERSIONS, RealClock
from tests.standin.scheduler import Scheduler

WITHIN = 2.0  # seconds from a Workload's admission to its pod bound


class Admissions:
    """When each Job's Workload got its quota reservation (the scheduler's clock), every time."""

    def __init__(self, h: Harness, clock: RealClock) -> None:
        self.at: dict[str, list[float]] = defaultdict(list)  # job uid -> admission times
        self.clock = clock
        h.api.cluster.observers.append(self)

    def __call__(self, write) -> None:
        if write.resource != R.WORKLOADS:
            return
        if _reserved(write.new) and not _reserved(write.old or {}):
            for ref in write.new["metadata"].get("ownerReferences") or ():
                if ref.get("controller"):
                    self.at[ref["uid"]].append(self.clock.now())


def _reserved(wl: dict) -> bool:
    return any(c.get("type") == "QuotaReserved" and c.get("status") == "True"
               for c in (wl.get("status") or {}).get("conditions") or ())


@pytest.mark.parametrize("version", VERSIONS)
async def test_flame_pods_are_bound_within_two_seconds_of_their_admission(tmp_path, version):
    objects, jobs, later = scenario("flame.yaml")
    async with Harness(pod_deletion_delay=0.2) as h:
        invariant = PodInvariant(h.api.cluster)
        for obj in objects:
            await h.apply(obj)
        await h.namespace("gpuqueue-system")
        ctl = Controller(client.ApiClient(h.api.client_configuration()), FAST, identity="test")
        h.controllers.append(ctl)
        view = ControllerClusterView(ctl)
        await ctl.start()
        await ctl.wait_synced()
        cert_dir = extender_cert_dir(tmp_path)
        server = await extender_app.start(view, host="127.0.0.1", port=0, cert_dir=cert_dir)
        base = f"https://127.0.0.1:{server.addresses[0][1]}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=scheduler_context(cert_dir))) as session:
            async def extender(verb: str, body: bytes) -> bytes:
                async with session.post(f"{base}/{verb}", data=body, headers={"Content-Type": "application/json"}) as r:
                    return await r.read()

            scheduler = Scheduler(h.api.cluster, extender, version=version, clock=RealClock())
            admissions = Admissions(h, scheduler.clock)
            scheduler.start()
            try:
                await _walkthrough(h, jobs, later)
            finally:
                await scheduler.stop()
                await server.cleanup()
        delays = _bind_delays(h, admissions, scheduler)
        print(f"FLAME on {version}: {len(delays)} admissions, bound after (s): "
              f"{sorted(round(d, 3) for d in delays.values())}; {scheduler.attempts} attempts, "
              f"{scheduler.extender_errors} extender Errors")
        assert len(delays) == 12  # six Jobs, A's four, C's two resumed
        assert max(delays.values()) <= WITHIN, delays
        assert invariant.violations == []


async def _walkthrough(h: Harness, jobs: list[dict], later: list[dict]) -> None:
    keys = [job_key(j) for j in jobs]
    for job in jobs:
        await h.submit(job)
    await eventually(lambda: all(_bound_pods(h, *k) for k in keys), 30, "the six Jobs' pods bound")
    a_keys = [job_key(j) for j in later]
    for job in later:  # A reclaims its 4: two of C's Jobs are suspended
        await h.submit(job)
    await eventually(lambda: all(_bound_pods(h, *k) for k in a_keys), 30, "A's pods bound")
    for ns, name in a_keys:
        await h.finish_job(ns, name)
    await eventually(lambda: all(h.running(*k) and _bound_pods(h, *k) for k in keys), 30, "C's Jobs resumed and bound")


def _bound_pods(h: Harness, ns: str, name: str) -> list[dict]:
    return [p for p in h.api.cluster.list(R.PODS, ns)["items"]
            if (p["metadata"].get("labels") or {}).get("job-name") == name and p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")]


def _bind_delays(h: Harness, admissions: Admissions, scheduler: Scheduler) -> dict[tuple[str, int], float]:
    """(job uid, n-th admission) -> from that admission to the first pod of the Job bound after it."""
    binds: dict[str, list[float]] = defaultdict(list)
    for pod in h.api.cluster.store.kind(R.PODS.storage_key).values():
        owner = next((r["uid"] for r in pod["metadata"].get("ownerReferences") or () if r.get("controller")), None)
        if owner and pod["metadata"]["uid"] in scheduler.bound_at:
            binds[owner].append(scheduler.bound_at[pod["metadata"]["uid"]])
    out = {}
    for job_uid, times in admissions.at.items():
        for n, at in enumerate(times):
            after = [t for t in binds[job_uid] if t >= at]
            out[(job_uid, n)] = min(after) - at if after else float("inf")
    return out
