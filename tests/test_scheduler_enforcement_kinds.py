"""Enforcement over a kind other than Jobs, through the controller's caches and the extender over
TLS: a JobSet's pods are judged against their own pod set (its driver on the cpu flavor's nodes,
its workers on the GPU flavor's, each within its own pod set's count and per-pod requests); a pod a
tenant adds beyond a pod set's count, or one claiming a pod set it does not fit, gets no node."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import aiohttp
from kubernetes_asyncio import client

from gpuqueue.extender.controller.controller import Controller
from gpuqueue.extender.controller.kinds.managed_kinds import kind_of
from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
from gpuqueue.extender.scheduler import app as extender_app
from gpuqueue.extender.scheduler.view import ADMITTED
from gpuqueue.jobframework.names import workload_name
from gpuqueue.jobframework.registry import BY_KIND, IntegrationsConfig
from tests.controller_support import FAST, Harness, eventually
from tests.extender_support import extender_cert_dir, scheduler_context
from tests.kind_controllers import KindControllers
from tests.test_controller_kinds import CPU_NODES, GH200, quota_objects
from tests.test_scheduler_enforcement import Cluster
from tests.workload_kinds import GPU, JOBSET

ZONE = {"topology.kubernetes.io/zone": "a"}  # the JobSet's workers ask for it themselves
GPU_NODES = ["gh200-node-1", "gh200-node-2", "gh200-node-3"]  # 12 GPUs for a quota of 8: room is no limit
CPU_NODE = "cpu-node-1"
ALL = [*GPU_NODES, CPU_NODE]


def nodes() -> list[dict]:
    gpu = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {**GH200, **ZONE}},
            "status": {"allocatable": {"cpu": "72", "memory": "480Gi", GPU: "4", "pods": "110"}}} for n in GPU_NODES]
    return gpu + [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": CPU_NODE, "labels": CPU_NODES},
                   "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}}]


def tenant_pod(job: dict, pod_set: str, containers: list[dict], name: str | None = None) -> dict:
    """A pod a tenant makes under one of the JobSet's Jobs, claiming one of its pod sets."""
    return {"metadata": {"name": name or f"{job['metadata']['name']}-extra", "namespace": "team-a",
                         "labels": {"jobset.sigs.k8s.io/replicatedjob-name": pod_set},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "controller": True,
                                              "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}]},
            "spec": {"restartPolicy": "Never", "containers": containers}}


def pod_set_pods(c: Cluster, pod_set: str) -> list[dict]:
    return [p for p in c.h.api.cluster.store.kind("pods").values()
            if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name") == pod_set]


OPTIONS = dataclasses.replace(FAST, integrations=IntegrationsConfig(("batch/job", "jobset.x-k8s.io/jobset")))


@contextlib.asynccontextmanager
async def extender(h: Harness, tmp_path, before_start=None, options=OPTIONS):
    """A controller (as `gpuqueue extender` runs it) and the extender over TLS on its caches; a
    Cluster to ask it. `before_start(ctl, view)`: runs while the controller starts and its caches
    sync."""
    ctl = Controller(client.ApiClient(h.api.client_configuration()), options, identity="test")
    h.controllers.append(ctl)
    view = ControllerClusterView(ctl)  # before the caches start, as `gpuqueue extender` does
    during = asyncio.create_task(before_start(ctl, view)) if before_start is not None else None
    await ctl.start()  # (a leader's start returns once its caches are synced)
    if during is not None:
        await during
    await ctl.wait_synced()
    cert_dir = extender_cert_dir(tmp_path)
    server = await extender_app.start(view, host="127.0.0.1", port=0, cert_dir=cert_dir)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=scheduler_context(cert_dir))) as s:
            yield Cluster(h, ctl, view, f"https://127.0.0.1:{server.addresses[0][1]}", s)
    finally:
        await server.cleanup()


