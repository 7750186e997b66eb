"""The queue view fed by watch events, and starting without a cluster."""

from __future__ import annotations

import asyncio
import json
import logging

from tests.shared_fixtures import k8s_recording
from tests.webhook_support import (
    api_calls, assert_calls_match_access_table, client_context, decode_patch, load_review, make_cert_dir, webhook_args,
    wire,
)
from gpuqueue.webhook.cluster import WatchedQueueView
from gpuqueue.webhook.command import serve
from gpuqueue.jobframework.managed import DEFAULT_PRIORITY_CLASS_ANNOTATION, ManagedJobsConfig
from gpuqueue.jobframework.mutation import mutate_job



def test_view_answers_from_events():
    view = WatchedQueueView()
    view.apply_event("localqueues", "ADDED", {"metadata": {"namespace": "team-a", "name": "default"}})
    view.apply_event("namespaces", "ADDED", {"metadata": {"name": "team-a", "labels": {"gpu": "yes"}}})
    view.apply_event("workloadpriorityclasses", "ADDED",
                     {"metadata": {"name": "normal", "annotations": {DEFAULT_PRIORITY_CLASS_ANNOTATION: "true"}},
                      "value": 100})
    view.apply_event("workloadpriorityclasses", "ADDED", {"metadata": {"name": "high"}, "value": 1000})
    view.apply_event("cohorts", "ADDED", {"metadata": {"name": "team"}, "spec": {"parentName": "org"}})
    assert not view.ready()  # no informer has listed anything
    job = load_review("mutating-review-request.job-create.no-labels.json")["request"]["object"]
    res = mutate_job(job, view, ManagedJobsConfig())
    assert res.queue_name == "default"
    assert res.job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "normal"
    assert view.namespace_labels("team-a") == {"gpu": "yes"} and view.cohort_parent("team") == "org"

    view.apply_event("localqueues", "DELETED", {"metadata": {"namespace": "team-a", "name": "default"}})
    assert not mutate_job(job, view, ManagedJobsConfig()).managed
    view.apply_event("workloadpriorityclasses", "MODIFIED", {"metadata": {"name": "normal"}, "value": 100})
    assert view.default_priority_class() is None


def test_bookmarks_and_recorded_watch_lines_are_harmless():
    view = WatchedQueueView()
    for line in k8s_recording("api", "clusterqueues.watch.bookmarks.stream.jsonl").read_text().splitlines():
        event = json.loads(line)
        view.apply_event("cohorts", event["type"], event["object"])  # BOOKMARKs carry no name-bearing change
    assert view.cohort_parents == {}


async def test_starts_without_cluster_and_warns_once(tmp_path, monkeypatch, caplog):
    cert_dir = make_cert_dir(tmp_path / "tls")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = webhook_args(cert_dir, "--controller-username=ctrl", "--max-body-bytes=1048576")
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(serve(args, stop))
    for _ in range(100):
        if "webhook serving on" in caplog.text:
            break
        await asyncio.sleep(0.02)
    port = int(caplog.text.split("webhook serving on https://127.0.0.1:")[1].split()[0])
    import aiohttp
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(cert_dir))) as s:
        async with s.get(f"https://127.0.0.1:{port}/readyz") as r:
            assert r.status == 200
        body = wire(load_review("mutating-review-request.job-create.suspend-false.json"))
        async with s.post(f"https://127.0.0.1:{port}/mutate-batch-v1-job", data=body) as r:
            assert (await r.json())["response"]["patchType"] == "JSONPatch"
    stop.set()
    await task
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "no cluster found" in warnings[0].getMessage()


async def test_waits_for_its_certificate_instead_of_exiting(tmp_path, monkeypatch, caplog):
    """On a first install the certs Job may write the Secret after the webhook started: it waits
    for the files (the kubelet fills in the volume) and serves once they are there."""
    from gpuqueue.certs.generate import ServingIdentity, generate, write_files

    cert_dir = tmp_path / "not-yet"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(serve(webhook_args(cert_dir, "--cert-check-seconds=0.05"), stop))
    await eventually(lambda: "no serving certificate in" in caplog.text)
    assert not task.done()
    write_files(cert_dir, generate(ServingIdentity(ips=("127.0.0.1",), dns=("localhost",))))
    await eventually(lambda: "webhook serving on" in caplog.text)
    stop.set()
    await task


