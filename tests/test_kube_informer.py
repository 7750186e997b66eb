"""The informer and write helpers of gpuqueue/kube against the API server stand-in."""
import asyncio
import time

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.kube import ConflictRetriesExhausted, Informer, TokenBucket, retry_on_conflict
from tests.standin import ApiServer
from tests.standin import resources as R

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def workload(name: str, **spec) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "i"}]}}}], **spec}}


class Recorder:
    def __init__(self, informer: Informer):
        self.log: list[tuple] = []
        informer.add_handler(on_add=lambda o: self.log.append(("add", o["metadata"]["name"])),
                             on_update=self.update,
                             on_delete=lambda o: self.log.append(("delete", o["metadata"]["name"])))

    async def update(self, old, new):  # coroutine handlers are awaited
        self.log.append(("update", new["metadata"]["name"], old["metadata"]["resourceVersion"],
                         new["metadata"]["resourceVersion"]))


@pytest.fixture
async def api():
    async with ApiServer() as server:
        server.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-b"}})
        yield server
        assert not server.internal_errors


@pytest.fixture
async def co(api):
    async with client.ApiClient(api.client_configuration()) as ac:
        yield client.CustomObjectsApi(ac)


async def eventually(cond, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


def server_view(api) -> dict:
    return {f"{k[0]}/{k[1]}": o["metadata"]["resourceVersion"]
            for k, o in api.cluster.store.kind(R.WORKLOADS.storage_key).items()}


def cache_view(inf: Informer) -> dict:
    return {k: o["metadata"]["resourceVersion"] for k, o in inf.store.items()}


async def test_list_then_watch_feeds_store_and_handlers(api, co):
    for name in ("wl-1", "wl-2"):
        await co.create_namespaced_custom_object(*KUEUE, "team-b", "workloads", workload(name))
    inf = Informer(co.list_cluster_custom_object, *KUEUE, "workloads", page_size=1)
    rec = Recorder(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 3)
        assert sorted(inf.store) == ["team-b/wl-1", "team-b/wl-2"]
        await co.create_namespaced_custom_object(*KUEUE, "team-b", "workloads", workload("wl-3"))
        await co.patch_namespaced_custom_object(*KUEUE, "team-b", "workloads", "wl-1", {"spec": {"queueName": "r"}},
                                                _content_type="application/merge-patch+json")
        await co.delete_namespaced_custom_object(*KUEUE, "team-b", "workloads", "wl-2")
        await eventually(lambda: cache_view(inf) == server_view(api))
        assert inf.store["team-b/wl-1"]["spec"]["queueName"] == "r"
        names = [e[:2] for e in rec.log]
        assert names == [("add", "wl-1"), ("add", "wl-2"), ("add", "wl-3"), ("update", "wl-1"), ("delete", "wl-2")]
        assert inf.lists == 1
    finally:
        await inf.stop()


async def test_reconnects_after_dropped_stream_without_relisting(api, co):
    inf = Informer(co.list_cluster_custom_object, *KUEUE, "workloads", backoff_initial=0.05)
    rec = Recorder(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 3)
        await eventually(lambda: api.open_watches == 1)
        assert api.drop_watches() == 1
        # written while no watch is open: the resumed watch replays it from the last resourceVersion
        api.cluster.create(R.WORKLOADS, "team-b", workload("while-away"))
        await eventually(lambda: "team-b/while-away" in inf.store)
        await eventually(lambda: api.open_watches == 1)
        assert inf.watch_starts >= 2 and inf.lists == 1
        assert rec.log == [("add", "while-away")]
    finally:
        await inf.stop()


async def test_410_relists_and_handlers_see_a_consistent_view(api, co):
    for name in ("stays", "changes", "goes"):
        api.cluster.create(R.WORKLOADS, "team-b", workload(name))
    inf = Informer(co.list_cluster_custom_object, *KUEUE, "workloads", backoff_initial=0.05)
    rec = Recorder(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 3)
        await eventually(lambda: api.open_watches == 1)
        rec.log.clear()
        api.drop_watches()
        # all of this happens before the informer can reconnect, and the history is then forgotten
        api.cluster.delete(R.WORKLOADS, "team-b", "goes")
        api.cluster.patch(R.WORKLOADS, "team-b", "changes", "application/merge-patch+json", {"spec": {"priority": 7}})
        api.cluster.create(R.WORKLOADS, "team-b", workload("new"))
        api.compact()
        await eventually(lambda: inf.lists == 2 and cache_view(inf) == server_view(api))
        assert sorted(e[:2] for e in rec.log) == [("add", "new"), ("delete", "goes"), ("update", "changes")]
        # after the relist the watch resumes normally
        api.cluster.delete(R.WORKLOADS, "team-b", "stays")
        await eventually(lambda: "team-b/stays" not in inf.store)
        assert rec.log[-1] == ("delete", "stays")
    finally:
        await inf.stop()


async def test_http_410_on_watch_and_errors_on_list_are_survived(api, co):
    api.faults.add(r"/workloads$", method="GET", watch=False, status=500, times=2)
    api.faults.add(r"/workloads$", method="GET", watch=True, status=410, times=1)
    inf = Informer(co.list_cluster_custom_object, *KUEUE, "workloads", backoff_initial=0.02)
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 3)
        await eventually(lambda: api.open_watches == 1)
        assert inf.lists == 2  # listed, watch got HTTP 410, listed again
        api.cluster.create(R.WORKLOADS, "team-b", workload("late"))
        await eventually(lambda: "team-b/late" in inf.store)
    finally:
        await inf.stop()