async def running_jobset(h: Harness, c: Cluster) -> tuple[dict, list[dict], dict]:
    """The sample JobSet admitted and its pods bound: (the JobSet, its workers, its driver)."""
    jobset = await h.kube.create(kind_of(BY_KIND["JobSet"]), "team-a", JOBSET.fresh())
    uid = jobset["metadata"]["uid"]
    await eventually(lambda: getattr(c.view.workload_owned_by(uid), "state", None) == ADMITTED,
                     what="admitted, as the extender sees it")
    await eventually(lambda: len(pod_set_pods(c, "workers")) == 8 and len(pod_set_pods(c, "driver")) == 1,
                     what="the JobSet's pods made through its Jobs")
    workers, (driver,) = pod_set_pods(c, "workers"), pod_set_pods(c, "driver")
    for pod in [*workers, driver]:
        await c.known(pod)
    # each pod set on its own flavor's nodes
    answer = await c.filter(driver, ALL)
    assert answer["NodeNames"] == [CPU_NODE], answer
    for pod in workers:
        fits = (await c.filter(pod, ALL))["NodeNames"]
        assert fits and set(fits) <= set(GPU_NODES), fits
        await c.bound(pod, fits[0])
    await c.bound(driver, CPU_NODE)
    return jobset, workers, driver


async def cluster_objects(h: Harness) -> None:
    h.api.install_crds(*JOBSET.crds)
    for obj in [*quota_objects(8), *nodes()]:
        await h.apply(obj)


async def test_a_jobsets_pods_are_held_to_their_own_pod_sets(tmp_path):
    async with Harness() as h:
        await cluster_objects(h)
        async with extender(h, tmp_path) as c, KindControllers(h.kube, [JOBSET]):
            jobset, workers, driver = await running_jobset(h, c)
            uid = jobset["metadata"]["uid"]
            # a ninth worker, made by the tenant under the workers' Job: its pod set is full
            extra = await c.create_pod(tenant_pod(c.h.job("team-a", "train-workers"), "workers",
                                                  workers[0]["spec"]["containers"]))
            answer = await c.filter(extra, ALL)
            assert answer["NodeNames"] == [] and "pod set workers" in str(answer["FailedAndUnresolvableNodes"]), answer
            # a GPU pod under the driver's Job: the driver's pod set admits no GPU
            sneaky = await c.create_pod(tenant_pod(c.h.job("team-a", "train-driver"), "driver", [
                {"name": "x", "image": "x", "resources": {"limits": {GPU: "1"}}}], name="train-driver-gpu"))
            answer = await c.filter(sneaky, ALL)
            assert answer["NodeNames"] == [], answer
            wl = f"team-a/{workload_name('JobSet', 'jobset.x-k8s.io', 'train', uid)}"
            assert (await c.filter(extra, ALL))["FailedAndUnresolvableNodes"][CPU_NODE] == (
                f"gpuqueue: pod set workers of workload {wl} is admitted for 8 pods and 8 already run")
            assert answer["FailedAndUnresolvableNodes"][CPU_NODE] == (
                f"gpuqueue: pod team-a/train-driver-gpu requests 1 nvidia.com/gpu but pod set driver of "
                f"workload {wl} is admitted for 0 per pod")


async def test_pods_bound_before_a_restart_are_counted_in_their_pod_set(tmp_path):
    """The extender restarted while a JobSet runs, its pods listed before the Workloads (their
    pod sets unknown yet): once its caches are whole it counts them in their pod set again, so a
    pod added beyond the pod set's count is refused as before the restart."""
    async with Harness() as h:
        await cluster_objects(h)
        async with KindControllers(h.kube, [JOBSET]):
            async with extender(h, tmp_path) as c:
                jobset, workers, _ = await running_jobset(h, c)
            await h.kill(c.ctl)
            gate = asyncio.Event()
            held = h.api.faults.add(r"/apis/kueue.x-k8s.io/v1beta2/workloads$", method="GET", watch=False, hold=gate)

            async def pods_first(ctl, view):
                await eventually(lambda: held.hits == 1 and all(view.pod(p["metadata"]["uid"]) for p in workers),
                                 what="the pods in the new caches, the Workloads not yet")
                gate.set()

            async with extender(h, tmp_path, before_start=pods_first) as c:
                extra = await c.create_pod(tenant_pod(c.h.job("team-a", "train-workers"), "workers",
                                                      workers[0]["spec"]["containers"]))
                answer = await c.filter(extra, ALL)
                assert answer["NodeNames"] == [], answer
                assert "admitted for 8 pods and 8 already run" in answer["FailedAndUnresolvableNodes"][GPU_NODES[2]], answer
