"""docs/quickstart.md, command by command, as far as this machine allows (the page says which are not
run): the files it applies exist and go unchanged through the API server stand-in with the
controller running, the output it shows is what comes out, and its `kubectl get --raw` commands are
run with the real kubectl against the stand-in proxying to the visibility API."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
from pathlib import Path

import orjson
import pytest
import yaml
from kubernetes_asyncio import client

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.serving.delegated_auth import DelegatedAuth
from gpuqueue.extender.controller.client.kubeapi import KubeApi
from gpuqueue.extender.controller.serving.visibility import start_visibility, with_front_proxy_ca
from gpuqueue.tls import ReloadingTLS
from manifests.tools import render
from tests.controller_support import Harness, eventually, job_key
from tests.metrics_support import serving_certs
from tests.test_controller_visibility import API_SERVICES

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "quickstart.md").read_text()
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", PAGE, re.S)
COMMANDS = [shlex.split(line) for lang, body in BLOCKS if lang == "sh" for line in body.strip().splitlines()]
NODE = "gpuqueue-control-plane"


def commands(*prefix: str) -> list[list[str]]:
    return [c for c in COMMANDS if c[:len(prefix)] == list(prefix)]


def files_of(*verbs: str) -> list[Path]:
    out = []
    for c in COMMANDS:
        if c[0] == "kubectl" and c[1] in verbs and "--server-side" not in c:  # not the install
            out += [ROOT / c[i + 1] for i, a in enumerate(c) if a == "-f"]
    return out


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_image_built_is_the_one_the_install_deploys():
    chart = yaml.safe_load((ROOT / "charts" / "gpuqueue" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "charts" / "gpuqueue" / "values.yaml").read_text())
    assert values["image"]["tag"] == "", "the image's tag is the chart's appVersion"
    tag = chart["appVersion"]
    build = commands("docker", "build")[0]
    assert build[build.index("-t") + 1] == f"gpuqueue:{tag}"
    assert commands("kind", "load", "docker-image")[0][3] == f"gpuqueue:{tag}"
    assert commands("kubectl", "apply", "--server-side", "-f") == [["kubectl", "apply", "--server-side", "-f", "manifests/install.yaml"]]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render.build()}
    assert {("Deployment", "gpuqueue-webhook"), ("Deployment", "gpuqueue-extender"),
            ("APIService", "v1beta1.visibility.kueue.x-k8s.io"), ("ClusterRole", "gpuqueue-metrics-reader")} <= kinds
    rollout = commands("kubectl", "-n", "gpuqueue-system", "rollout", "status")[0]
    assert {"deploy/gpuqueue-webhook", "deploy/gpuqueue-extender"} <= set(rollout)


def test_every_file_the_page_uses_exists_and_is_an_example():
    paths = files_of("apply", "create", "delete")
    assert len(paths) >= 7
    for p in paths:
        assert p.is_file() and p.is_relative_to(ROOT / "manifests" / "examples"), p


def _node() -> dict:
    """The kind node after the page's patch (8 GPUs) and label (GH200)."""
    patch = commands("kubectl", "patch", "node", NODE)[0]
    capacity = orjson.loads(patch[patch.index("-p") + 1])["status"]["capacity"]
    label = commands("kubectl", "label", "node", NODE)[0][4]
    key, value = label.split("=")
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {key: value}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", **capacity}}}


