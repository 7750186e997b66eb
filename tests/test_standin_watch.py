"""Watch protocol, job lifecycle rules, garbage collection and test hooks of the API server stand-in."""
import asyncio
import json

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.shared_fixtures import k8s_recording
from tests.standin import ApiServer
from tests.standin import resources as R

from .test_standin_rest import KUEUE, MERGE, fixture, job_body, status_of


@pytest.fixture
async def api():
    async with ApiServer(job_controller=True, bookmark_interval=0.2) as server:
        server.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-b"}})
        yield server
        assert not server.internal_errors and not server.observer_errors


@pytest.fixture
async def k8s(api):
    async with client.ApiClient(api.client_configuration()) as ac:
        yield ac


async def eventually(cond, timeout=3.0):
    for _ in range(int(timeout / 0.02)):
        result = await cond()
        if result:
            return result
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def test_raw_watch_stream_one_chunk_per_event_with_bookmarks(api, k8s):
    batch = client.BatchV1Api(k8s)
    listed = await batch.list_namespaced_job("team-b")
    rv = listed.metadata.resource_version
    url = f"{api.url}/apis/batch/v1/namespaces/team-b/jobs?allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=1&watch=true"
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "application/json"
            assert r.headers["Transfer-Encoding"] == "chunked"
            await batch.create_namespaced_job("team-b", job_body("watched-job"))
            await batch.patch_namespaced_job("watched-job", "team-b", {"metadata": {"labels": {"touched": "yes"}}})
            await batch.delete_namespaced_job("watched-job", "team-b")
            lines = [line async for line in r.content]
    events = [json.loads(line) for line in lines]
    types = [e["type"] for e in events]
    # the job controller adds its Suspended condition in between, as in the recording
    assert types[0] == "ADDED" and types[-1] == "BOOKMARK" and "DELETED" in types
    assert all(line.endswith(b"\n") for line in lines)
    recorded = [json.loads(line) for line in k8s_recording("api/jobs.watch.bookmarks.stream.jsonl").read_text().splitlines()]
    bookmark, want = events[-1]["object"], recorded[-1]["object"]
    assert {**bookmark, "metadata": None} == {**want, "metadata": None}
    assert bookmark["metadata"]["resourceVersion"] == events[types.index("DELETED")]["object"]["metadata"]["resourceVersion"]
    deleted = events[types.index("DELETED")]["object"]
    assert deleted["metadata"]["labels"]["touched"] == "yes"  # DELETED carries the last state


async def test_watch_from_compacted_rv_gets_410_error_event_like_the_recording(api, k8s):
    batch, co = client.BatchV1Api(k8s), client.CustomObjectsApi(k8s)
    await batch.create_namespaced_job("team-b", job_body("train-1"))
    await co.create_cluster_custom_object(*KUEUE, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}})
    await asyncio.sleep(0.05)
    api.compact()
    oldest = api.cluster.store.rv
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{api.url}/apis/batch/v1/namespaces/team-b/jobs?resourceVersion=1&watch=true") as r:
            assert r.status == 200
            body = await r.read()
    want = k8s_recording("api/jobs.watch.too-old-resourceVersion.410-error-event.stream.jsonl").read_bytes()
    assert body == want.replace(b"285 (299)", f"1 ({oldest})".encode())
    expected = fixture("api/kubernetes-asyncio-36.1.0.parsing-of-these-watch-fixtures.json")["clusterqueues_410"]
    w = watch.Watch()
    with pytest.raises(ApiException) as e:
        async for _ in w.stream(co.list_cluster_custom_object, *KUEUE, "clusterqueues", resource_version="1",
                                timeout_seconds=5):
            pass
    assert (e.value.status, e.value.reason) == (expected["status"], expected["reason"].replace("(230)", f"({oldest})"))
    await w.close()


async def test_watch_replays_history_and_selector_transitions(api, k8s):
    batch = client.BatchV1Api(k8s)
    start = (await batch.list_namespaced_job("team-b")).metadata.resource_version
    await batch.create_namespaced_job("team-b", job_body("a"))
    await batch.patch_namespaced_job("a", "team-b", {"metadata": {"labels": {"tier": "gold"}}})
    await batch.patch_namespaced_job("a", "team-b", {"metadata": {"labels": {"tier": "bronze"}}})
    w = watch.Watch()
    seen = []
    async for ev in w.stream(batch.list_namespaced_job, "team-b", resource_version=start, label_selector="tier=gold",
                             timeout_seconds=1):
        seen.append((ev["type"], ev["object"].metadata.labels.get("tier")))
    await w.close()
    assert seen == [("ADDED", "gold"), ("DELETED", "bronze")]