async def test_update_retries_on_conflict_from_a_fresh_read(api, co):
    await co.create_namespaced_custom_object(*KUEUE, "team-b", "workloads", workload("wl"))
    stale = await co.get_namespaced_custom_object(*KUEUE, "team-b", "workloads", "wl")
    reads = []

    async def read():
        if not reads:
            # someone else writes between our read and our update the first time round
            api.cluster.patch(R.WORKLOADS, "team-b", "wl", "application/merge-patch+json", {"spec": {"queueName": "q2"}})
            reads.append(stale)
            return stale
        fresh = await co.get_namespaced_custom_object(*KUEUE, "team-b", "workloads", "wl")
        reads.append(fresh)
        return fresh

    def change(obj):
        obj["spec"]["priority"] = 5
        return obj

    async def send(obj):
        return await co.replace_namespaced_custom_object(*KUEUE, "team-b", "workloads", "wl", obj)

    out = await retry_on_conflict(read, change, send, attempts=3)
    assert len(reads) == 2 and (out["spec"]["queueName"], out["spec"]["priority"]) == ("q2", 5)

    api.faults.add(r"/workloads/wl$", method="PUT", status=409, times=5)
    fresh = lambda: co.get_namespaced_custom_object(*KUEUE, "team-b", "workloads", "wl")  # noqa: E731
    with pytest.raises(ConflictRetriesExhausted) as e:
        await retry_on_conflict(fresh, change, send, attempts=3)
    assert e.value.attempts == 3 and e.value.last.status == 409
    assert await retry_on_conflict(fresh, lambda obj: None, send) is None
    api.faults.clear()
    api.faults.add(r"/workloads/wl$", method="PUT", status=500, times=1)
    with pytest.raises(ApiException):
        await retry_on_conflict(fresh, change, send)  # only conflicts are retried


async def test_token_bucket_limits_rate_after_burst():
    now = [0.0]
    bucket = TokenBucket(rate=10, burst=3, clock=lambda: now[0])
    for _ in range(3):
        await asyncio.wait_for(bucket.acquire(), 0.1)  # the burst is free
    waiter = asyncio.ensure_future(bucket.acquire())
    await asyncio.sleep(0.02)
    assert not waiter.done()
    now[0] = 0.1  # one token's worth of time
    await asyncio.wait_for(waiter, 1)
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)


async def test_bookmarks_move_the_resource_version_and_a_failed_watch_resumes_without_a_relist(api, co):
    api.cluster.create(R.WORKLOADS, "team-b", workload("first"))
    inf = Informer(co.list_cluster_custom_object, *KUEUE, "workloads", backoff_initial=0.02)
    rec = Recorder(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 3)
        await eventually(lambda: api.open_watches == 1)
        listed_at = int(inf.resource_version)
        # writes to another kind move the server's resourceVersion; only a bookmark tells us
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "elsewhere"}})
        api.send_bookmarks()
        await eventually(lambda: int(inf.resource_version) == api.cluster.store.rv)
        assert int(inf.resource_version) > listed_at and rec.log == [("add", "first")]
        # a watch answered with 500 (a Status, not an event) is retried from there, not relisted
        api.faults.add(r"/workloads$", method="GET", watch=True, status=500, times=1)
        api.drop_watches()
        api.cluster.create(R.WORKLOADS, "team-b", workload("second"))
        await eventually(lambda: "team-b/second" in inf.store)
        assert inf.lists == 1 and inf.watch_starts >= 3
        assert [e[:2] for e in rec.log] == [("add", "first"), ("add", "second")]
    finally:
        await inf.stop()


