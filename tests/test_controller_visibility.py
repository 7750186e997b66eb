"""Kueue's visibility API served by the controller, asked as `kubectl get --raw` asks it: through the
API server (the stand-in proxying as kube-aggregator does, to the shipped APIService's Service,
over HTTPS with its front-proxy client certificate), answered with Kueue's PendingWorkloadsSummary
from the engine's queue order, positions matching `gpuqueue explain`, and only for callers RBAC
allows."""

from __future__ import annotations

import asyncio
import contextlib
import io

import aiohttp
from kubernetes_asyncio import client

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.serving.delegated_auth import DelegatedAuth
from gpuqueue.extender.controller.explain.explain import explain_job
from gpuqueue.extender.controller.client.kinds import Kind
from gpuqueue.extender.controller.client.kubeapi import KubeApi
from gpuqueue.extender.controller.serving.visibility import Visibility, start_visibility, with_front_proxy_ca
from gpuqueue.tls import ReloadingTLS
from tests.controller_support import Harness, eventually, job_key
from tests.metrics_support import apply_manifest_objects, flame_reclaimed, serving_certs

API_SERVICES = Kind("apiservices", "apiregistration.k8s.io", "v1", "apiservices", False, "APIService")
ROLE_BINDINGS = Kind("rolebindings", "rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding")
CLUSTER_ROLES = Kind("clusterroles", "rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole")
VIS = "/apis/visibility.kueue.x-k8s.io/v1beta1"
# As Kueue v0.18 ships them: one APIService per version the server answers
APISERVICES = {"v1beta1.visibility.kueue.x-k8s.io", "v1beta2.visibility.kueue.x-k8s.io"}
ITEM_FIELDS = {"metadata", "priority", "localQueueName", "positionInClusterQueue", "positionInLocalQueue"}


