"""The stand-in's cost model (tests/standin/costs.py): a request takes its CPU on the server's
shared cores plus etcd's commit, holds a seat of its priority level while it is served, waits in a
queue when there is none, and gets kube-apiserver's 429 when the queue is full or the wait too long.
Real HTTP against the stand-in; times are measured on the wall clock with generous margins."""
import asyncio
import time

import aiohttp
import orjson
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.standin import ApiServer
from tests.standin import resources as R
from tests.standin.costs import REAL_1_24, Cost, CostModel, PriorityLevel

SA = {"Authorization": "Bearer controller"}  # a service account: the workload-low level
NS = "team-a"


def model(cpu: float = 0.05, wait: float = 0.0, cores: float = 2.0, seats: int = 600, queues: int = 1,
          hand: int = 1, queue_length: int = 50, wait_limit: float = 15.0, **kw) -> CostModel:
    """One limited level ("workload-low") holding every seat, and exempt."""
    return CostModel(name="test", costs={}, default_read=Cost(cpu, 0.0), default_write=Cost(cpu, wait), cores=cores,
                     server_concurrency=seats,
                     priority_levels=(PriorityLevel("exempt", 0),
                                      PriorityLevel("workload-low", 1, queues, hand, queue_length)),
                     request_wait_limit=wait_limit, **kw)


async def start(cost_model: CostModel) -> ApiServer:
    api = ApiServer(cost_model=cost_model)
    api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": NS}})
    for i in range(200):
        api.cluster.create(R.LEASES, NS,
                           {"metadata": {"name": f"obj-{i}"}, "spec": {"holderIdentity": "x"}})
    await api.start()
    return api


def lease_path(i: int) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/obj-{i}"


async def put(session: aiohttp.ClientSession, api: ApiServer, i: int, headers=SA) -> tuple[int, float, dict, str]:
    """PUT a Lease (a write): (status, seconds, headers, body)."""
    body = orjson.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": f"obj-{i}", "namespace": NS}, "spec": {"holderIdentity": f"h{i}"}})
    t0 = time.monotonic()
    async with session.put(api.url + lease_path(i), data=body,
                           headers={**headers, "Content-Type": "application/json"}) as resp:
        text = await resp.text()
        return resp.status, time.monotonic() - t0, dict(resp.headers), text


async def burst(session, cost_model: CostModel, n: int, headers=SA) -> tuple[ApiServer, list, float]:
    """n writes at once against a server with that model: (the server, the answers, seconds)."""
    api = await start(cost_model)
    try:
        t0 = time.monotonic()
        results = await asyncio.gather(*(put(session, api, i, headers) for i in range(n)))
        return api, results, time.monotonic() - t0
    finally:
        await api.stop()


@pytest.fixture
async def session():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        yield s


async def test_a_burst_of_writes_shares_the_cores(session):
    """20 writes of 50 ms CPU each on 2 cores: 0.5 s of work for the server, so the burst takes
    0.5 s, and - the cores being shared - none of them is answered much before the others."""
    api, results, took = await burst(session, model(cpu=0.05), 20)
    assert [r[0] for r in results] == [200] * 20
    assert 0.45 <= took < 0.9, took
    assert min(r[1] for r in results) >= 0.4  # processor sharing: each got a tenth of a core
    assert api.costs.cpu.delivered == pytest.approx(1.0, rel=0.05)
    s = api.costs.served["update leases.coordination.k8s.io"]
    assert s.requests == 20 and s.cpu == pytest.approx(1.0)


async def test_one_request_takes_its_cpu_and_the_commit(session):
    api = await start(model(cpu=0.05, wait=0.1))
    try:
        status, took, _, _ = await put(session, api, 0)
    finally:
        await api.stop()
    assert status == 200
    assert 0.15 <= took < 0.4, took