async def test_job_lifecycle_and_the_1_24_template_rule(api, k8s):
    batch, core = client.BatchV1Api(k8s), client.CoreV1Api(k8s)
    await batch.create_namespaced_job("team-b", job_body("gpu-job-a", parallelism=2))
    job = await eventually(lambda: _job_with_condition(batch, "gpu-job-a", "Suspended", "True"))
    want = fixture("job-lifecycle/02-job-a.suspended.after-job-controller.json")["status"]
    got = job.to_dict()["status"]
    assert got["conditions"][0]["reason"] == want["conditions"][0]["reason"] and got["ready"] == 0
    assert got["start_time"] is None
    patch = fixture("job-lifecycle/03-job-a.add-nodeSelector-while-suspended.request-body.merge-patch.json")
    out = await batch.patch_namespaced_job("gpu-job-a", "team-b", patch)
    assert out.spec.template.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
    image = {"spec": {"template": {"spec": {"containers": [{"name": "worker", "image": "nvidia/cuda:12.5.0"}]}}}}
    with pytest.raises(ApiException) as e:
        await batch.patch_namespaced_job("gpu-job-a", "team-b", image)
    body, want = status_of(e.value), fixture("job-lifecycle/03b-job-a.change-container-image-while-suspended.422.json")
    assert body["details"]["causes"][0]["field"] == want["details"]["causes"][0]["field"] == "spec.template"
    assert body["message"].endswith(": field is immutable") and list(body) == list(want)
    await batch.patch_namespaced_job("gpu-job-a", "team-b", {"spec": {"suspend": False}})
    await eventually(lambda: _job_with_condition(batch, "gpu-job-a", "Suspended", "False"))
    pods = await core.list_namespaced_pod("team-b", label_selector="job-name=gpu-job-a")
    assert len(pods.items) == 2 and all(p.metadata.generate_name == "gpu-job-a-" for p in pods.items)
    assert pods.items[0].spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
    # re-suspend: pods deleted, startTime kept, and the scheduling directives are frozen (fixture 25)
    await batch.patch_namespaced_job("gpu-job-a", "team-b", {"spec": {"suspend": True}})
    job = await eventually(lambda: _job_with_condition(batch, "gpu-job-a", "Suspended", "True"))
    assert job.status.start_time is not None and job.status.active is None
    with pytest.raises(ApiException) as e:
        await batch.patch_namespaced_job("gpu-job-a", "team-b", {"spec": {"template": {"spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}}})
    assert e.value.status == 422
    assert status_of(e.value)["message"].startswith('Job.batch "gpu-job-a" is invalid: spec.template: Invalid value: ')
    await batch.patch_namespaced_job("gpu-job-a", "team-b", {"spec": {"suspend": False}})
    await eventually(lambda: _job_with_condition(batch, "gpu-job-a", "Suspended", "False"))
    assert api.job_controller.succeed_pods("team-b", "gpu-job-a") == 2
    job = await eventually(lambda: _job_with_condition(batch, "gpu-job-a", "Complete", "True"))
    assert job.status.succeeded == 2 and job.status.completion_time is not None


async def _job_with_condition(batch, name, type_, status):
    job = await batch.read_namespaced_job(name, "team-b")
    if any(c.type == type_ and c.status == status for c in job.status.conditions or ()):
        return job
    return None


async def test_deleting_a_job_collects_what_it_owns(api, k8s):
    batch, core, co = client.BatchV1Api(k8s), client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    job = await batch.create_namespaced_job("team-b", job_body("owner", suspend=False))
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "owner", "uid": job.metadata.uid,
              "controller": True, "blockOwnerDeletion": True}]
    await co.create_namespaced_custom_object(*KUEUE, "team-b", "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "job-owner-1", "ownerReferences": owner},
        "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}]}})
    await eventually(lambda: _pods_of(core, "owner"))
    await batch.delete_namespaced_job("owner", "team-b", propagation_policy="Background")

    async def gone():
        wls = await co.list_namespaced_custom_object(*KUEUE, "team-b", "workloads")
        return not wls["items"] and not await _pods_of(core, "owner")
    await eventually(gone)
    # batch/v1's default is to orphan: the pods stay, without the owner reference
    await batch.create_namespaced_job("team-b", job_body("kept", suspend=False))
    await eventually(lambda: _pods_of(core, "kept"))
    await batch.delete_namespaced_job("kept", "team-b")

    async def orphaned():
        pods = await _pods_of(core, "kept")
        return pods and all(not p.metadata.owner_references for p in pods)
    await eventually(orphaned)
    with pytest.raises(ApiException):
        await batch.read_namespaced_job("kept", "team-b")


async def _pods_of(core, job):
    return (await core.list_namespaced_pod("team-b", label_selector=f"job-name={job}")).items


async def test_faults_and_write_observer(api, k8s):
    writes = []
    api.observe(writes.append)
    batch = client.BatchV1Api(k8s)
    api.faults.add(r"/jobs$", method="POST", status=500, times=1)
    with pytest.raises(ApiException) as e:
        await batch.create_namespaced_job("team-b", job_body("j"))
    assert e.value.status == 500 and status_of(e.value)["reason"] == "InternalError"
    await batch.create_namespaced_job("team-b", job_body("j"))
    api.faults.add(r"/jobs/j$", method="PATCH", status=409, times=1)
    with pytest.raises(ApiException) as e:
        await batch.patch_namespaced_job("j", "team-b", {"metadata": {"labels": {"a": "b"}}})
    assert status_of(e.value)["reason"] == "Conflict"
    await batch.patch_namespaced_job("j", "team-b", {"metadata": {"labels": {"a": "b"}}})
    verbs = [(w.verb, w.type, w.resource.kind) for w in writes]
    assert ("create", "ADDED", "Job") in verbs and ("patch", "MODIFIED", "Job") in verbs
    assert ("job-controller", "MODIFIED", "Job") in verbs  # the simulated controller's status write
    patched = next(w for w in writes if w.verb == "patch")
    assert patched.old["metadata"].get("labels", {}).get("a") is None and patched.new["metadata"]["labels"]["a"] == "b"
    rvs = [w.rv for w in writes]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
