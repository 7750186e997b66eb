"""Races the long profile of tests/test_invariants_pods.py found (seed 1127): a reservation given
back while a pod of its workload could still be let onto a node. The controller's watches are
held back (a watch that lags, as a busy API server's does) at the right moment, so the order is
the same every run; the oracle is tests/pod_invariant.py's, checked at every write."""

from __future__ import annotations

import asyncio

from gpuqueue.extender.controller.client import kinds as K
from tests.controller_support import Harness, eventually
from tests.standin import resources as R
from tests.test_invariants_pods import job, whole_loop


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
    """A victim's owner starts it again right after the controller suspended it, while the
    extender's Workload cache has not yet seen the eviction."""
    async with whole_loop() as (h, loop, invariant, liveness):
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
    assert invariant.violations == [], "\n".join(invariant.violations[:10])


async def test_a_job_its_owner_started_while_pending_runs_no_pod_after_its_refused_admission_gave_the_quota_back():
    """Its owner unsuspends a pending Job (allowed: no webhook here); its pods wait, refused by the
    extender. Quota frees, the reservation is written, and the extender lets the waiting pods in;
    then the API refuses the flavor's pod template (1.24: the Job has started) and the controller
    gives the quota back - which it may do only once those pods are gone."""
    def raise_quota(cq: dict) -> None:
        cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 4

    async with whole_loop() as (h, loop, invariant, liveness):
        await h.submit(job("team-b", "first", 1, 1, 2))  # team-b's 2 GPUs, and the cohort's other 4:
        await h.submit(job("team-a", "big", 2, 2, 2))
        await eventually(lambda: running_pods(h, "team-b", "first") and len(running_pods(h, "team-a", "big")) == 2,
                         10, "the cohort's 6 GPUs run")
        await h.submit(job("team-b", "second", 1, 1, 2))
        await eventually(lambda: "QuotaReserved" in str(h.workload_of("team-b", "second")), 10, "second pending")
        gate = hold_watch(loop.ctl.informers["jobs"])  # the controller does not see the owner's edit
        await h.edit(K.JOBS, "team-b", "second", lambda j: j["spec"].update(suspend=False))
        await eventually(lambda: [p for p in h.api.cluster.list(R.PODS, "team-b")["items"]
                                  if p["metadata"]["labels"].get("job-name") == "second"], 10, "its pod waits")
        # a busy server: the reservation, and the write that gives it back, each take a second,
        # which leaves the waiting pod's retries time to find the reservation in the cache
        h.api.faults.add(r"/workloads/job-second-[0-9a-f]+/status$", method="PATCH", delay=1.0, times=2)
        await h.edit(K.CLUSTER_QUEUES, None, "group-b", raise_quota)  # room for second: reserved
        await eventually(lambda: bool(loop.ctl.job_steering.refused), 10, "the API refused its template")
        await asyncio.sleep(1.0)
        gate.set()
        await asyncio.sleep(2.0)
    assert invariant.peak_running_gpus >= 6
    assert invariant.violations == [], "\n".join(invariant.violations[:10])
