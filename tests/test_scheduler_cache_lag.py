"""kube-scheduler asks about a pod within milliseconds of its creation, before the extender's watch
has brought it (issue 25): /filter waits, once and at most catchup.WAIT_SECONDS, for its caches to
take in what the request shows, then judges as before; what really does not exist, or does not
match, is still refused. Over real TLS with the stand-in scheduler (kube-scheduler 1.24's queue,
and the current one's), on the controller's caches with the pod watch lagging; then the same
rules one by one on a view filled by hand, and the HTTP layer keeping a waiting request's place."""

from __future__ import annotations

import asyncio
import copy
import time

import orjson
import pytest

from gpuqueue.extender.controller.clusterview.view import CacheView
from gpuqueue.extender.scheduler import start
from gpuqueue.extender.scheduler.verbs import filter_verb
from tests.controller_support import eventually
from tests.extender_support import chosen, scheduler_context
from tests.standin.schedqueue import VERSIONS
from tests.standin.scheduler import Scheduler
from tests.test_scheduler_enforcement import cluster, gpu_job
from tests.test_scheduler_extender import FILTER_NCT, GH, fixture, job_pod, mixed_cluster, names_request, pki  # noqa: F401
from tests.test_scheduler_http11 import post, read_answer

LAG = 0.3  # seconds every pod event reaches the controller's cache late


def lag_watch(informer, seconds: float) -> asyncio.Task:
    """Each event of ``informer``'s watch is taken in ``seconds`` after it arrived (in order), as
    from a busy API server; the returned task delivers them (cancel it at the end)."""
    apply, loop = informer._apply, asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, type_, obj = await events.get()
            await asyncio.sleep(max(due - loop.time(), 0.0))
            await apply(type_, obj)

    async def late(type_: str, obj: dict) -> None:
        events.put_nowait((loop.time() + seconds, type_, obj))

    informer._apply = late
    return asyncio.ensure_future(deliver())


def https_extender(c):
    """kube-scheduler's calls: POST over TLS with its client certificate."""
    async def call(verb: str, body: bytes) -> bytes:
        async with c.scheduler.post(f"{c.base}/{verb}", data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200
            return await r.read()
    return call


@pytest.mark.parametrize("version", VERSIONS)
async def test_pods_asked_about_before_the_watch_delivered_them_are_placed_at_once(tmp_path, version):
    async with cluster(tmp_path) as c:
        scheduler = Scheduler(c.h.api.cluster, https_extender(c), version=version)
        lagging = lag_watch(c.ctl.informers["pods"], LAG)
        scheduler.start()
        try:
            job = await c.admitted(gpu_job("train", parallelism=4, completions=4))
            await eventually(lambda: len(c.pods_of(job)) == 4 and all(p["spec"].get("nodeName") for p in c.pods_of(job)),
                             10, "the 4 pods bound")
        finally:
            await scheduler.stop()
            lagging.cancel()
        waits = [scheduler.bound_at[p["metadata"]["uid"]] - scheduler.queued_at[p["metadata"]["uid"]]
                 for p in c.pods_of(job)]
        # main answered Error: 1.24 parked each pod until the five-minute flush, current backed off
        assert scheduler.extender_errors == 0, scheduler.unschedulable
        assert max(waits) < 1.0, waits
        assert scheduler.attempts == 4


async def test_a_pod_that_does_not_exist_is_still_refused_after_the_wait_and_a_uid_of_another_pod_at_once(tmp_path):
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train"))
        pod = (await c.pods_made(job, 1))[0]
        gone = copy.deepcopy(c.live(pod))
        gone["metadata"]["uid"] = "b7d3a5f0-0000-4000-8000-000000000000"
        began = time.monotonic()
        answer = await c.ask("filter", {"Pod": gone, "Nodes": None, "NodeNames": ["gh200-node-1"]})
        assert answer["Error"] == (f"gpuqueue: pod team-a/{pod['metadata']['name']} (uid "
                                   f"{gone['metadata']['uid']}) is not in gpuqueue's pod cache (waited 1 s for it)")
        assert time.monotonic() - began >= 1.0
        renamed = copy.deepcopy(c.live(pod))
        renamed["metadata"]["name"] = "someone-else"
        began = time.monotonic()
        assert (await c.ask("filter", {"Pod": renamed, "Nodes": None, "NodeNames": ["gh200-node-1"]}))["Error"].startswith("gpuqueue: the request names pod team-a/someone-else")
        assert time.monotonic() - began < 0.5  # no newer version of a uid makes it another pod
        assert (await c.filter(pod))["NodeNames"]  # the real one, meanwhile, as before


# -- each "not yet", on a view filled by hand ----------------------------------------------------

def _pod(rv: str, **labels) -> dict:
    return {"metadata": {"namespace": "team-a", "name": "p-0", "uid": "pod-uid", "resourceVersion": rv,
                         "labels": labels,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid",
                                              "controller": True}]},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _workload(rv: str, admitted: bool) -> dict:
    wl = {"metadata": {"namespace": "team-a", "name": "job-j", "uid": "wl-uid", "resourceVersion": rv,
                       "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid",
                                            "controller": True}]},
          "spec": {"podSets": [{"name": "main", "count": 1}]},
          "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "message": "waiting for quota"}]}}
    if admitted:
        wl["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                        "admission": {"clusterQueue": "cq", "podSetAssignments": [
                            {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "gh200"},
                             "resourceUsage": {"nvidia.com/gpu": "1"}}]}}
    return wl