async def test_without_a_cost_model_answers_at_once(session):
    api = ApiServer()
    api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": NS}})
    api.cluster.create(R.LEASES, NS, {"metadata": {"name": "obj-0"}, "spec": {}})
    await api.start()
    try:
        status, took, _, _ = await put(session, api, 0)
    finally:
        await api.stop()
    assert status == 200 and took < 0.1


async def test_a_write_commits_at_the_end_of_its_service(session):
    """A watch sees the write only once the server has served it (etcd commits at the end)."""
    api = await start(model(cpu=0.0, wait=0.3))
    try:
        seen = asyncio.get_running_loop().create_future()

        async def watch():
            rv = str(api.cluster.store.rv)
            async with session.get(api.url + f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
                                   params={"watch": "1", "resourceVersion": rv}) as resp:
                async for line in resp.content:
                    if orjson.loads(line)["type"] == "MODIFIED":
                        seen.set_result(time.monotonic())
                        return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        status, _, _, _ = await put(session, api, 0)
        at = await asyncio.wait_for(seen, 2) - t0
        watcher.cancel()
    finally:
        await api.stop()
    assert status == 200
    assert at >= 0.28, at


async def test_at_most_the_level_s_seats_are_served_at_once(session):
    """4 seats: 12 writes of 50 ms CPU on plenty of cores run 4 at a time (three rounds), the rest
    waiting in the queue; every one is answered."""
    api, results, took = await burst(session, model(cpu=0.05, cores=100.0, seats=4), 12)
    assert [r[0] for r in results] == [200] * 12
    assert api.costs.peak_in_service == 4
    assert 0.14 <= took < 0.5, took  # 3 rounds of 50 ms
    assert api.costs.served["update leases.coordination.k8s.io"].queued > 0


async def test_a_full_queue_gets_429_with_retry_after(session):
    """1 seat, one queue of 2: of 6 writes at once 1 is served, 2 wait, 3 are refused at once with
    kube-apiserver's plain-text 429 and Retry-After: 1."""
    api = await start(model(cpu=0.1, seats=1, queue_length=2))
    try:
        results = await asyncio.gather(*(put(session, api, i) for i in range(6)))
    finally:
        await api.stop()
    codes = sorted(r[0] for r in results)
    assert codes == [200, 200, 200, 429, 429, 429]
    refused = [r for r in results if r[0] == 429]
    for _, took, headers, text in refused:
        assert took < 0.09  # not served, not queued
        assert headers["Retry-After"] == "1"
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert text == "Too many requests, please try again later.\n"
    assert api.costs.served["update leases.coordination.k8s.io"].rejected == 3
    assert api.responses[("PUT", 429)] == 3


async def test_a_wait_longer_than_the_limit_gets_429(session):
    api = await start(model(cpu=1.0, seats=1, wait_limit=0.2))
    try:
        first = asyncio.create_task(put(session, api, 0))
        await asyncio.sleep(0.05)
        status, took, headers, _ = await put(session, api, 1)
        assert (await first)[0] == 200
    finally:
        await api.stop()
    assert status == 429 and headers["Retry-After"] == "1"
    assert 0.15 <= took < 0.6, took


async def test_the_kubernetes_client_sees_the_429(session):
    api = await start(model(cpu=0.5, seats=1, queue_length=0))
    try:
        config = api.client_configuration()
        config.api_key = {"BearerToken": "controller"}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        async with client.ApiClient(config) as ac:
            busy = asyncio.create_task(put(session, api, 0))
            await asyncio.sleep(0.05)
            with pytest.raises(ApiException) as err:
                await client.CoordinationV1Api(ac).read_namespaced_lease("obj-1", NS)
            await busy
    finally:
        await api.stop()
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "1"


async def test_exempt_requests_take_no_seat_but_share_the_cores(session):
    """The cluster admin (no credentials here) is never queued or refused, but its requests use
    the same cores."""
    api, results, took = await burst(session, model(cpu=0.05, seats=1, queue_length=0), 10, headers={})
    assert [r[0] for r in results] == [200] * 10
    assert 0.22 <= took < 0.6, took  # 0.5 s of CPU on 2 cores
    assert api.costs.peak_in_service == 10