def _job(ns: str, name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": ns, "name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


async def _get(h: Harness, path: str, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.get(h.api.url + path, headers=headers) as r:
            return r.status, await r.json(content_type=None)


@contextlib.asynccontextmanager
async def serving_visibility(h: Harness, ctl, tmp_path, aggregator):
    """The controller's visibility API started and registered as manifests/visibility registers it;
    yields its port."""
    certs, _ = serving_certs(tmp_path, "gpuqueue-visibility")
    for obj in apply_manifest_objects(APISERVICES):
        await h.kube.create(API_SERVICES, None, obj)
    reviews = client.ApiClient(h.api.client_configuration())
    auth = DelegatedAuth(KubeApi(reviews))
    assert (await auth.load_requestheader()).allowed_names == ("front-proxy-client",)
    server = await start_visibility(ctl, auth, "127.0.0.1", 0, with_front_proxy_ca(ReloadingTLS(certs).context, auth))
    port = server.addresses[0][1]
    aggregator.endpoints[("gpuqueue-system", "gpuqueue-visibility", 443)] = ("127.0.0.1", port)
    try:
        yield port
    finally:
        await server.cleanup()
        await reviews.close()


async def test_pending_workloads_through_the_aggregator_in_the_engines_order(tmp_path):
    async with Harness(pod_deletion_delay=0.05) as h:
        aggregator = h.api.enable_aggregation()
        ctl, _, c_keys = await flame_reclaimed(h)
        # a second LocalQueue into group-c, a high-priority job there, one more in team-c
        await h.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
                       "value": 100} | {"apiVersion": "kueue.x-k8s.io/v1beta2"})
        await h.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                       "metadata": {"namespace": "team-e", "name": "default"}, "spec": {"clusterQueue": "group-c"}})
        await h.submit(_job("team-c", "c-5"))
        await h.submit(_job("team-e", "e-1", {"kueue.x-k8s.io/priority-class": "high"}))
        victims = [k for k in c_keys if not h.running(*k)]
        pending = victims + [("team-c", "c-5"), ("team-e", "e-1")]
        await eventually(lambda: all((h.workload_of(*k) or {}).get("status", {}).get("conditions") for k in pending),
                         what="the new jobs evaluated")
        async with serving_visibility(h, ctl, tmp_path, aggregator) as port:
            # kubectl get --raw .../clusterqueues/group-c/pendingworkloads (the harness is cluster-admin)
            status, summary = await _get(h, f"{VIS}/clusterqueues/group-c/pendingworkloads")
            assert status == 200, summary
            assert summary["kind"] == "PendingWorkloadsSummary"
            assert summary["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta1"
            items = summary["items"]
            assert all(set(i) == ITEM_FIELDS for i in items)
            wl_names = {h.workload_of(*k)["metadata"]["name"]: k for k in pending}
            order = [wl_names[i["metadata"]["name"]] for i in items]
            # priority first, then queue time (c-5's creation, to the second, and the victims' requeue)
            assert order[0] == ("team-e", "e-1") and items[0]["priority"] == 100
            assert set(order[1:]) == set(victims) | {("team-c", "c-5")}
            assert [i["positionInClusterQueue"] for i in items] == [0, 1, 2, 3]
            assert [i["positionInLocalQueue"] for i in items] == [0, 0, 1, 2]
            assert [i["localQueueName"] for i in items] == ["default"] * 4
            for i in items:
                meta = i["metadata"]
                assert meta["namespace"] == wl_names[meta["name"]][0] and meta["creationTimestamp"]
                assert meta["ownerReferences"][0]["kind"] == "Job"
                # Kueue copies apiVersion, kind, name and uid only
                assert set(meta["ownerReferences"][0]) == {"apiVersion", "kind", "name", "uid"}
            # the engine's own order, not a copy of it
            assert [h.workload_of(*k)["metadata"]["name"] for k in
                    [tuple(p.spec.key.split("/")) for p in ctl.engine.pending_in_order("group-c")]] == \
                [i["metadata"]["name"] for i in items]

            # the LocalQueue form, limit and offset
            status, lq = await _get(h, f"{VIS}/namespaces/team-c/localqueues/default/pendingworkloads")
            assert status == 200 and [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in lq["items"]] == [
                (1, 0), (2, 1), (3, 2)]
            assert [i["metadata"]["name"] for i in lq["items"]] == [i["metadata"]["name"] for i in items[1:]]
            status, page = await _get(h, f"{VIS}/clusterqueues/group-c/pendingworkloads?limit=2&offset=1")
            assert [i["positionInClusterQueue"] for i in page["items"]] == [1, 2]
            assert (await _get(h, f"{VIS}/clusterqueues/group-c/pendingworkloads?offset=9"))[1]["items"] == []
            # limit=0 is Kueue's default (1000), not an empty page
            assert (await _get(h, f"{VIS}/clusterqueues/group-c/pendingworkloads?limit=0"))[1]["items"] == items
            # discovery advertises no verb on clusterqueues/localqueues themselves, as Kueue's server, and
            # GET on one answers the generic API server's 404 Status
            status, discovery = await _get(h, VIS)
            verbs = {r["name"]: r["verbs"] for r in discovery["resources"]}
            assert verbs == {"clusterqueues": [], "localqueues": [], "clusterqueues/pendingworkloads": ["get"],
                             "localqueues/pendingworkloads": ["get"]}
            status, plain = await _get(h, f"{VIS}/clusterqueues/group-c")
            assert status == 404 and plain["kind"] == "Status" and plain["reason"] == "NotFound"
            status, bad = await _get(h, f"{VIS}/clusterqueues/group-c/pendingworkloads?limit=-1")
            assert status == 400 and bad["kind"] == "Status" and "limit" in bad["message"]
            status, missing = await _get(h, f"{VIS}/clusterqueues/nope/pendingworkloads")
            assert status == 404 and missing["reason"] == "NotFound"
            assert (await _get(h, f"{VIS}/clusterqueues/group-a/pendingworkloads"))[1]["items"] == []

            # gpuqueue explain says the same positions
            for i in items:
                ns, name = wl_names[i["metadata"]["name"]]
                text, code = await explain_job(h.client, f"{ns}/{name}")
                assert code == 1
                assert (f"Position:     {i['positionInClusterQueue'] + 1} in ClusterQueue group-c, "
                        f"{i['positionInLocalQueue'] + 1} in LocalQueue default") in text, text

            # RBAC: a team-c user bound to the shipped LocalQueue viewer role sees its LocalQueue only
            for obj in apply_manifest_objects({"gpuqueue-pending-workloads-lq-viewer"}):
                await h.kube.create(CLUSTER_ROLES, None, obj)
            await h.kube.create(ROLE_BINDINGS, "team-c", {
                "metadata": {"name": "pending-viewers", "namespace": "team-c"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "gpuqueue-pending-workloads-lq-viewer"},
                "subjects": [{"kind": "User", "name": "alice"}]})
            h.api.authn.add_token("alice-token", "alice", ["team-c"])
            h.api.authn.add_token("bob-token", "bob")
            assert (await _get(h, f"{VIS}/namespaces/team-c/localqueues/default/pendingworkloads", "alice-token"))[0] == 200
            status, denied = await _get(h, f"{VIS}/clusterqueues/group-c/pendingworkloads", "alice-token")
            assert status == 403 and denied["reason"] == "Forbidden" and 'user "alice"' in denied["message"]
            assert (await _get(h, f"{VIS}/namespaces/team-e/localqueues/default/pendingworkloads", "alice-token"))[0] == 403
            assert (await _get(h, f"{VIS}/namespaces/team-c/localqueues/default/pendingworkloads", "bob-token"))[0] == 403
            assert (await _get(h, f"{VIS}/clusterqueues/group-c/pendingworkloads", "nobody's"))[0] == 401
            # straight to the port, forging the aggregator's headers without its certificate: refused
            async with aiohttp.ClientSession() as http:
                async with http.get(f"https://127.0.0.1:{port}{VIS}/clusterqueues/group-c/pendingworkloads",
                                    ssl=False, headers={"X-Remote-User": "system:admin",
                                                        "X-Remote-Group": "system:masters"}) as r:
                    assert r.status == 401

            # the OpenAPI documents kube-aggregator loads (v2, and v3 through its index)
            async with aiohttp.ClientSession() as http:
                base = f"https://127.0.0.1:{port}"
                async with http.get(f"{base}/openapi/v2", ssl=False) as r:
                    v2 = await r.json()
                    assert r.status == 200 and v2["swagger"] == "2.0"
                assert f"{VIS}/clusterqueues/{{name}}/pendingworkloads" in v2["paths"]
                async with http.get(f"{base}/openapi/v3", ssl=False) as r:
                    entry = (await r.json())["paths"]["apis/visibility.kueue.x-k8s.io/v1beta1"]
                async with http.get(base + entry["serverRelativeURL"], ssl=False) as r:
                    v3 = await r.json()
                    assert r.status == 200 and v3["openapi"].startswith("3.")
                assert "io.x-k8s.kueue.visibility.v1beta1.PendingWorkloadsSummary" in v3["components"]["schemas"]

            # a follower answers from its caches, in the order a new leader would rebuild
            await ctl.lose_leadership()
            follower = Visibility(ctl).ordered("group-c")
            assert {q.name for q in follower} == {i["metadata"]["name"] for i in items}
            assert follower[0].name == items[0]["metadata"]["name"]


def test_an_apiservice_per_version_as_kueue_ships_them():
    specs = {o["metadata"]["name"]: o["spec"] for o in apply_manifest_objects(APISERVICES)}
    assert set(specs) == APISERVICES
    for name, spec in specs.items():
        assert name == f"{spec['version']}.{spec['group']}"
        assert (spec["groupPriorityMinimum"], spec["versionPriority"]) == (100, 100)
        assert spec["service"] == {"name": "gpuqueue-visibility", "namespace": "gpuqueue-system", "port": 443}


async def one_gpu_taken(h: Harness):
    """The aggregator on, a cluster of one GPU, and a Job in namespace ml running on it: what comes
    after it waits. (The aggregator, the controller.)"""
    from tests.test_controller_behaviour import gpu_job, two_pool_objects

    aggregator = h.api.enable_aggregation()
    for obj in two_pool_objects(f2_quota=0):  # one GPU
        await h.apply(obj)
    ctl = await h.controller()
    await h.submit(gpu_job("ml", "running"))
    await eventually(lambda: h.running("ml", "running"), what="the GPU taken")
    return aggregator, ctl


async def test_v1beta2_answers_as_v1beta1_does_in_its_own_api_version(tmp_path):
    """Kueue v0.18 serves the group at v1beta2 (what its documentation and kueuectl ask) and still at
    v1beta1: the same answers, each in the apiVersion asked, with discovery and OpenAPI per version."""
    from tests.test_controller_behaviour import gpu_job

    async with Harness() as h:
        aggregator, ctl = await one_gpu_taken(h)
        for name in ("waits-1", "waits-2"):
            await h.submit(gpu_job("ml", name))
        await eventually(lambda: all(h.workload_of("ml", n) for n in ("waits-1", "waits-2")), what="both queued")
        async with serving_visibility(h, ctl, tmp_path, aggregator) as port:
            answers = {}
            for version in ("v1beta1", "v1beta2"):
                base = f"/apis/visibility.kueue.x-k8s.io/{version}"
                status, cq = await _get(h, f"{base}/clusterqueues/q/pendingworkloads")
                assert status == 200, cq
                assert (cq["kind"], cq["apiVersion"]) == ("PendingWorkloadsSummary", f"visibility.kueue.x-k8s.io/{version}")
                status, lq = await _get(h, f"{base}/namespaces/ml/localqueues/default/pendingworkloads?limit=1&offset=1")
                assert status == 200 and lq["apiVersion"] == cq["apiVersion"], lq
                status, discovery = await _get(h, base)
                assert status == 200 and discovery["groupVersion"] == f"visibility.kueue.x-k8s.io/{version}"
                assert {r["name"] for r in discovery["resources"]} == {
                    "clusterqueues", "clusterqueues/pendingworkloads", "localqueues", "localqueues/pendingworkloads"}
                status, missing = await _get(h, f"{base}/clusterqueues/nope/pendingworkloads")
                assert status == 404 and missing["reason"] == "NotFound"
                answers[version] = (cq["items"], lq["items"])
            assert answers["v1beta2"] == answers["v1beta1"]
            assert [i["positionInLocalQueue"] for i in answers["v1beta2"][0]] == [0, 1]
            assert answers["v1beta2"][1] == answers["v1beta2"][0][1:]

            # the OpenAPI documents: v2 holds both versions, v3 one document per version
            async with aiohttp.ClientSession() as http:
                backend = f"https://127.0.0.1:{port}"
                async with http.get(f"{backend}/openapi/v2", ssl=False) as r:
                    v2 = await r.json()
                async with http.get(f"{backend}/openapi/v3", ssl=False) as r:
                    index = (await r.json())["paths"]
                assert set(index) == {"apis/visibility.kueue.x-k8s.io/v1beta1", "apis/visibility.kueue.x-k8s.io/v1beta2"}
                for version in ("v1beta1", "v1beta2"):
                    assert f"/apis/visibility.kueue.x-k8s.io/{version}/clusterqueues/{{name}}/pendingworkloads" in v2["paths"]
                    assert f"io.x-k8s.kueue.visibility.{version}.PendingWorkload" in v2["definitions"]
                    async with http.get(backend + index[f"apis/visibility.kueue.x-k8s.io/{version}"]["serverRelativeURL"],
                                        ssl=False) as r:
                        v3 = await r.json()
                    assert {p.split("/")[3] for p in v3["paths"]} == {version}
                    summary = v3["components"]["schemas"][f"io.x-k8s.kueue.visibility.{version}.PendingWorkloadsSummary"]
                    assert summary["x-kubernetes-group-version-kind"][0]["version"] == version
                    assert summary["properties"]["items"]["items"]["$ref"].endswith(f".{version}.PendingWorkload")


async def test_list_workloads_takes_the_positions_from_the_visibility_api(tmp_path):
    """`gpuqueue list workloads` shows POSITION IN QUEUE as the engine orders its queue (as kueuectl
    asks the visibility API): two Jobs of one priority created within the same second are in the
    order they came, which the Workloads alone (creation to the second, then name) cannot tell."""
    from gpuqueue.cli import main
    from tests.test_controller_behaviour import gpu_job

    async with Harness() as h:
        aggregator, ctl = await one_gpu_taken(h)
        for attempt in range(5):  # created within one second (the Workloads' timestamps say no more)
            for name in ("zz-second", "aa-third"):
                await h.submit(gpu_job("ml", name))
            made = [h.job("ml", n)["metadata"]["creationTimestamp"] for n in ("zz-second", "aa-third")]
            if made[0] == made[1]:
                break
            for name in ("zz-second", "aa-third"):
                await h.kube.delete(K.JOBS, "ml", name)
            await eventually(lambda: h.job("ml", "zz-second") is None and h.job("ml", "aa-third") is None,
                             what="deleted to try again")
        await eventually(lambda: all(h.workload_of("ml", n) for n in ("zz-second", "aa-third")), what="both queued")
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: standin, cluster: {{server: "{h.api.url}"}}}}]
users: [{{name: admin, user: {{}}}}]
contexts: [{{name: c, context: {{cluster: standin, user: admin, namespace: ml}}}}]
current-context: c
""")
        async with serving_visibility(h, ctl, tmp_path, aggregator):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = await asyncio.to_thread(main, ["list", "workloads", "--kubeconfig", str(kubeconfig)])
        assert (code, err.getvalue()) == (0, "")
        rows = {line.split()[2]: line.split() for line in out.getvalue().splitlines()[1:]}
        assert (rows["zz-second"][5], rows["zz-second"][6]) == ("PENDING", "0")
        assert (rows["aa-third"][5], rows["aa-third"][6]) == ("PENDING", "1")