async def test_told_to_stop_it_answers_through_the_shutdown_delay_then_closes(tmp_path, monkeypatch, caplog):
    """A replica being replaced still gets calls until the Service's endpoints drop it: it answers
    them for --shutdown-delay-seconds after the SIGTERM, then stops listening."""
    import aiohttp

    cert_dir = make_cert_dir(tmp_path / "tls")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(serve(webhook_args(cert_dir, "--shutdown-delay-seconds=1.0"), stop))
    await eventually(lambda: "webhook serving on" in caplog.text)
    base = f"https://127.0.0.1:{int(caplog.text.split('webhook serving on https://127.0.0.1:')[1].split()[0])}"
    doc = load_review("mutating-review-request.job-create.with-queue-name-label.json")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(cert_dir))) as s:
        async with s.post(f"{base}/mutate-batch-v1-job", data=wire(doc)) as r:  # a kept-alive connection
            assert r.status == 200 and "close" not in r.headers.get("Connection", "").lower()
        stopped_at = asyncio.get_running_loop().time()
        stop.set()
        await asyncio.sleep(0.5)
        for _ in range(2):  # the kept-alive connection's last call, then a new connection's, mid-delay
            async with s.post(f"{base}/mutate-batch-v1-job", data=wire(doc)) as r:
                assert r.status == 200 and (await r.json())["response"]["allowed"] is True
                assert r.headers.get("Connection", "").lower() == "close"  # not to be used again
        assert not task.done()
        await task
        assert asyncio.get_running_loop().time() - stopped_at >= 1.0
        with pytest.raises(aiohttp.ClientConnectionError):
            await s.post(f"{base}/mutate-batch-v1-job", data=wire(doc))


# -- against the API server stand-in, with the real kubernetes_asyncio client ----------------------

import time  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402
from kubernetes_asyncio import client  # noqa: E402

from tests.standin import ApiServer  # noqa: E402
from tests.standin import resources as R  # noqa: E402
from gpuqueue.webhook.cluster import WATCHED, watch_cluster  # noqa: E402

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def local_queue(namespace: str, name: str = "default") -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": "gpu"}}


async def eventually(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


@pytest.fixture
async def api():
    async with ApiServer() as server:
        server.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a", "labels": {"gpu": "yes"}}})
        yield server
        assert not server.internal_errors


@pytest.fixture
async def watched(api):
    """A WatchedQueueView kept current by watch_cluster against the stand-in."""
    view = WatchedQueueView()
    task = asyncio.create_task(watch_cluster(view, api.client_configuration()))
    await eventually(view.ready)
    await eventually(lambda: api.open_watches == len(view.sources))
    yield view
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_queue_view_follows_creates_and_deletes(api, watched):
    view = watched
    assert view.namespace_labels("team-a")["gpu"] == "yes" and not view.local_queue_exists("team-a", "default")
    async with client.ApiClient(api.client_configuration()) as ac:
        co, core = client.CustomObjectsApi(ac), client.CoreV1Api(ac)
        await co.create_namespaced_custom_object(*KUEUE, "team-a", "localqueues", local_queue("team-a"))
        await eventually(lambda: view.local_queue_exists("team-a", "default"))
        await co.create_cluster_custom_object(*KUEUE, "cohorts", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "team"},
            "spec": {"parentName": "org"}})
        await co.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "value": 10,
            "metadata": {"name": "batch", "annotations": {DEFAULT_PRIORITY_CLASS_ANNOTATION: "true"}}})
        await core.patch_namespace("team-a", {"metadata": {"labels": {"gpu": "no"}}})
        await eventually(lambda: view.namespace_labels("team-a")["gpu"] == "no")
        assert view.cohort_parent("team") == "org" and view.default_priority_class() == "batch"

        await co.delete_namespaced_custom_object(*KUEUE, "team-a", "localqueues", "default")
        await core.delete_namespace("team-a")
        await eventually(lambda: not view.local_queue_exists("team-a", "default"))
        await eventually(lambda: view.namespace_labels("team-a") is None)


