"""A controller killed at a random point and started again, and two replicas handing over the
Lease: the same final state, and the API's record never over quota."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random

import pytest

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from tests.controller_support import FAST, Harness, eventually, job_key, scenario

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}


async def flame_flow(h: Harness, jobs: list[dict], later: list[dict], timeout: float) -> None:
    for job in jobs:
        await h.submit(job)
    keys = [job_key(j) for j in jobs]
    await eventually(lambda: all(h.running(*k) for k in keys), timeout, "borrowing phase")
    a_keys = [job_key(j) for j in later]
    for job in later:
        await h.submit(job)
    await eventually(lambda: all(h.running(*k) for k in a_keys), timeout, "reclaim phase")
    await eventually(lambda: sum(not h.running(*k) for k in keys if k[0] == "team-c") == 2, timeout, "2 of C out")
    for k in a_keys:
        await h.finish_job(*k)
    await eventually(lambda: all(h.running(*k) for k in keys), timeout, "resume phase")


async def assert_final_state(h: Harness, jobs: list[dict], later: list[dict]) -> None:
    for k in map(job_key, jobs):
        job, wl = h.job(*k), h.workload_of(*k)
        assert not job["spec"]["suspend"] and job["spec"]["template"]["spec"]["nodeSelector"] == GH200
        assert W.is_true(wl, "QuotaReserved") and W.is_true(wl, "Admitted") and not W.is_true(wl, "Evicted")
    for k in map(job_key, later):
        assert W.is_true(h.workload_of(*k), "Finished")
    # exactly one Workload per Job
    owners = [wl["metadata"]["ownerReferences"][0]["uid"] for wl in h.api.cluster.store.kind("workloads.kueue.x-k8s.io").values()]
    assert len(owners) == len(set(owners)) == len(jobs) + len(later)
    assert h.observer.violations == []
    await h.pods.held()


async def killed_during_flame(h: Harness, kill_when, while_down) -> list[dict]:
    """FLAME's flow with its controller killed when `kill_when()` returns, `while_down()` done
    while none runs, then a second one started; the final state checked. Returns FLAME's Jobs."""
    objects, jobs, later = scenario("flame.yaml")
    for obj in objects:
        await h.apply(obj)
    first = await h.controller(identity="first")

    async def killer():
        await kill_when()
        await h.kill(first)  # cancels whatever it was writing, mid-flight
        await while_down()
        await h.controller(identity="second")

    kill = asyncio.create_task(killer())
    await flame_flow(h, jobs, later, timeout=10)
    await kill
    await eventually(lambda: (h.cluster_queue("group-c").get("status") or {}).get("reservingWorkloads") == 4,
                     what="status after restart")
    await assert_final_state(h, jobs, later)
    return jobs


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_killed_at_a_random_point_and_restarted(seed):
    rng = random.Random(seed)
    async with Harness(pod_deletion_delay=0.05) as h:
        await killed_during_flame(h, lambda: asyncio.sleep(rng.uniform(0.0, 0.6)),
                                  lambda: asyncio.sleep(rng.uniform(0.0, 0.2)))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_killed_at_a_random_point_while_an_owner_drops_its_label(seed):
    """The restart above, at a random point once c-1 is queued, with the owner of c-1 suspending it,
    removing its label and starting it again while no controller runs (issue 19 case 4; a Job
    with no Workload yet is, without its label, one gpuqueue never queued: the extender's to
    refuse). The new leader still counts c-1 - it owns a Workload - so a Job asking for more than
    the 2 free GPUs waits; the quota holds over what runs. (1.36 rules: a Job its owner started
    may still take its flavor's nodeSelector.)"""
    rng = random.Random(seed)
    async with Harness(pod_deletion_delay=0.05, kubernetes_minor=36) as h:
        h.api.job_controller.keep_start_time_on_suspend = False

        async def once_c1_is_queued():
            await eventually(lambda: h.workload_of("team-c", "c-1") is not None, what="c-1 queued")
            await asyncio.sleep(rng.uniform(0.0, 0.5))

        async def owner_drops_the_label():
            for change in (lambda j: j["spec"].update(suspend=True),
                           lambda j: j["metadata"].get("labels", {}).pop("kueue.x-k8s.io/queue-name", None),
                           lambda j: j["spec"].update(suspend=False)):
                await h.edit(K.JOBS, "team-c", "c-1", change)

        jobs = await killed_during_flame(h, once_c1_is_queued, owner_drops_the_label)
        extra = copy.deepcopy(jobs[-1])
        extra["metadata"] = {"namespace": "team-c", "name": "c-extra"}
        extra["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3
        await h.submit(extra)
        await eventually(lambda: (W.condition(h.workload_of("team-c", "c-extra"), "QuotaReserved") or {}).get(
            "message") == "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                          "flavor gh200, 1 more needed", what="c-extra waits")
        assert not h.running("team-c", "c-extra")
        assert h.observer.violations == []
        await h.pods.held()


async def test_restarted_leader_rebuilds_usage_before_admitting():
    """Admissions recorded by the first controller are restored, not repeated: a new Job that
    does not fit stays pending after a restart."""
    objects, jobs, _ = scenario("flame.yaml")
    async with Harness() as h:
        for obj in objects:
            await h.apply(obj)
        first = await h.controller(identity="first")
        for job in jobs:
            await h.submit(job)
        await eventually(lambda: all(h.running(*job_key(j)) for j in jobs), what="six running")
        await h.kill(first)
        extra = copy.deepcopy(jobs[-1])
        extra["metadata"] = {"namespace": "team-c", "name": "c-extra"}
        extra["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3  # 2 are free
        await h.submit(extra)
        second = await h.controller(identity="second")
        assert len(second.engine.state.admitted) == 6
        await eventually(lambda: W.condition(h.workload_of("team-c", "c-extra"), "QuotaReserved") is not None,
                         what="extra evaluated")
        assert not h.running("team-c", "c-extra")
        assert W.condition(h.workload_of("team-c", "c-extra"), "QuotaReserved")["message"] == (
            "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gh200, "
            "1 more needed")
        assert h.observer.violations == []
        await h.pods.held()


async def two_replicas(h: Harness, objects: list[dict], opts) -> tuple:
    """The scenario's objects applied, and two replicas contending for the Lease: (leader, warm follower)."""
    for obj in objects:
        await h.apply(obj)
    one = await h.controller(opts, identity="one")
    two = await h.controller(opts, identity="two")
    await eventually(lambda: one.leader != two.leader and one.ready and two.ready, what="one leader, one warm follower")
    return (one, two) if one.leader else (two, one)


async def test_leader_hand_over():
    objects, jobs, later = scenario("flame.yaml")
    opts = dataclasses.replace(FAST, leader_elect=True, lease_duration=1.0, renew_deadline=0.6, retry_period=0.05)
    async with Harness() as h:
        leader, follower = await two_replicas(h, objects, opts)
        assert follower.synced and follower.engine is None
        for job in jobs:
            await h.submit(job)
        await eventually(lambda: all(h.running(*job_key(j)) for j in jobs), what="admitted by the leader")
        await eventually(lambda: len(follower.informers["workloads"].list()) == len(jobs), what="follower's cache warm")
        lease = h.api.cluster.store.get("leases.coordination.k8s.io", ("gpuqueue-system", "gpuqueue-extender"))
        assert lease["spec"]["holderIdentity"] == leader.identity

        # the leader dies without a word (no lease release): the follower takes over once the lease expires
        leader.elector.leading = False
        await h.kill(leader)
        await eventually(lambda: follower.leader and follower.recovered, timeout=4, what="follower leads")
        assert len(follower.engine.state.admitted) == len(jobs)
        for job in later:
            await h.submit(job)
        await eventually(lambda: all(h.running(*job_key(j)) for j in later), what="reclaim under the new leader")
        lease = h.api.cluster.store.get("leases.coordination.k8s.io", ("gpuqueue-system", "gpuqueue-extender"))
        assert lease["spec"]["holderIdentity"] == follower.identity and lease["spec"]["leaseTransitions"] >= 1
        assert h.observer.violations == []


async def test_a_leader_that_stops_hands_over_the_lease_only_after_its_writes_have_stopped():
    """client-go's ReleaseOnCancel contract: the work the Lease guards ends before the Lease is
    given up. Otherwise, with a write of the old leader still on its way (an admission, an
    unsuspend), the follower, which takes a released Lease within half a second, could lead and
    write from its own reading of the cluster at the same time."""
    objects, jobs, _ = scenario("flame.yaml")
    opts = dataclasses.replace(FAST, leader_elect=True, lease_duration=5.0, renew_deadline=3.0, retry_period=0.05)
    async with Harness() as h:
        leader, follower = await two_replicas(h, objects, opts)
        held = asyncio.Event()
        h.api.faults.add(r"/workloads/[^/]+/status$", watch=False, hold=held)  # the admission's write, on its way
        writes_at_release: list[int] = []

        def on_write(w) -> None:
            if w.resource.plural == "leases" and w.new and w.new["spec"].get("holderIdentity") != leader.identity:
                writes_at_release.append(len(leader.writes._background))

        h.api.observe(on_write)
        await h.submit(jobs[0])
        await eventually(lambda: h.api.faults.rules[-1].hits == 1, what="the leader's admission write held")
        assert leader.writes._background
        await h.kill(leader)
        held.set()
        await eventually(lambda: follower.leader and follower.recovered, timeout=4, what="follower leads")
        assert writes_at_release and writes_at_release[0] == 0, writes_at_release
        await eventually(lambda: h.running(*job_key(jobs[0])), what="admitted by the new leader")
        assert h.observer.violations == []