def _node(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}}}


def _view() -> CacheView:
    view = CacheView(cluster_queues=lambda: [{"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"]}]}}],
                     flavors={"gh200": {"spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}}}})
    view.upsert_node(_node("n-1"))
    view.upsert_owner("Job", {"metadata": {"namespace": "team-a", "name": "j", "uid": "job-uid"}})
    return view


def _request(pod: dict, names=("n-1",)) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": list(names)})


async def _answer(result) -> dict:
    assert asyncio.iscoroutine(result), f"answered at once: {result}"
    got = await result
    return orjson.loads(got) if isinstance(got, bytes) else got


async def test_a_pod_whose_admission_the_cache_has_not_seen_waits_for_it():
    """A follower's Workload cache: the pod (rv 12) was made after an admission (rv 11) it lacks."""
    view = _view()
    view.upsert_workload(_workload("5", admitted=False))
    view.upsert_pod(_pod("12"))
    pending = filter_verb(_request(_pod("12")), view, wait=1.0)
    asyncio.get_running_loop().call_later(0.1, view.upsert_workload, _workload("11", admitted=True))
    assert (await _answer(pending))["NodeNames"] == ["n-1"]
    # a bare pod (no owner, nothing of a pod set) has no Workload coming: refused at once, even by a
    # cache that lags (a tenant's bare pods may not each hold kube-scheduler for the wait)
    bare = {**_pod("12"), "metadata": {**_pod("12")["metadata"], "uid": "bare-uid", "name": "bare",
                                        "ownerReferences": []}}
    view.upsert_pod(bare)
    answer = filter_verb(_request(bare), view, wait=1.0)
    assert not asyncio.iscoroutine(answer) and "belongs to no admitted workload" in str(answer)
    # a cache that holds everything up to the pod's version: pending is final, answered at once
    view.upsert_workload(_workload("13", admitted=False))
    answer = filter_verb(_request(_pod("12")), view, wait=1.0)
    assert answer["FailedAndUnresolvableNodes"] == {"n-1": "waiting for quota"}


async def test_a_newer_pod_than_the_cache_holds_and_a_node_it_lacks_are_waited_for():
    view = _view()
    view.upsert_workload(_workload("20", admitted=True))
    view.upsert_pod(_pod("21"))
    # the only candidate is a node the cache has not seen yet: waited for
    pending = filter_verb(_request(_pod("21"), ("n-2",)), view, wait=1.0)
    asyncio.get_running_loop().call_later(0.1, view.upsert_node, _node("n-2"))
    assert (await _answer(pending))["NodeNames"] == ["n-2"]
    # beside a node that takes the pod, an unseen one holds up nothing (kube-scheduler's cycle
    # waits on this answer): the pod goes to a node the cache knows
    answer = filter_verb(_request(_pod("21"), ("n-9", "n-1")), view, wait=1.0)
    assert not asyncio.iscoroutine(answer) and answer["NodeNames"] == ["n-1"]
    # refused on a version the request has moved past (its controller changed): waited for
    view.upsert_pod({**_pod("22"), "metadata": {**_pod("22")["metadata"], "ownerReferences": []}})
    pending = filter_verb(_request(_pod("23")), view, wait=1.0)
    asyncio.get_running_loop().call_later(0.1, view.upsert_pod, _pod("23"))
    assert (await _answer(pending))["NodeNames"] == ["n-1"]
    # the same mismatch at a version the cache already holds: final, at once
    view.upsert_pod({**_pod("24"), "metadata": {**_pod("24")["metadata"], "ownerReferences": []}})
    assert "controlled by uid job-uid" in filter_verb(_request(_pod("23")), view, wait=1.0)["Error"]


async def test_the_wait_is_bounded_and_without_it_the_answer_is_as_before():
    view = _view()
    assert "is not in gpuqueue's pod cache" in filter_verb(_request(_pod("3")), view)["Error"]  # wait 0
    began = asyncio.get_running_loop().time()
    answer = await _answer(filter_verb(_request(_pod("3")), view, wait=0.2))
    assert answer["Error"].endswith("is not in gpuqueue's pod cache (waited 0.2 s for it)")
    assert 0.2 <= asyncio.get_running_loop().time() - began < 0.5


# -- the HTTP layer: a waiting request keeps its place, and holds up no one else -------------------

async def test_pipelined_requests_behind_a_waiting_one_are_answered_in_order(pki):
    cert_dir, _ = pki
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    known = job_pod(fixture(FILTER_NCT), gpus=1)
    view.add_pod(known["Pod"])
    unseen = job_pod(fixture(FILTER_NCT), uid="uid-the-watch-has-not-brought", gpus=1)
    server = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir)
    ctx = scheduler_context(cert_dir)

    async def connect():
        return await asyncio.open_connection("127.0.0.1", server.addresses[0][1], ssl=ctx, server_hostname="127.0.0.1")

    try:
        reader, writer = await connect()
        body = lambda pod: orjson.dumps(names_request(pod, ["gh200-node-1", "h100-node-3"]))  # noqa: E731
        writer.write(post("/filter", body(unseen)) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     + post("/filter", body(known)))
        await writer.drain()
        other_reader, other_writer = await connect()  # another connection is served meanwhile
        other_writer.write(post("/filter", body(known)))
        await other_writer.drain()
        status, _, other = await read_answer(other_reader)
        assert status == 200 and orjson.loads(other)["NodeNames"] == ["gh200-node-1"]
        view.add_pod(unseen["Pod"])  # the watch brings it
        answers = [await read_answer(reader) for _ in range(3)]
        assert [a[0] for a in answers] == [200, 200, 200]
        assert orjson.loads(answers[0][2])["NodeNames"] == ["gh200-node-1"]  # the waiting one, placed
        assert answers[1][2] == b"ok"
        assert orjson.loads(answers[2][2])["NodeNames"] == ["gh200-node-1"]
        # more pipelined behind a waiting one than are queued: reading pauses, then all are answered
        late = job_pod(fixture(FILTER_NCT), uid="uid-late-too", gpus=1)
        writer.write(post("/filter", body(late)) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 40)
        await writer.drain()
        await asyncio.sleep(0.1)
        view.add_pod(late["Pod"])
        status, _, placed = await read_answer(reader)
        assert orjson.loads(placed)["NodeNames"] == ["gh200-node-1"]
        assert [(await read_answer(reader))[2] for _ in range(40)] == [b"ok"] * 40
        for w in (writer, other_writer):
            w.close()
    finally:
        await server.cleanup()
