"""What operators and users see besides the API objects: /readyz, /metrics, the scheduler
extender endpoints served over the controller's caches, and `gpuqueue explain`."""

from __future__ import annotations

import aiohttp

from gpuqueue.extender.controller.explain.explain import explain_job
from gpuqueue.extender.controller.serving.ops import start_ops
from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
from gpuqueue.extender.scheduler import app as extender_app
from gpuqueue.cli import main
from tests.standin import resources as R
from tests.extender_support import chosen
from tests.controller_support import Harness, eventually, job_key, scenario, together_one_pending

H100_NODE = {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "h100-node-3", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
             "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}}}


async def test_readiness_metrics_and_extender_endpoints_over_the_controller_cache():
    objects, jobs, later = scenario("flame.yaml")
    async with Harness() as h:
        for obj in objects + [H100_NODE]:
            await h.apply(obj)
        from tests.controller_support import FAST
        from gpuqueue.extender.controller.controller import Controller
        from kubernetes_asyncio import client

        ctl = Controller(client.ApiClient(h.api.client_configuration()), FAST, identity="ops")
        h.controllers.append(ctl)
        view = ControllerClusterView(ctl)
        ops = await start_ops(ctl, "127.0.0.1", 0, metrics_auth=None)
        ops_port = ops.addresses[0][1]
        ext = await extender_app.start(view, host="127.0.0.1", port=0, insecure_http=True)
        ext_port = ext.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{ops_port}/readyz") as r:
                    assert r.status == 503 and "not ready" in await r.text()
                await ctl.start()
                async with http.get(f"http://127.0.0.1:{ops_port}/readyz") as r:
                    assert r.status == 200 and "leader" in await r.text()
                for job in jobs + later:
                    await h.submit(job)
                await eventually(lambda: all(h.running(*job_key(j)) for j in later), what="A admitted")
                await eventually(lambda: sum(1 for p in h.api.cluster.store.kind(R.PODS.storage_key).values()
                                             if p["metadata"]["ownerReferences"][0]["name"] == "a-1") == 1,
                                 what="a-1's pod")
                pod = next(p for p in h.api.cluster.store.kind(R.PODS.storage_key).values()
                           if p["metadata"]["ownerReferences"][0]["name"] == "a-1")
                await eventually(lambda: len(view.nodes.node_names()) == 3, what="nodes cached")
                args = {"Pod": pod, "Nodes": None, "NodeNames": ["gh200-node-1", "gh200-node-2", "h100-node-3"]}
                async with http.post(f"http://127.0.0.1:{ext_port}/filter", json=args) as r:
                    result = await r.json()
                chosen(result, ["gh200-node-1", "gh200-node-2"])
                failed = {**(result.get("FailedNodes") or {}), **(result.get("FailedAndUnresolvableNodes") or {})}
                assert "not of flavor gh200" in failed["h100-node-3"]
                m = ctl.metrics
                await eventually(lambda: m.reserving.labels("group-a")._value.get() == 4
                                 and m.usage.labels("flame", "group-c", "gh200", "nvidia.com/gpu")._value.get() == 2
                                 and m.pending.labels("group-c", "inadmissible")._value.get() == 2, what="gauges")
                async with http.get(f"http://127.0.0.1:{ops_port}/metrics") as r:
                    text = await r.text()
                assert 'kueue_preempted_workloads_total{preempting_cluster_queue="group-a",reason="InCohortReclamation"} 2.0' in text
                assert 'gpuqueue_admission_wait_time_seconds_count{cluster_queue="group-a"} 4.0' in text
                assert 'kueue_cluster_queue_resource_usage{cluster_queue="group-c",cohort="flame",flavor="gh200",resource="nvidia.com/gpu"} 2.0' in text
                assert 'kueue_pending_workloads{cluster_queue="group-c",status="inadmissible"} 2.0' in text
                assert "kueue_admission_attempt_duration_seconds_count" in text
                async with http.get(f"http://127.0.0.1:{ops_port}/healthz") as r:
                    assert r.status == 200
        finally:
            await ext.cleanup()
            await ops.cleanup()


async def test_explain_says_where_the_job_stands_and_what_must_finish():
    async with Harness() as h:
        await together_one_pending(h)
        text, code = await explain_job(h.client, "default/gpu-job-b")
        assert code == 1
        assert "ClusterQueue: gpu-cluster-queue" in text
        # no visibility API here (manifests/visibility not applied): its place is not guessed
        assert "Position:     unknown (the visibility API answered 404: is manifests/visibility applied?)" in text
        assert ("Message:      couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
                "in flavor gpu-flavor, 4 more needed") in text
        assert "it would fit once these finish or are freed: default/job-gpu-job-a-" in text
        text, code = await explain_job(h.client, "default/gpu-job-a")
        assert code == 0 and "admitted (Quota reserved in ClusterQueue gpu-cluster-queue)" in text
        text, code = await explain_job(h.client, "default/nope")
        assert code == 2 and "not found" in text


def test_extender_command_requires_certificates(capsys):
    assert main(["extender", "--kubeconfig", "/nonexistent"]) == 2
    assert "--cert-dir is required" in capsys.readouterr().err
    assert main(["explain", "no-slash"]) == 2


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_gpuqueue_extender_process_runs_against_a_kubeconfig_and_stops_on_sigterm(tmp_path):
    import asyncio
    import os
    import signal
    import sys

    import yaml

    objects, jobs, _ = scenario("together-quota.yaml")
    async with Harness() as h:
        for obj in objects:
            await h.apply(obj)
        await h.namespace("gpuqueue-system")  # the install creates it; the Lease lives there
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "standin",
            "clusters": [{"name": "standin", "cluster": {"server": h.api.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "u"}}]}))
        ops_port, ext_port = _free_port(), _free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpuqueue", "extender", "--kubeconfig", str(kubeconfig), "--insecure-http",
            "--host", "127.0.0.1", "--port", str(ext_port), "--metrics-port", str(ops_port), "--leader-elect",
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            async with aiohttp.ClientSession() as http:
                async def ready() -> bool:
                    try:
                        async with http.get(f"http://127.0.0.1:{ops_port}/readyz") as r:
                            return r.status == 200 and "leader" in await r.text()
                    except aiohttp.ClientError:
                        return False

                for _ in range(200):
                    if await ready():
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the extender never became ready")
                await h.submit(jobs[0])
                await eventually(lambda: h.running("default", "gpu-job-a"), timeout=10, what="admitted by the process")
                async with http.post(f"http://127.0.0.1:{ext_port}/filter", data=b"not json") as r:
                    assert r.status == 200 and (await r.json())["Error"]
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 0, out.decode()[-2000:]
        lease = h.api.cluster.store.get("leases.coordination.k8s.io", ("gpuqueue-system", "gpuqueue-extender"))
        assert lease["spec"]["holderIdentity"] == ""  # released on shutdown
