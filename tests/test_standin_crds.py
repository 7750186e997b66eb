"""The stand-in serves CustomResourceDefinitions as kube-apiserver 1.24 does: a kind is served once
its CRD is created, every served version on one storage, and each write is pruned, defaulted and
validated against the storage version's schema."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.standin import ApiServer
from tests.standin import crds
from tests.standin import resources as R
from tests.workload_kinds import JOBSET, PYTORCHJOB, RAYJOB


@pytest.fixture
async def k8s():
    async with ApiServer() as api:
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a"}})
        async with client.ApiClient(api.client_configuration()) as ac:
            yield api, ac
        assert not api.internal_errors


async def test_a_kind_is_served_once_its_crd_is_created(k8s):
    api, ac = k8s
    co = client.CustomObjectsApi(ac)
    with pytest.raises(ApiException) as err:
        await co.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "team-a", "jobsets")
    assert (err.value.status, err.value.body) == (404, "404 page not found\n")
    await client.ApiextensionsV1Api(ac).create_custom_resource_definition(crds.fixture("jobsets.jobset.x-k8s.io"))
    listed = await co.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "team-a", "jobsets")
    assert (listed["kind"], listed["items"]) == ("JobSetList", [])
    await co.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "team-a", "jobsets", JOBSET.fresh())
    await client.ApiextensionsV1Api(ac).delete_custom_resource_definition("jobsets.jobset.x-k8s.io")
    with pytest.raises(ApiException) as err:
        await co.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "team-a", "jobsets")
    assert err.value.status == 404


async def test_unknown_fields_are_pruned_and_defaults_filled_in(k8s):
    api, ac = k8s
    api.install_crds("jobsets.jobset.x-k8s.io", "pytorchjobs.kubeflow.org")
    co = client.CustomObjectsApi(ac)
    body = JOBSET.fresh()
    body["spec"]["replicatedJobs"][0]["bogus"] = {"x": 1}
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"labels": {"a": "b"}}
    stored = await co.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "team-a", "jobsets", body)
    driver = stored["spec"]["replicatedJobs"][0]
    assert "bogus" not in driver and driver["replicas"] == 1 and driver["groupName"] == "default"
    assert driver["template"]["spec"]["template"]["metadata"] == {"labels": {"a": "b"}}  # embedded metadata kept
    body = PYTORCHJOB.fresh()
    body["spec"]["runPolicy"] = {}
    stored = await co.create_namespaced_custom_object("kubeflow.org", "v1", "team-a", "pytorchjobs", body)
    assert stored["spec"]["runPolicy"] == {"suspend": False}  # defaults apply inside what exists
    body["metadata"]["name"] = "bert-2"
    del body["spec"]["runPolicy"]
    stored = await co.create_namespaced_custom_object("kubeflow.org", "v1", "team-a", "pytorchjobs", body)
    assert "runPolicy" not in stored["spec"]


async def test_every_served_version_shares_one_storage(k8s):
    api, ac = k8s
    api.install_crds("rayjobs.ray.io")
    co = client.CustomObjectsApi(ac)
    await co.create_namespaced_custom_object("ray.io", "v1", "team-a", "rayjobs", RAYJOB.fresh())
    old = await co.get_namespaced_custom_object("ray.io", "v1alpha1", "team-a", "rayjobs", "tune")
    assert old["apiVersion"] == "ray.io/v1alpha1" and old["spec"]["entrypoint"] == "python tune.py"


async def test_status_writes_are_validated_too(k8s):
    api, ac = k8s
    api.install_crds("jobsets.jobset.x-k8s.io")
    co = client.CustomObjectsApi(ac)
    stored = await co.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "team-a", "jobsets",
                                                      JOBSET.fresh())
    stored["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
    with pytest.raises(ApiException) as err:
        await co.replace_namespaced_custom_object_status("jobset.x-k8s.io", "v1alpha2", "team-a", "jobsets",
                                                         "train", stored)
    message = json.loads(err.value.body)["message"]
    assert message.startswith('JobSet.jobset.x-k8s.io "train" is invalid: [status.conditions[0].lastTransitionTime: '
                              'Required value')


def test_the_schema_checks_speak_kube_apiservers_words():
    schema = {"type": "object", "properties": {"spec": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "maxLength": 3, "pattern": "^[a-z]+$"},
        "mode": {"type": "string", "enum": ["A", "B"]},
        "n": {"type": "integer", "minimum": 1, "maximum": 5},
        "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "items": {"type": "array", "maxItems": 1, "items": {"type": "string"}}}}}}
    errs = crds.validation_errors(schema, {"spec": {"name": "ABCD", "mode": "C", "n": 0, "port": 1.5,
                                                    "items": ["a", 2]}})
    assert [f"{e.field}: {e.detail}" for e in errs] == [
        "spec.name: Too long: may not be longer than 3",
        "spec.name: Invalid value: \"ABCD\": spec.name in body should match '^[a-z]+$'",
        'spec.mode: Unsupported value: "C": supported values: "A", "B"',
        "spec.n: Invalid value: 0: spec.n in body should be greater than or equal to 1",
        'spec.port: Invalid value: "number": spec.port in body must be of type integer,string: "number"',
        "spec.items: Too many: 2: must have at most 1 items",
        'spec.items[1]: Invalid value: "integer": spec.items[1] in body must be of type string: "integer"',
    ]
    assert [f"{e.field}: {e.detail}" for e in crds.validation_errors(schema, {"spec": {}})] == [
        "spec.name: Required value"]