async def test_max_in_flight_refuses_at_once_reads_and_writes_apart(session):
    """APF off: --max-requests-inflight / --max-mutating-requests-inflight, no queue."""
    api = await start(model(cpu=0.2, cores=100.0, max_inflight=(1, 2)))
    try:
        writes = [asyncio.create_task(put(session, api, i)) for i in range(3)]
        await asyncio.sleep(0.05)
        async with session.get(api.url + lease_path(9), headers=SA) as r1:
            read_status = r1.status
        results = await asyncio.gather(*writes)
    finally:
        await api.stop()
    assert sorted(r[0] for r in results) == [200, 200, 429]
    assert read_status == 200  # a read takes a read-only slot


async def test_the_event_loop_stays_free_while_requests_are_served(session):
    """200 ms of CPU for each of 40 requests is 4 s of the model's time, none of the event loop's:
    a ticker keeps its pace meanwhile."""
    api = await start(model(cpu=0.2))
    lags = []

    async def ticker():
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - t - 0.01)

    tick = asyncio.create_task(ticker())
    try:
        await asyncio.gather(*(put(session, api, i) for i in range(40)))
    finally:
        tick.cancel()
        await api.stop()
    assert len(lags) > 100
    assert sorted(lags)[int(0.95 * len(lags))] < 0.05


def test_the_real_1_24_model_gives_kube_apiserver_s_seats():
    seats = REAL_1_24.seats()
    assert REAL_1_24.server_concurrency == 400 + 200
    # ceil(600 * shares / 245)
    assert seats == {"system": 74, "node-high": 98, "leader-election": 25, "workload-high": 98,
                     "workload-low": 245, "global-default": 49, "catch-all": 13}
    assert REAL_1_24.request_wait_limit == 15.0


# --- the calibrated profiles: what a single request costs, as measured on a real kube-apiserver ---------

WL_STATUS = "workloads.kueue.x-k8s.io/status"


def test_the_profiles_carry_the_published_medians():
    """Every constant of the profiles' tables is the median over the repetitions in the published
    raw figures (shared/data/apiserver-costs.json) of its row and column, to the table's rounding."""
    import json
    import statistics

    from tests.shared_fixtures import shared_data
    from tests.standin import costs as C

    data = json.loads(shared_data("apiserver-costs.json").read_text())
    for (version, conc), col in C._COLUMNS.items():
        rows = data["versions"][version]["rows"]
        for table, field in ((C._API_MS, "api_ms_per_req"), (C._ETCD_MS, "etcd_ms_per_req")):
            for variant, figures in table.items():
                got = statistics.median(r[field] for r in rows if r["variant"] == variant and r["conc"] == conc)
                assert figures[col] == pytest.approx(got, abs=0.0051), (version, conc, variant, field)
        if conc == 1:
            for variant, figures in C._P50_C1_MS.items():
                got = statistics.median(r["lat_p50_ms"] for r in rows if r["variant"] == variant and r["conc"] == 1)
                assert figures[0 if version == "1.24" else 1] == pytest.approx(got, abs=0.0051), (version, variant)
        idle = data["versions"][version]["idle_start"]
        assert C._IDLE_MS_PER_S[version] == (round(idle["api_per_s"] * 1000), round(idle["etcd_per_s"] * 1000))


def _workload(name: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]}}


ADMITTED = {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
                            "lastTransitionTime": "2026-12-03T20:00:00Z"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "main", "flavors": {"nvidia.com/gpu": "gh200"}, "resourceUsage": {"nvidia.com/gpu": "1"},
                 "count": 1}]}}


