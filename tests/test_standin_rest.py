"""The API server stand-in against the real kubernetes_asyncio client and the recorded 1.24 bodies."""
import json

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.shared_fixtures import k8s_recording
from tests.standin import ApiServer
from tests.standin import resources as R

KUEUE = ("kueue.x-k8s.io", "v1beta2")
# kubernetes_asyncio sends a dict body to CustomObjectsApi.patch_* as application/json-patch+json, which
# a real API server rejects (400); merge patches must say so.
MERGE = {"_content_type": "application/merge-patch+json"}


def fixture(rel: str) -> dict:
    return json.loads(k8s_recording(rel).read_text())


def job_body(name: str, suspend: bool | None = True, image: str = "nvidia/cuda:12.4.0-base-ubuntu22.04",
             parallelism: int | None = None) -> dict:
    spec = {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "worker", "image": image, "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}
    if suspend is not None:
        spec["suspend"] = suspend
    if parallelism:
        spec["parallelism"] = spec["completions"] = parallelism
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}}, "spec": spec}


@pytest.fixture
async def api():
    async with ApiServer() as server:
        server.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-b"}})
        yield server
        assert not server.internal_errors


@pytest.fixture
async def k8s(api):
    async with client.ApiClient(api.client_configuration()) as ac:
        yield ac


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def shape(obj, drop=("managedFields",)):
    """Key structure of a body, ignoring values."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items() if k not in drop}
    if isinstance(obj, list):
        return [shape(v) for v in obj[:1]]
    return type(obj).__name__


async def test_job_create_applies_server_defaults_like_1_24(k8s):
    batch = client.BatchV1Api(k8s)
    resp = await batch.create_namespaced_job("team-b", job_body("train-1"), _preload_content=False)
    assert resp.status == 201
    raw = await resp.read()
    assert raw.endswith(b"}\n")
    got, want = json.loads(raw), fixture("api/job.create-response.201.json")
    assert list(got) == list(want)
    assert list(got["metadata"]) == [k for k in want["metadata"] if k != "managedFields"]
    assert list(got["spec"]) == list(want["spec"])
    uid = got["metadata"]["uid"]
    assert got["spec"]["selector"] == {"matchLabels": {"controller-uid": uid}}
    assert got["spec"]["template"]["metadata"] == {"creationTimestamp": None, "labels": {
        "controller-uid": uid, "job-name": "train-1"}}
    for k in ("parallelism", "completions", "backoffLimit", "completionMode", "suspend"):
        assert got["spec"][k] == want["spec"][k]
    tspec, wspec = got["spec"]["template"]["spec"], want["spec"]["template"]["spec"]
    assert {k: v for k, v in tspec.items() if k != "containers"} == \
        {k: v for k, v in wspec.items() if k != "containers"}
    assert list(tspec["containers"][0]) == [k for k in wspec["containers"][0] if k != "command"]
    assert got["status"] == {}
    unsuspended = await batch.create_namespaced_job("team-b", job_body("train-2", suspend=None))
    assert unsuspended.spec.suspend is False


async def test_not_found_conflict_and_invalid_bodies_match_recordings(k8s, api):
    batch, co = client.BatchV1Api(k8s), client.CustomObjectsApi(k8s)
    with pytest.raises(ApiException) as e:
        await batch.read_namespaced_job("does-not-exist", "team-b")
    assert e.value.status == 404 and status_of(e.value) == fixture("api/job.get-not-found.404.json")
    with pytest.raises(ApiException) as e:
        await batch.delete_namespaced_job("does-not-exist", "team-b")
    assert status_of(e.value) == fixture("api/job.delete-not-found.404.json")
    with pytest.raises(ApiException) as e:
        await co.get_cluster_custom_object(*KUEUE, "clusterqueues", "does-not-exist")
    assert status_of(e.value) == fixture("api/clusterqueue.get-not-found.404.json")

    job = await batch.create_namespaced_job("team-b", job_body("train-1"))
    stale = job.metadata.resource_version
    await batch.patch_namespaced_job("train-1", "team-b", {"metadata": {"annotations": {"bump": "1"}}})
    job.metadata.annotations = {"bump": "2"}
    with pytest.raises(ApiException) as e:
        await batch.replace_namespaced_job("train-1", "team-b", job)
    assert e.value.status == 409 and status_of(e.value) == fixture("api/job.update-with-stale-resourceVersion.409-conflict.json")
    assert job.metadata.resource_version == stale

    cq = await co.create_cluster_custom_object(*KUEUE, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team-b-cq"},
        "spec": {"namespaceSelector": {}}})
    await co.patch_cluster_custom_object(*KUEUE, "clusterqueues", "team-b-cq", {"spec": {"cohortName": "x"}},
                                         **MERGE)
    with pytest.raises(ApiException) as e:
        await co.replace_cluster_custom_object(*KUEUE, "clusterqueues", "team-b-cq", cq)
    assert status_of(e.value) == fixture("api/clusterqueue.update-with-stale-resourceVersion.409-conflict.json")

    no_containers = job_body("no-containers")
    no_containers["spec"]["template"]["spec"]["containers"] = []
    with pytest.raises(ApiException) as e:
        await batch.create_namespaced_job("team-b", no_containers)
    assert e.value.status == 422 and status_of(e.value) == fixture("api/job.create-invalid-no-containers.422.json")
    with pytest.raises(ApiException) as e:
        await co.create_cluster_custom_object(*KUEUE, "clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "GPU_Queue"}})
    assert status_of(e.value) == fixture("api/clusterqueue.create-invalid-name.422.json")

    job = await batch.read_namespaced_job("train-1", "team-b")
    job.spec.completions = 2
    with pytest.raises(ApiException) as e:
        await batch.replace_namespaced_job("train-1", "team-b", job)
    assert status_of(e.value) == fixture("api/job.update-immutable-completions.422.json")


async def test_dict_patch_of_custom_object_is_sent_as_json_patch_and_rejected(k8s):
    co = client.CustomObjectsApi(k8s)
    await co.create_cluster_custom_object(*KUEUE, "cohorts", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "c"}})
    with pytest.raises(ApiException) as e:
        await co.patch_cluster_custom_object(*KUEUE, "cohorts", "c", {"spec": {"parentName": "p"}})
    assert e.value.status == 400


async def test_unserved_path_is_plain_text_404(api):
    async with aiohttp.ClientSession() as s:
        async with s.get(api.url + "/apis/kueue.x-k8s.io/v1beta1/workloads") as r:
            assert r.status == 404
            assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert await r.text() == k8s_recording("api/unknown-resource-type.workloads-crd-not-installed.404.body.txt").read_text()


async def test_status_subresource_and_main_resource_each_change_only_their_part(k8s):
    co = client.CustomObjectsApi(k8s)
    await co.create_cluster_custom_object(*KUEUE, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}}, "status": {"pendingWorkloads": 9}})
    cq = await co.get_cluster_custom_object(*KUEUE, "clusterqueues", "cq")
    assert "status" not in cq  # status is dropped on create when a status subresource exists
    out = await co.patch_cluster_custom_object_status(*KUEUE, "clusterqueues", "cq", {
        "spec": {"cohortName": "ignored"}, "status": {"pendingWorkloads": 1}}, **MERGE)
    assert out["status"] == {"pendingWorkloads": 1} and "cohortName" not in out["spec"]
    assert out["metadata"]["generation"] == 1
    out = await co.patch_cluster_custom_object(*KUEUE, "clusterqueues", "cq", {
        "spec": {"cohortName": "c"}, "status": {"pendingWorkloads": 7}}, **MERGE)
    assert out["status"] == {"pendingWorkloads": 1} and out["spec"]["cohortName"] == "c"
    assert out["metadata"]["generation"] == 2
    # unstructured custom resources come back with sorted keys, like the recordings
    assert list(out) == sorted(out) and list(out["metadata"]) == sorted(out["metadata"])
    # a no-op write is not persisted
    again = await co.patch_cluster_custom_object(*KUEUE, "clusterqueues", "cq", {"spec": {"cohortName": "c"}}, **MERGE)
    assert again["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]
    ops = [{"op": "test", "path": "/status/pendingWorkloads", "value": 99},
           {"op": "replace", "path": "/status/pendingWorkloads", "value": 2}]
    with pytest.raises(ApiException) as e:
        await co.patch_cluster_custom_object_status(*KUEUE, "clusterqueues", "cq", ops)
    assert status_of(e.value) == fixture("api/clusterqueue.status.json-patch-failed-test-op.422.json")


async def test_json_patch_and_strategic_merge_of_conditions(k8s, api):
    core = client.CoreV1Api(k8s)
    pod = await core.create_namespaced_pod("team-b", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "busybox:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    assert pod.spec.containers[0].resources.requests == {"nvidia.com/gpu": "1"}
    assert pod.status.phase == "Pending" and pod.spec.priority == 0
    body = fixture("job-lifecycle/08-pod-status.strategic-merge-patch-to-Running.request-body.json")
    out = await core.patch_namespaced_pod_status("p", "team-b", body)
    assert out.status.phase == "Running" and len(out.status.conditions) == 3
    second = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]}}
    out = await core.patch_namespaced_pod_status("p", "team-b", second)
    by_type = {c.type: c for c in out.status.conditions}
    assert len(out.status.conditions) == 3 and by_type["Ready"].status == "False"
    assert by_type["Initialized"].status == "True"
    out = await core.patch_namespaced_pod("p", "team-b", [{"op": "add", "path": "/metadata/labels",
                                                           "value": {"a": "b"}}])
    assert out.metadata.labels == {"a": "b"}
    co = client.CustomObjectsApi(k8s)
    await co.create_cluster_custom_object(*KUEUE, "resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gh200"}})
    async with aiohttp.ClientSession() as s:
        async with s.patch(api.url + "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/gh200", data=b"{}",
                           headers={"Content-Type": "application/strategic-merge-patch+json"}) as r:
            assert r.status == 415


async def test_dry_run_create_stores_nothing(k8s):
    batch = client.BatchV1Api(k8s)
    resp = await batch.create_namespaced_job("team-b", job_body("dry"), dry_run="All", _preload_content=False)
    got = json.loads(await resp.read())
    want = fixture("admission/job-create-response.dry-run-server.201.json")
    assert resp.status == 201 and "resourceVersion" not in got["metadata"] and "resourceVersion" not in want["metadata"]
    assert got["metadata"]["uid"] and got["metadata"]["creationTimestamp"]
    assert (await batch.list_namespaced_job("team-b")).items == []


async def test_list_pagination_selectors_and_expired_continue(k8s, api):
    batch = client.BatchV1Api(k8s)
    for name in ("train-1", "train-2", "train-3"):
        await batch.create_namespaced_job("team-b", job_body(name))
    await batch.patch_namespaced_job("train-2", "team-b", {"metadata": {"labels": {"tier": "gold"}}})
    resp = await batch.list_namespaced_job("team-b", limit=1, _preload_content=False)
    page = json.loads(await resp.read())
    want = fixture("api/jobs.list.paginated-limit-1.first-page.200.json")
    assert list(page) == list(want) and list(page["metadata"]) == list(want["metadata"])
    assert list(page["items"][0]) == list(want["items"][0]) == ["metadata", "spec", "status"]
    assert page["metadata"]["remainingItemCount"] == 2
    names = [page["items"][0]["metadata"]["name"]]
    token = page["metadata"]["continue"]
    # a write between pages does not show: pages come from the first page's snapshot
    await batch.create_namespaced_job("team-b", job_body("train-25"))
    while token:
        nxt = await batch.list_namespaced_job("team-b", limit=1, _continue=token)
        names += [j.metadata.name for j in nxt.items]
        token = nxt.metadata._continue
    assert names == ["train-1", "train-2", "train-3"]
    sel = await batch.list_namespaced_job("team-b", label_selector="tier in (gold,silver)")
    assert [j.metadata.name for j in sel.items] == ["train-2"]
    sel = await batch.list_namespaced_job("team-b", label_selector="!tier,kueue.x-k8s.io/queue-name=gpu-queue")
    assert [j.metadata.name for j in sel.items] == ["train-1", "train-25", "train-3"]
    sel = await batch.list_job_for_all_namespaces(field_selector="metadata.name=train-3")
    assert [j.metadata.name for j in sel.items] == ["train-3"]
    first = await batch.list_namespaced_job("team-b", limit=1)
    await batch.delete_namespaced_job("train-25", "team-b")
    api.compact()  # the history before the delete is gone: the first page's snapshot cannot be rebuilt
    with pytest.raises(ApiException) as e:
        await batch.list_namespaced_job("team-b", limit=1, _continue=first.metadata._continue)
    body, want = status_of(e.value), fixture("api/jobs.list.continue-token-after-compaction.410.json")
    assert e.value.status == 410 and body["message"] == want["message"] and list(body) == list(want)
    assert body["metadata"]["continue"]
    with pytest.raises(ApiException) as e:
        await batch.list_namespaced_job("team-b", resource_version="2", resource_version_match="Exact")
    assert status_of(e.value) == fixture("api/jobs.list.resourceVersionMatch-Exact-compacted-rv.410.json")


async def test_lease_micro_time_and_conflict(k8s):
    core, coord = client.CoreV1Api(k8s), client.CoordinationV1Api(k8s)
    await core.create_namespace({"metadata": {"name": "gpuqueue-system"}})
    body = fixture("api/lease.create.request-body.json")
    bad = json.loads(json.dumps(body))
    bad["spec"]["renewTime"] = "2026-12-02T11:00:54Z"
    with pytest.raises(ApiException) as e:
        await coord.create_namespaced_lease("gpuqueue-system", bad)
    assert e.value.status == 400 and status_of(e.value) == fixture("api/lease.create-renewTime-without-microseconds.400.json")
    for case in fixture("api/lease.microtime-format-acceptance.json")["cases"].values():
        trial = json.loads(json.dumps(body))
        trial["metadata"]["name"] = "probe"
        trial["spec"]["renewTime"] = case["sent"]
        out = await coord.create_namespaced_lease("gpuqueue-system", trial, _preload_content=False)
        got = json.loads(await out.read())
        assert out.status == case["http_status"]
        if out.status == 201:
            assert got["spec"]["renewTime"] == case["stored_or_error"]
            await coord.delete_namespaced_lease("probe", "gpuqueue-system")
        else:
            assert got["message"] == case["stored_or_error"]
    lease = await coord.create_namespaced_lease("gpuqueue-system", body)
    renew = fixture("api/lease.update-renew.request-body.json")
    renew["metadata"]["resourceVersion"] = lease.metadata.resource_version
    await coord.replace_namespaced_lease(lease.metadata.name, "gpuqueue-system", renew)
    with pytest.raises(ApiException) as e:
        await coord.replace_namespaced_lease(lease.metadata.name, "gpuqueue-system", renew)
    assert status_of(e.value) == fixture("api/lease.update-stale-resourceVersion.409-conflict.json")


async def test_events_share_storage_across_api_groups(k8s, api):
    ev = client.EventsV1Api(k8s)
    body = fixture("api/event.events-k8s-io-v1.create.request-body.json")
    missing = json.loads(json.dumps(body))
    missing["metadata"]["name"] = "train-2.bad"
    del missing["eventTime"], missing["reportingController"]
    with pytest.raises(ApiException) as e:
        await ev.create_namespaced_event("team-b", missing)
    assert status_of(e.value) == fixture("api/event.events-k8s-io-v1.create-missing-eventTime-reportingController.422.json")
    resp = await ev.create_namespaced_event("team-b", body, _preload_content=False)
    created = json.loads(await resp.read())
    want = fixture("api/event.events-k8s-io-v1.create.response.201.json")
    assert list(created) == list(want)
    core = client.CoreV1Api(k8s)
    resp = await core.read_namespaced_event(body["metadata"]["name"], "team-b", _preload_content=False)
    got, want = json.loads(await resp.read()), fixture("api/event.events-k8s-io-v1-created.read-back-via-core-v1.200.json")
    assert list(got) == list(want)
    drop = lambda d: {k: v for k, v in d.items() if k != "metadata"}  # noqa: E731
    assert drop(got) == drop(want)


async def test_namespace_must_exist(k8s):
    with pytest.raises(ApiException) as e:
        await client.BatchV1Api(k8s).create_namespaced_job("nowhere", job_body("j"))
    assert e.value.status == 404 and status_of(e.value)["message"] == 'namespaces "nowhere" not found'


@pytest.mark.parametrize("minor", [24, 36])
async def test_a_suspended_jobs_resources_change_from_1_36_on(minor):
    """KEP-5440 (MutablePodResourcesForSuspendedJobs, beta and on in 1.36): container and init
    container resources of a suspended Job with no active pod may change; nothing else of the
    template does, and a running Job's do not."""
    async with ApiServer(kubernetes_minor=minor) as server:
        server.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-b"}})
        server.cluster.create(R.JOBS, "team-b", job_body("held"))
        server.cluster.create(R.JOBS, "team-b", job_body("running", suspend=False))

        def raised(name: str, image: str | None = None) -> dict:
            job = server.cluster.get(R.JOBS, "team-b", name)
            container = job["spec"]["template"]["spec"]["containers"][0]
            container["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
            if image:
                container["image"] = image
            return job

        def refused(body: dict) -> bool:
            try:
                server.cluster.update(R.JOBS, "team-b", body["metadata"]["name"], body)
            except Exception as exc:  # noqa: BLE001 - the stand-in's ApiError
                return getattr(exc, "code", None) == 422
            return False

        assert refused(raised("held")) == (minor < 36)
        assert refused(raised("held", image="other"))
        assert refused(raised("running"))


@pytest.mark.parametrize("minor", [24, 27])
async def test_an_indexed_jobs_completions_follow_its_parallelism_from_1_27_on(minor):
    async with ApiServer(kubernetes_minor=minor) as server:
        server.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-b"}})
        body = job_body("idx", parallelism=2)
        body["spec"]["completionMode"] = "Indexed"
        server.cluster.create(R.JOBS, "team-b", body)
        job = server.cluster.get(R.JOBS, "team-b", "idx")
        job["spec"]["parallelism"] = job["spec"]["completions"] = 4
        if minor < 27:
            with pytest.raises(Exception, match="field is immutable"):
                server.cluster.update(R.JOBS, "team-b", "idx", job)
        else:
            assert server.cluster.update(R.JOBS, "team-b", "idx", job)["spec"]["completions"] == 4
            job = server.cluster.get(R.JOBS, "team-b", "idx")
            job["spec"]["completions"] = 3  # no longer equal to parallelism
            with pytest.raises(Exception, match="field is immutable"):
                server.cluster.update(R.JOBS, "team-b", "idx", job)


async def test_observers_see_which_client_wrote(api):
    seen = []
    api.observe(lambda w: seen.append((w.verb, w.resource.kind, w.user)))
    async with client.ApiClient(api.client_configuration()) as ac:
        ac.user_agent = "tenant"
        await client.BatchV1Api(ac).create_namespaced_job("team-b", job_body("mine"))
    api.cluster.create(R.CRON_JOBS, "team-b", {"metadata": {"name": "nightly"}, "spec": {"schedule": "* * * * *"}})
    assert ("create", "Job", "tenant") in seen and ("create", "CronJob", None) in seen