async def test_a_transform_applies_to_listed_and_watched_objects_before_store_and_handlers():
    """controller-runtime's cache transforms: what the informer keeps, and what its handlers see,
    is the object less the dropped fields - from the first list and from the watch alike."""
    from gpuqueue.kube.transform import dropping

    async with ApiServer(managed_fields=True) as api:
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-b"}})
        async with client.ApiClient(api.client_configuration()) as ac:
            co = client.CustomObjectsApi(ac)
            await co.create_namespaced_custom_object(*KUEUE, "team-b", "workloads",
                                                     workload("listed", podSets=[{"name": "main", "template": {}}]))
            inf = Informer(co.list_cluster_custom_object, *KUEUE, "workloads", name="workloads",
                           transform=dropping(["spec.podSets[].template"]))
            seen = []
            inf.add_handler(on_add=seen.append, on_update=lambda old, new: seen.append(new))
            inf.start()
            try:
                await asyncio.wait_for(inf.synced.wait(), 3)
                await co.create_namespaced_custom_object(*KUEUE, "team-b", "workloads",
                                                         workload("watched", podSets=[{"name": "main", "template": {}}]))
                await eventually(lambda: inf.get("team-b/watched") is not None)
            finally:
                await inf.stop()
        stored = api.cluster.get(R.WORKLOADS, "team-b", "watched")
    assert "managedFields" in stored["metadata"] and "template" in stored["spec"]["podSets"][0]
    for obj in [inf.get("team-b/listed"), inf.get("team-b/watched"), *seen]:
        assert "managedFields" not in obj["metadata"]
        assert obj["spec"]["podSets"] == [{"name": "main", "count": 1}]  # (count: the CRD's default)
        assert obj["spec"]["queueName"] == "q"
    assert len(seen) == 2


async def test_an_observed_write_is_seen_at_once_and_the_lagging_watch_does_not_take_it_back(api, co):
    """Our own write's answer goes into the cache ahead of a watch that lags (Informer.observe);
    when the watch brings that version, or an older one, nothing changes and no handler hears it
    twice. The controller relies on it: the extender judges pods by this cache, and an eviction
    it has not seen would let a restarted victim's pods in."""
    await co.create_namespaced_custom_object(*KUEUE, "team-b", "workloads", workload("w"))
    inf = Informer(co.list_cluster_custom_object, *KUEUE, "workloads", name="workloads")
    rec = Recorder(inf)
    inf.start()
    try:
        await asyncio.wait_for(inf.synced.wait(), 3)
        first = inf.get("team-b/w")
        gate = asyncio.Event()
        held = api.faults.add(r"/workloads$", watch=True, hold=gate, times=1)
        api.drop_watches(R.WORKLOADS)  # the watch reconnects into the hold: it lags from here on
        await eventually(lambda: held.hits == 1)
        written = await co.replace_namespaced_custom_object(
            *KUEUE, "team-b", "workloads", "w", {**first, "spec": {**first["spec"], "active": False}})
        assert await inf.observe(written) is True
        assert inf.get("team-b/w")["spec"]["active"] is False
        assert await inf.observe(first) is False  # an older version is not taken
        assert inf.get("team-b/w")["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
        gate.set()
        later = await co.replace_namespaced_custom_object(
            *KUEUE, "team-b", "workloads", "w", {**written, "spec": {**written["spec"], "queueName": "q2"}})
        await eventually(lambda: inf.get("team-b/w")["spec"]["queueName"] == "q2")
    finally:
        await inf.stop()
    rv0, rv1, rv2 = (o["metadata"]["resourceVersion"] for o in (first, written, later))
    assert [e for e in rec.log if e[0] == "update"] == [("update", "w", rv0, rv1), ("update", "w", rv1, rv2)]


async def test_a_batch_of_watch_events_lets_other_ready_work_run_between_them():
    """Events that arrive together (kube-apiserver sends what piled up in one write) are applied one
    at a time, with the event loop free in between: an extender request that arrived meanwhile is
    answered after one event's handlers, not after the whole batch."""
    import orjson

    batch = b"".join(orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": f"w{i}", "resourceVersion": str(10 + i)}}})
                     + b"\n" for i in range(50))
    watches = 0

    class Answer:
        def __init__(self, body: bytes = b"", content: asyncio.StreamReader | None = None):
            self.body, self.content = body, content

        async def read(self) -> bytes:
            return self.body

        def release(self) -> None:
            pass

    async def list_func(*_, watch: bool = False, **__):
        nonlocal watches
        if not watch:
            return Answer(orjson.dumps({"items": [], "metadata": {"resourceVersion": "1"}}))
        watches += 1
        reader = asyncio.StreamReader()
        if watches == 1:
            reader.feed_data(batch)  # the whole batch readable at once; later watches wait for more
        return Answer(content=reader)

    inf = Informer(list_func, name="batch")
    added: list[str] = []
    other_ran_after: list[int] = []
    loop = asyncio.get_running_loop()

    def on_add(obj):
        added.append(obj["metadata"]["name"])
        if len(added) == 1:
            loop.call_soon(lambda: other_ran_after.append(len(added)))

    inf.add_handler(on_add=on_add)
    inf.start()
    try:
        await eventually(lambda: len(added) == 50)
    finally:
        await inf.stop()
    assert other_ran_after and other_ran_after[0] <= 2, other_ran_after
