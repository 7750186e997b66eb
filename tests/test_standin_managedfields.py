"""The stand-in's managedFields (ApiServer(managed_fields=True), tests/standin/managedfields.py):
what a real 1.24 server adds to every object, so that what clients cache and send has the
recorded size."""
import json

import orjson
import pytest
from kubernetes_asyncio import client

from tests.shared_fixtures import k8s_recording
from tests.standin import ApiServer
from tests.standin import resources as R



def job_body() -> dict:
    stored = json.loads(k8s_recording("job-lifecycle/01-job-a.create-suspended.response.201.json").read_text())
    spec = {k: v for k, v in stored["spec"].items() if k != "selector"}
    spec["template"] = {"spec": stored["spec"]["template"]["spec"]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "gpu-job-a", "labels": stored["metadata"]["labels"]}, "spec": spec}


@pytest.fixture
async def jobs():
    async with ApiServer(managed_fields=True) as api:
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a"}})
        async with client.ApiClient(api.client_configuration()) as ac:
            yield api, client.BatchV1Api(ac)
        assert not api.internal_errors


async def read(api) -> dict:
    return api.cluster.get(R.JOBS, "team-a", "gpu-job-a")


async def test_a_created_object_names_its_manager_and_every_field(jobs):
    api, batch = jobs
    created = orjson.loads(await (await batch.create_namespaced_job("team-a", job_body(),
                                                                    _preload_content=False)).read())
    (entry,) = created["metadata"]["managedFields"]
    assert entry["manager"] == "OpenAPI-Generator"  # kubernetes_asyncio's User-Agent, up to its first "/"
    assert entry["operation"] == "Update" and entry["fieldsType"] == "FieldsV1"
    worker = entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"worker"}']
    assert {"f:image", "f:resources", "f:command", "."} <= set(worker)
    # about what the recordings show: managedFields ~40% of a Job's bytes
    share = len(orjson.dumps(created["metadata"]["managedFields"])) / len(orjson.dumps(created))
    assert 0.3 < share < 0.6


async def test_a_put_without_managed_fields_keeps_them_and_a_no_op_writes_nothing(jobs):
    api, batch = jobs
    await batch.create_namespaced_job("team-a", job_body(), _preload_content=False)
    stored = await read(api)
    body = {**stored, "metadata": {k: v for k, v in stored["metadata"].items() if k != "managedFields"}}
    again = orjson.loads(await (await batch.replace_namespaced_job("gpu-job-a", "team-a", body,
                                                                   _preload_content=False)).read())
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == stored["metadata"]["managedFields"]


async def test_a_change_moves_the_field_to_its_writer(jobs):
    api, batch = jobs
    await batch.create_namespaced_job("team-a", job_body(), _preload_content=False)
    stored = await read(api)
    stored["spec"]["suspend"] = False
    stored["metadata"].pop("managedFields")
    await batch.replace_namespaced_job("gpu-job-a", "team-a", stored, _preload_content=False,
                                       field_manager="gpuqueue-controller")
    entries = {e["manager"]: e for e in (await read(api))["metadata"]["managedFields"]}
    assert "f:suspend" in entries["gpuqueue-controller"]["fieldsV1"]["f:spec"]
    assert "f:suspend" not in entries["OpenAPI-Generator"]["fieldsV1"]["f:spec"]
    assert "f:parallelism" in entries["OpenAPI-Generator"]["fieldsV1"]["f:spec"]


async def test_a_status_write_is_its_own_entry(jobs):
    api, batch = jobs
    await batch.create_namespaced_job("team-a", job_body(), _preload_content=False)
    api.cluster.update(R.JOBS, "team-a", "gpu-job-a", {"metadata": {"name": "gpu-job-a"},
                                                        "status": {"active": 1}},
                       subresource="status", verb="job-controller")
    entries = (await read(api))["metadata"]["managedFields"]
    status = [e for e in entries if e.get("subresource") == "status"]
    assert [e["manager"] for e in status] == ["kube-controller-manager"]
    assert status[0]["fieldsV1"] == {"f:status": {"f:active": {}}}


async def test_off_by_default():
    async with ApiServer() as api:
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a"}})
        job = api.cluster.create(R.JOBS, "team-a", job_body())
        assert "managedFields" not in job["metadata"]
