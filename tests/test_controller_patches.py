"""The controller's writes are JSON merge patches of what changed, carrying the resourceVersion of
the object they were computed from (issue 16: a PUT sent the whole object). A patch computed from
a stale object is refused with 409, as a stale PUT is, and made again from a live read: nothing is
written over a record the controller has not seen - not a reservation, not a Job's template."""

import json
from urllib.parse import urlsplit

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.writes.records import read_modify_write
from tests.shared_fixtures import k8s_recording
from tests.controller_support import Harness, eventually, scenario, together_one_pending



async def test_a_merge_patch_with_a_stale_resource_version_gets_409_as_a_stale_put_does():
    async with Harness() as h:
        _, jobs, _ = scenario("together-quota.yaml")
        created = await h.submit(jobs[0])
        name, stale = created["metadata"]["name"], created["metadata"]["resourceVersion"]
        await h.kube.merge_patch(K.JOBS, "default", name, {"metadata": {"labels": {"edited": "yes"}}})
        with pytest.raises(ApiException) as refused:
            await h.kube.merge_patch(K.JOBS, "default", name, {"metadata": {"resourceVersion": stale},
                                                               "spec": {"suspend": False}})
        recorded = json.loads(k8s_recording("api", "job.update-with-stale-resourceVersion.409-conflict.json").read_text())
        body = json.loads(refused.value.body)
        assert refused.value.status == 409
        assert {k: body[k] for k in ("reason", "code", "status")} == {"reason": "Conflict", "code": 409,
                                                                        "status": "Failure"}
        assert body["message"] == recorded["message"].replace("train-1", name)
        assert h.job("default", name)["spec"]["suspend"] is True  # refused: nothing written
        current = h.job("default", name)["metadata"]["resourceVersion"]
        done = await h.kube.merge_patch(K.JOBS, "default", name, {"metadata": {"resourceVersion": current,
                                                                               "annotations": {"a": "b"}}})
        assert done["metadata"]["annotations"] == {"a": "b"}


async def test_a_status_write_from_a_stale_cache_is_refused_then_made_on_the_record_as_it_is():
    """The Workload changed after the controller's copy (here a condition another writer added):
    the write from the copy is refused and the change is made again on a live read, keeping
    the other writer's condition."""
    async with Harness() as h:
        await together_one_pending(h)
        wl = h.workload_of("default", "gpu-job-b")
        name = wl["metadata"]["name"]
        stale = json.loads(json.dumps(wl))
        other = W.set_condition(wl["status"]["conditions"], "PodsReady", "False", "Other", "another writer",
                                W.now_rfc3339())
        await h.kube.merge_patch(K.WORKLOADS, "default", name, {"status": {"conditions": other}}, "status")
        h.api.requests.clear()

        def change(obj: dict) -> dict:
            status = obj.setdefault("status", {})
            status["conditions"] = W.set_condition(status.get("conditions") or [], "Mine", "True", "Mine", "ours",
                                                   W.now_rfc3339())
            return obj

        result = await read_modify_write(h.kube, K.WORKLOADS, "default", name, stale, change, "status",
                                         protect=W.status_copy)
        types = {c["type"] for c in result["status"]["conditions"]}
        assert {"PodsReady", "Mine", "QuotaReserved"} <= types
        stored = h.workload_of("default", "gpu-job-b")
        assert W.condition(stored, "PodsReady")["message"] == "another writer"
        calls = [(m, urlsplit(p).path) for m, p in h.api.requests if name in p]
        path = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/{name}"
        assert calls == [("PATCH", path + "/status"), ("GET", path), ("PATCH", path + "/status")]


async def test_the_controllers_writes_are_patches_of_what_changed():
    """An admission's writes carry only what changed: the Workload's status, the Job's suspend,
    nodeSelector and annotation - with the resourceVersion they were computed from."""
    async with Harness() as h:
        bodies: list[tuple[str, str, dict]] = []
        original = h.api.cluster.patch

        def recording(rt, namespace, name, content_type, patch_body, **kw):
            bodies.append((rt.plural + ("/" + kw["subresource"] if kw.get("subresource") else ""), content_type,
                           json.loads(json.dumps(patch_body))))
            return original(rt, namespace, name, content_type, patch_body, **kw)

        h.api.cluster.patch = recording
        await together_one_pending(h)
        await eventually(lambda: any(r == "jobs" for r, _, _ in bodies), what="the Job's unsuspension")
        for resource, content_type, body in bodies:
            assert content_type == "application/merge-patch+json"
            assert body["metadata"]["resourceVersion"]
            if resource == "workloads/status":
                assert set(body) == {"metadata", "status"} and set(body["metadata"]) == {"resourceVersion"}
        unsuspend = next(b for r, _, b in bodies if r == "jobs")
        assert set(unsuspend) == {"metadata", "spec"}
        assert unsuspend["spec"]["suspend"] is False
        assert set(unsuspend["spec"]) <= {"suspend", "template"}
        assert "containers" not in unsuspend["spec"].get("template", {}).get("spec", {})