async def _patch_status(session, api: ApiServer, name: str, status: dict) -> int:
    wl = api.cluster.store.get(R.WORKLOADS.storage_key, (NS, name))
    body = {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]}, "status": status}
    async with session.patch(api.url + f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/{name}/status",
                             data=orjson.dumps(body), headers={"Content-Type": "application/merge-patch+json"}) as r:
        await r.read()
        return r.status


async def test_a_workload_status_patch_costs_what_kube_apiserver_1_24_used(session):
    """At one connection kube-apiserver 1.24 spent 7.90 ms of CPU on a merge patch of a Workload's
    status with resourceVersion (apiserver-costs.md, row c2), etcd 0.60 ms at sixteen (the profile's
    etcd column); a second one that changes nothing cost the server 8.86 ms (row e2) and stored
    nothing: no new resourceVersion."""
    api = await start(REAL_1_24)
    try:
        api.cluster.create(R.WORKLOADS, NS, _workload("w"))
        assert await _patch_status(session, api, "w", ADMITTED) == 200
        s = api.costs.served[f"patch {WL_STATUS}"]
        assert (round(s.cpu * 1000, 2), round(s.etcd * 1000, 2), s.noops) == (7.90, 0.60, 0)
        rv = api.cluster.store.rv
        assert await _patch_status(session, api, "w", ADMITTED) == 200
        assert api.cluster.store.rv == rv
        assert (round(s.cpu * 1000, 2), s.noops) == (round(7.90 + 8.86, 2), 1)
    finally:
        await api.stop()


async def test_a_job_write_is_priced_by_its_form(session):
    """Unsuspending a Job (1.24, one connection): a whole-object PUT 4.03 ms of the server's CPU, a
    merge patch 4.16 ms, a strategic-merge patch 4.19 ms (rows d1-d3); creating one 4.10 ms (a)."""
    api = await start(REAL_1_24)
    url = api.url + f"/apis/batch/v1/namespaces/{NS}/jobs"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {
        "suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}
    try:
        async with session.post(url, data=orjson.dumps(job), headers={"Content-Type": "application/json"}) as r:
            assert r.status == 201
            stored = await r.json()
        stored["spec"]["suspend"] = False
        async with session.put(url + "/j", data=orjson.dumps(stored), headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200
        for i, kind in enumerate(("merge-patch+json", "strategic-merge-patch+json")):
            body = {"spec": {"suspend": i % 2 == 0}}
            async with session.patch(url + "/j", data=orjson.dumps(body),
                                     headers={"Content-Type": f"application/{kind}"}) as r:
                assert r.status == 200
        served = {k: round(v.cpu * 1000, 2) for k, v in api.costs.served.items()}
        assert served["create jobs.batch"] == 4.10
        assert served["update jobs.batch"] == 4.03
        assert served["patch jobs.batch"] == round(4.16 + 4.19, 2)
    finally:
        await api.stop()


def test_the_1_36_profile_is_priced_from_its_own_column():
    from tests.standin.costs import MODELS, REAL_1_36
    assert MODELS["real-1.36"] is REAL_1_36
    assert round(REAL_1_36.cost("create", "jobs.batch").cpu * 1000, 2) == 2.94
    assert round(REAL_1_36.cost("patch", WL_STATUS, content_type="application/merge-patch+json").cpu * 1000, 2) == 7.70
    assert round(REAL_1_36.idle_cpu * 1000) == 17


async def test_other_processes_on_the_machine_leave_the_server_fewer_cores(session):
    """20 writes of 50 ms CPU on 2 cores take 0.5 s; with another process using one of them, 1 s."""
    api = await start(model(cpu=0.05))
    try:
        api.costs.others_use(1.0)
        t0 = time.monotonic()
        results = await asyncio.gather(*(put(session, api, i) for i in range(20)))
        took = time.monotonic() - t0
    finally:
        await api.stop()
    assert [r[0] for r in results] == [200] * 20
    assert 0.95 <= took < 1.5, took