async def _kubectl(server: str, args: list[str]) -> dict:
    proc = await asyncio.create_subprocess_exec("kubectl", "--server", server, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env={**os.environ, "KUBECONFIG": "/dev/null"})
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return orjson.loads(out)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_the_together_part_through_the_stand_in(tmp_path):
    quota, job_a, job_b = (ROOT / "manifests/examples/together" / f for f in
                           ("kueue-quota.yaml", "gpu-job-a.yaml", "gpu-job-b.yaml"))
    assert files_of("apply", "create")[:3] == [quota, job_a, job_b]
    expected_message = next(body.strip() for lang, body in BLOCKS if not lang and "couldn't assign" in body)
    certs, _ = serving_certs(tmp_path, "gpuqueue-visibility")
    async with Harness(pod_deletion_delay=0.05) as h:
        aggregator = h.api.enable_aggregation()
        await h.apply(_node())
        for obj in documents(quota):
            await h.apply(obj)
        ctl = await h.controller()
        await h.submit(documents(job_a)[0])
        await eventually(lambda: h.running("default", "gpu-job-a"), what="the 6-GPU job admitted")
        assert W.condition(h.workload_of("default", "gpu-job-a"), "QuotaReserved")["message"] == (
            "Quota reserved in ClusterQueue gpu-cluster-queue")
        await h.submit(documents(job_b)[0])
        await eventually(lambda: (W.condition(h.workload_of("default", "gpu-job-b"), "QuotaReserved") or {}).get(
            "message") == expected_message, what="the second one pending with the page's message")
        assert not h.running("default", "gpu-job-b")

        # the visibility API as installed, asked with the page's own kubectl commands
        for obj in render.build():
            if obj["kind"] == "APIService":
                await h.kube.create(API_SERVICES, None, obj)
        reviews = client.ApiClient(h.api.client_configuration())
        auth = DelegatedAuth(KubeApi(reviews))
        await auth.load_requestheader()
        server = await start_visibility(ctl, auth, "127.0.0.1", 0, with_front_proxy_ca(ReloadingTLS(certs).context, auth))
        aggregator.endpoints[("gpuqueue-system", "gpuqueue-visibility", 443)] = ("127.0.0.1", server.addresses[0][1])
        try:
            raws = commands("kubectl", "get", "--raw")
            assert len(raws) == 2
            b_name = h.workload_of("default", "gpu-job-b")["metadata"]["name"]
            for cmd in raws:
                summary = await _kubectl(h.api.url, cmd[1:])
                assert summary["kind"] == "PendingWorkloadsSummary"
                assert [(i["metadata"]["name"], i["positionInClusterQueue"]) for i in summary["items"]] == [(b_name, 0)]
        finally:
            await server.cleanup()
            await reviews.close()

        # gpu-job-a deleted: gpu-job-b is admitted by itself
        await h.kube.delete(K.JOBS, "default", "gpu-job-a")
        await eventually(lambda: h.running("default", "gpu-job-b"), what="b admitted once a is gone")
        assert h.observer.violations == []


async def test_the_flame_part_through_the_stand_in():
    flame = ROOT / "manifests/examples/flame"
    assert files_of("apply", "create")[3:] == [flame / "namespaces.yaml", flame / "quota.yaml",
                                                flame / "jobs-b-and-c.yaml", flame / "jobs-a.yaml"]
    async with Harness(pod_deletion_delay=0.05) as h:
        await h.apply(_node())
        for obj in documents(flame / "namespaces.yaml"):
            await h.kube.create(K.NAMESPACES, None, obj)
            h.queues.namespaces[obj["metadata"]["name"]] = obj["metadata"].get("labels") or {}
        for obj in documents(flame / "quota.yaml"):
            await h.apply(obj)
        await h.controller()
        first = documents(flame / "jobs-b-and-c.yaml")
        for job in first:
            await h.submit(job)
        await eventually(lambda: all(h.running(*job_key(j)) for j in first), what="B's 2 and C's 4 running")
        a_jobs = documents(flame / "jobs-a.yaml")
        for job in a_jobs:
            await h.submit(job)
        await eventually(lambda: all(h.running(*job_key(j)) for j in a_jobs), what="A's 4 running")
        c = [job_key(j) for j in first if j["metadata"]["namespace"] == "team-c"]
        victims = [k for k in c if not h.running(*k)]
        assert len(victims) == 2
        assert all(h.running(*job_key(j)) for j in first if j["metadata"]["namespace"] == "team-b")
        for k in victims:
            await eventually(lambda k=k: W.is_true(h.workload_of(*k), "Requeued"), what="victim requeued")
            assert W.condition(h.workload_of(*k), "Preempted")["reason"] == "InCohortReclamation"
        assert h.observer.violations == []