async def test_queue_view_resumes_after_a_dropped_stream(api, watched):
    view = watched
    assert api.drop_watches() == len(WATCHED)
    # written while no watch is open: the resumed watches replay it from their last resourceVersion
    api.cluster.create(R.LOCAL_QUEUES, "team-a", local_queue("team-a"))
    await eventually(lambda: view.local_queue_exists("team-a", "default"))
    await eventually(lambda: api.open_watches == len(WATCHED))
    assert [inf.lists for inf in view.sources] == [1] * len(WATCHED)


async def test_queue_view_relists_after_410_and_forgets_what_vanished(api, watched):
    view = watched
    api.cluster.create(R.LOCAL_QUEUES, "team-a", local_queue("team-a", "old"))
    await eventually(lambda: view.local_queue_exists("team-a", "old"))
    api.drop_watches()
    # all of this happens before the informers reconnect, and then the history is forgotten
    api.cluster.delete(R.LOCAL_QUEUES, "team-a", "old")
    api.cluster.create(R.LOCAL_QUEUES, "team-a", local_queue("team-a"))
    api.compact()
    await eventually(lambda: view.local_queue_exists("team-a", "default"))
    assert not view.local_queue_exists("team-a", "old")
    lq = next(inf for inf in view.sources if inf.name == "webhook:localqueues")
    assert lq.lists == 2
    api.cluster.delete(R.LOCAL_QUEUES, "team-a", "default")  # and the watch goes on after the relist
    await eventually(lambda: not view.local_queue_exists("team-a", "default"))


def use_standin(api, tmp_path, monkeypatch) -> None:
    """Point the kubeconfig loader of `gpuqueue webhook` at the stand-in."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "standin",
        "clusters": [{"name": "standin", "cluster": {"server": api.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


async def test_webhook_process_checks_pods_against_a_live_cluster(api, tmp_path, monkeypatch, caplog):
    """`gpuqueue webhook` with a kubeconfig: the ClusterQueues say which resources need an admission,
    and a tenant's binding is checked against the pod read from the API."""
    from tests.admission_support import binding_create, pod, pod_create

    cert_dir = make_cert_dir(tmp_path / "tls")
    use_standin(api, tmp_path, monkeypatch)
    api.cluster.create(R.CLUSTER_QUEUES, None, cluster_queue("gpu", "cpu", "memory", "nvidia.com/gpu"))
    api.cluster.create(R.PODS, "team-a", pod("team-a", gpus=2, name="train-0"))
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(serve(webhook_args(cert_dir), stop))
    await eventually(lambda: "webhook serving on" in caplog.text)
    base = f"https://127.0.0.1:{int(caplog.text.split('webhook serving on https://127.0.0.1:')[1].split()[0])}"
    import aiohttp
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(cert_dir))) as s:
            async def review(path: str, doc: dict) -> dict:
                async with s.post(base + path, data=wire(doc)) as r:
                    return (await r.json())["response"]

            for _ in range(500):
                async with s.get(f"{base}/readyz") as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.01)
            fpga = pod("team-a", gpus=0, node_name="n1")
            fpga["spec"]["containers"][0]["resources"]["limits"]["example.com/fpga"] = "1"
            assert (await review("/validate--v1-pod", pod_create(fpga)))["allowed"] is True  # not covered
            refused = await review("/validate--v1-pod", pod_create(pod("team-a", gpus=1, node_name="n1")))
            assert refused["status"]["message"].startswith("spec.nodeName: Forbidden")
            refused = await review("/validate--v1-binding", binding_create("team-a", "train-0", "n1", "alice"))
            assert refused["status"]["message"].startswith("target: Forbidden: only the schedulers")
            allowed = await review("/validate--v1-binding", binding_create("team-a", "train-0", "n1",
                                                                            "system:kube-scheduler"))
            assert allowed["allowed"] is True
    finally:
        stop.set()
        await task
    assert ("GET", "/api/v1/namespaces/team-a/pods/train-0") in api.requests  # read once, for alice


