"""The race the long profile of tests/test_invariants_pods.py found once (seed 1127): a victim's
owner starts it again right after the controller suspended it, while the extender's Workload cache
has not yet seen the eviction. The controller must not give the reservation back while a pod of
that workload can still be let onto a node; here the Workload watch is held back (a watch that
lags, as a busy API server's does) from the eviction on, so the order is the same every run."""

from __future__ import annotations

import asyncio

from gpuqueue.extender.controller import kinds as K
from tests.controller_support import Harness, eventually
from tests.pod_invariant import PodInvariant
from tests.standin import resources as R
from tests.test_invariants_pods import Loop, job, world


def hold_watch(informer) -> asyncio.Event:
    """Events of `informer`'s watch wait (in order) until the returned Event is set."""
    gate = asyncio.Event()
    apply = informer._apply

    async def lagging(type_: str, obj: dict) -> None:
        await gate.wait()
        await apply(type_, obj)

    informer._apply = lagging
    return gate


def running_pods(h: Harness, ns: str, name: str) -> list[dict]:
    return [p for p in h.api.cluster.list(R.PODS, ns)["items"] if (p["metadata"].get("labels") or {}).get("job-name") == name
            and p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


async def test_a_victim_started_again_while_the_eviction_is_unseen_runs_no_pod_without_its_reservation():
    async with Harness() as h:
        invariant = PodInvariant(h.api.cluster)
        for obj in world():
            await h.apply(obj)
        loop = Loop(h)
        await loop.start_controller()
        loop.scheduler.start()
        try:
            await h.submit(job("team-c", "borrower", 2, 2, 2))  # 4 GPUs borrowed from team-a
            await eventually(lambda: len(running_pods(h, "team-c", "borrower")) == 2, 10, "the borrower runs")

            gate = hold_watch(loop.ctl.informers["workloads"])
            await h.submit(job("team-a", "owner", 2, 2, 2))  # team-a reclaims its 4 GPUs
            await eventually(lambda: h.job("team-c", "borrower")["spec"].get("suspend") is True
                             and not running_pods(h, "team-c", "borrower"), 10, "the borrower is suspended")
            await asyncio.sleep(1.0)  # time for a controller that does not wait to give the quota back
            jobs_gate = hold_watch(loop.ctl.informers["jobs"])  # nor does it see the owner's edit at once
            await h.edit(K.JOBS, "team-c", "borrower", lambda j: j["spec"].update(suspend=False))  # its owner
            await asyncio.sleep(1.0)  # the job controller makes pods; the scheduler asks the lagging cache
            gate.set()
            jobs_gate.set()
            await eventually(lambda: any(running_pods(h, "team-a", "owner")), 15, "the reclaimer runs")
            await asyncio.sleep(1.0)
        finally:
            await loop.scheduler.stop()
        invariant.check("at the end")
        assert invariant.violations == [], "\n".join(invariant.violations[:10])
