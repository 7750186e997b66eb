"""The stand-in scheduler replays the measurement of real kube-schedulers in
shared/data/kube-scheduler-retries.md, on its virtual clock: one node with 8 GPUs, an extender that
answers `err-pod` with an Error, `uns-pod` with every node failed, and passes `ok-pod`; the first
two made at t=0, `ok-pod` at 75 s, a second Node added at 85 s; every /filter call's time, per
version, against the table's, within TOLERANCE (kube-scheduler's own latency: its informers, its
cycle; the stand-in's is near zero). The extender takes 10 ms, as in the measurement (the 1.36
attempts at x.09 then x.10); kube-scheduler's one-second flush of the backoff queue ticks 0.09 s
after each whole second of the pods' age, as the measured retries show."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.standin import resources as R
from tests.standin.registry import Cluster
from tests.standin.schedqueue import CURRENT, V1_24
from tests.standin.scheduler import Scheduler

TOLERANCE = 0.2
EXTENDER_LATENCY = 0.01
FLUSH_PHASE = 0.09  # the measured backoff retries' fraction of a second
END = 100.0

# the table, seconds from the pods' creation; for uns-pod on current, the windows of calls it shows
# (kube-scheduler's own events around a change, e.g. a node's status written after it is added,
# may bring one more call right after: "85.15-85.19")
MEASURED = {
    V1_24: {"err-pod": [0.05, 85.15], "uns-pod": [0.07, 85.16], "ok-pod": [75.1]},
    CURRENT: {"err-pod": [0.03, 1.09, 4.09, 9.10, 18.09, 29.10, 40.09, 51.10, 62.09, 73.09, 84.09, 95.10],
              "uns-pod": [0.05, 0.07, 75.14, 85.15], "ok-pod": [75.1]},
}
ONE_MORE_AT = {CURRENT: {"uns-pod": (75.14, 85.15)}}  # a call that may come twice in a row


def node(name: str) -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "8", "pods": "110"}}}


def pod(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


async def replay(version: str) -> dict[str, list[float]]:
    cluster = Cluster()
    cluster.create(R.NAMESPACES, None, {"metadata": {"name": "default"}})
    cluster.create(R.NODES, None, node("node-1"))
    calls: dict[str, list[float]] = {}
    t0 = 0.0

    async def extender(verb: str, body: bytes) -> bytes:
        request = orjson.loads(body)
        name = request["Pod"]["metadata"]["name"]
        if verb == "filter":
            calls.setdefault(name, []).append(round(scheduler.clock.now() - t0, 2))
        await asyncio.sleep(EXTENDER_LATENCY)
        names = request["NodeNames"]
        if name == "err-pod":
            return orjson.dumps({"Error": "not today"})
        if name == "uns-pod":
            return orjson.dumps({"NodeNames": [], "FailedNodes": {n: "not this one" for n in names}})
        return orjson.dumps({"NodeNames": names, "FailedNodes": {}})

    scheduler = Scheduler(cluster, extender, version=version)
    t0 = scheduler.clock.now() + 1 - FLUSH_PHASE  # the flush ticks at whole seconds from the scheduler's start
    scheduler.at(t0, lambda: [cluster.create(R.PODS, "default", pod(n)) for n in ("err-pod", "uns-pod")])
    scheduler.at(t0 + 75.0, lambda: cluster.create(R.PODS, "default", pod("ok-pod")))
    scheduler.at(t0 + 85.0, lambda: cluster.create(R.NODES, None, node("node-2")))
    done = asyncio.Event()
    scheduler.at(t0 + END, done.set)
    scheduler.start()
    try:
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await scheduler.stop()
    return calls


@pytest.mark.parametrize("version", [V1_24, CURRENT])
async def test_the_stand_in_asks_the_extender_when_real_kube_scheduler_did(version):
    calls = await replay(version)
    for name, want in MEASURED[version].items():
        got = list(calls.get(name, []))
        for at in ONE_MORE_AT.get(version, {}).get(name, ()):  # one call more right after is allowed
            after = [t for t in got if at - TOLERANCE <= t <= at + TOLERANCE]
            if len(after) == 2:
                got.remove(after[1])
        assert len(got) == len(want) and all(abs(g - w) <= TOLERANCE for g, w in zip(got, want)), (
            f"{version} {name}: the stand-in asked at {calls.get(name)}, kube-scheduler at {want}")