async def test_webhook_process_defaults_the_queue_from_a_live_cluster(api, tmp_path, monkeypatch, caplog):
    """`gpuqueue webhook` with a kubeconfig: readyz waits for the lists, and a LocalQueue created in
    the cluster is used as the Job's queue by the next review."""
    cert_dir = make_cert_dir(tmp_path / "tls")
    use_standin(api, tmp_path, monkeypatch)
    api.faults.add(r"/localqueues$", method="GET", watch=False, delay=0.3)  # hold the first LIST back
    args = webhook_args(cert_dir, "--controller-username=ctrl", "--max-body-bytes=1048576")
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(serve(args, stop))
    await eventually(lambda: "webhook serving on" in caplog.text)
    port = int(caplog.text.split("webhook serving on https://127.0.0.1:")[1].split()[0])
    base = f"https://127.0.0.1:{port}"
    review = load_review("mutating-review-request.job-create.no-labels.json")  # namespace team-a
    import aiohttp
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(cert_dir))) as s:
            async with s.get(f"{base}/readyz") as r:
                assert r.status == 503
            for _ in range(500):
                async with s.get(f"{base}/readyz") as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.01)
            assert r.status == 200
            async with s.post(f"{base}/mutate-batch-v1-job", data=wire(review)) as r:
                assert "patch" not in (await r.json())["response"]  # no label, no LocalQueue: unmanaged
            api.cluster.create(R.LOCAL_QUEUES, "team-a", local_queue("team-a"))
            for _ in range(500):
                async with s.post(f"{base}/mutate-batch-v1-job", data=wire(review)) as r:
                    response = (await r.json())["response"]
                if "patch" in response:
                    break
                await asyncio.sleep(0.01)
            ops = decode_patch(response)
            assert {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "default"}} in ops \
                or any(op["path"] == "/metadata/labels/kueue.x-k8s.io~1queue-name" and op["value"] == "default"
                       for op in ops)
    finally:
        stop.set()
        await task
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def cluster_queue(name: str, *covered: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"resourceGroups": [{"coveredResources": list(covered), "flavors": [
                {"name": "gh200", "resources": [{"name": r, "nominalQuota": "8"} for r in covered]}]}]}}


async def test_covered_resources_follow_the_clusterqueues(api, watched):
    """Which resources make a pod need an admission: every resource some ClusterQueue covers."""
    assert watched.covered_resources() == frozenset()
    api.cluster.create(R.CLUSTER_QUEUES, None, cluster_queue("gpu", "cpu", "nvidia.com/gpu"))
    api.cluster.create(R.CLUSTER_QUEUES, None, cluster_queue("fpga", "example.com/fpga"))
    await eventually(lambda: watched.covered_resources() == {"cpu", "nvidia.com/gpu", "example.com/fpga"})
    api.cluster.delete(R.CLUSTER_QUEUES, None, "fpga")
    await eventually(lambda: watched.covered_resources() == {"cpu", "nvidia.com/gpu"})
    assert WatchedQueueView().covered_resources() is None  # not listed yet: unknown, not "nothing"


async def test_calls_are_exactly_those_declared_for_the_webhook(api, watched):
    from gpuqueue.webhook.cluster import ApiPods

    api.cluster.create(R.LOCAL_QUEUES, "team-a", local_queue("team-a"))
    api.drop_watches()
    api.compact()  # re-watches and a relist too: still only list and watch
    await eventually(lambda: all(inf.watch_starts >= 2 for inf in watched.sources))
    await eventually(lambda: api.open_watches == len(WATCHED))
    assert max(inf.lists for inf in watched.sources) == 2
    api.cluster.create(R.PODS, "team-a", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})
    async with client.ApiClient(api.client_configuration()) as ac:  # a binding's pod, read on demand
        pods = ApiPods(ac)
        assert (await pods.get_pod("team-a", "p"))["metadata"]["name"] == "p"
        assert await pods.get_pod("team-a", "gone") is None
    assert_calls_match_access_table("webhook", api_calls(api.requests))
