"""Controller throughput and latency against the API server stand-in (same process, real HTTP).

    /work/venv/bin/python bench/controller_bench.py [--jobs 1000] [--qps 5000]

Measures, from the stand-in's own record of writes:
  burst   N Jobs created as fast as a client can, quota for all: Job creation -> unsuspend p50/p99,
          admissions per second (N / time from first creation to last unsuspend);
  deep    N Jobs pending in a full ClusterQueue; then 200 Jobs to a queue with room, 50 per second:
          creation -> unsuspend p50/p99 with the deep queue behind; then the full queue's quota is
          raised and the N drain: admissions per second;
  baseline  the least API work one admission needs, done by a bare client in the same run: create a
          Workload, write its status, unsuspend the Job (3 sequential calls), per admission.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import multiprocessing as mp
import time

import bench_env  # noqa: E402,F401  (the repository on sys.path, or one line saying why not)

from kubernetes_asyncio import client  # noqa: E402

from gpuqueue.extender.controller.client import kinds as K  # noqa: E402
from gpuqueue.extender.controller.controller import Controller  # noqa: E402
from gpuqueue.extender.controller.options import Options  # noqa: E402
from gpuqueue.extender.controller.client.kubeapi import KubeApi  # noqa: E402
from tests.standin import ApiServer  # noqa: E402
from tests.standin import resources as R  # noqa: E402


def cq(name: str, gpus: int) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "gh200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}


def job(ns: str, name: str, queue: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": ns, "name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


class Clock:
    """Creation and unsuspension times of Jobs, from every write the stand-in commits."""

    def __init__(self, api: ApiServer) -> None:
        self.created: dict[str, float] = {}
        self.unsuspended: dict[str, float] = {}
        api.observe(self)

    def __call__(self, w) -> None:
        if w.resource is not R.JOBS:
            return
        key = f"{w.namespace}/{w.name}"
        if w.type == "ADDED":
            self.created[key] = time.monotonic()
        elif w.type == "MODIFIED" and w.old["spec"].get("suspend") and not w.new["spec"].get("suspend"):
            self.unsuspended.setdefault(key, time.monotonic())

    def latencies(self, keys) -> list[float]:
        return sorted(self.unsuspended[k] - self.created[k] for k in keys if k in self.unsuspended)


def _serve(conn, history_size: int) -> None:
    """Child process: the stand-in, with its own CPU; hands back the Clock when asked."""
    async def main():
        async with ApiServer(history_size=history_size) as api:
            clock = Clock(api)
            conn.send(api.url)
            loop = asyncio.get_running_loop()
            while True:
                msg = await loop.run_in_executor(None, conn.recv)
                if msg == "clock":
                    conn.send((clock.created, clock.unsuspended))
                elif msg == "stop":
                    return

    asyncio.run(main())


class RemoteApi:
    """The stand-in in a child process (the default), so the controller's CPU and the API
    server's are not one event loop's."""

    def __init__(self) -> None:
        self.parent, child = mp.Pipe()
        self.proc = mp.get_context("fork").Process(target=_serve, args=(child, 50000), daemon=True)

    async def __aenter__(self):
        self.proc.start()
        self.url = await asyncio.get_running_loop().run_in_executor(None, self.parent.recv)
        return self

    async def __aexit__(self, *exc):
        self.parent.send("stop")
        self.proc.join(5)

    def client_configuration(self):
        return client.Configuration(host=self.url)

    async def clock(self) -> "Clock":
        self.parent.send("clock")
        created, unsuspended = await asyncio.get_running_loop().run_in_executor(None, self.parent.recv)
        c = Clock.__new__(Clock)
        c.created, c.unsuspended = created, unsuspended
        return c


@contextlib.asynccontextmanager
async def api_server(separate: bool):
    if separate:
        async with RemoteApi() as api:
            yield api
    else:
        async with ApiServer(history_size=50000) as api:
            clock = Clock(api)

            async def get_clock():
                return clock

            api.clock = get_clock
            yield api


async def poll_clock(api, cond, timeout: float) -> "Clock":
    deadline = time.monotonic() + timeout
    while True:
        clock = await api.clock()
        if cond(clock):
            return clock
        if time.monotonic() > deadline:
            raise TimeoutError
        await asyncio.sleep(0.2)


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def wait_for(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError
        await asyncio.sleep(0.01)


async def setup(kube: KubeApi, queues: dict[str, int]) -> None:
    await kube.create(K.RESOURCE_FLAVORS, None, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                                 "metadata": {"name": "gh200"}})
    for name, gpus in queues.items():
        await kube.create(K.NAMESPACES, None, {"metadata": {"name": name}})
        await kube.create(K.CLUSTER_QUEUES, None, cq(name, gpus))
        await kube.create(K.LOCAL_QUEUES, name, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                                                 "metadata": {"name": "q", "namespace": name},
                                                 "spec": {"clusterQueue": name}})


async def create_many(kube: KubeApi, ns: str, names: list[str], concurrency: int = 16) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(n):
        async with sem:
            await kube.create(K.JOBS, ns, job(ns, n, "q"))

    await asyncio.gather(*(one(n) for n in names))


async def burst(n: int, options: Options, separate: bool) -> dict:
    async with api_server(separate) as api:
        async with client.ApiClient(api.client_configuration()) as c:
            kube = KubeApi(c, qps=100000, burst=100000)
            await setup(kube, {"burst": n})
            ctl = Controller(client.ApiClient(api.client_configuration()), options)
            await ctl.start()
            names = [f"j{i:05d}" for i in range(n)]
            t0 = time.monotonic()
            await create_many(kube, "burst", names)
            keys = [f"burst/{x}" for x in names]
            clock = await poll_clock(api, lambda c: len(c.unsuspended) >= n, 600)
            span = max(clock.unsuspended.values()) - t0
            lat = clock.latencies(keys)
            writes = ctl.kube.writes
            await ctl.stop()
            await ctl.api.close()
    return {"p50": pct(lat, 50), "p99": pct(lat, 99), "admissions_per_s": n / span, "writes_per_admission": writes / n}


async def deep(n: int, options: Options, separate: bool) -> dict:
    async with api_server(separate) as api:
        async with client.ApiClient(api.client_configuration()) as c:
            kube = KubeApi(c, qps=100000, burst=100000)
            await setup(kube, {"full": 0, "room": 1000})
            ctl = Controller(client.ApiClient(api.client_configuration()), options)
            await ctl.start()
            names = [f"j{i:05d}" for i in range(n)]
            await create_many(kube, "full", names)
            await wait_for(lambda: len(ctl.engine.pending) >= n and sum(
                1 for wl in ctl.informers["workloads"].list() if (wl.get("status") or {}).get("conditions")) >= n, 600)
            probes = [f"p{i:04d}" for i in range(200)]
            for p in probes:
                await kube.create(K.JOBS, "room", job("room", p, "q"))
                await asyncio.sleep(1 / 50)
            clock = await poll_clock(api, lambda c: all(f"room/{p}" in c.unsuspended for p in probes), 120)
            lat = clock.latencies(f"room/{p}" for p in probes)
            full = await kube.get(K.CLUSTER_QUEUES, None, "full")
            full["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = n
            t0 = time.monotonic()
            await kube.replace(K.CLUSTER_QUEUES, full)
            clock = await poll_clock(api, lambda c: all(f"full/{x}" in c.unsuspended for x in names), 600)
            drain = n / (max(clock.unsuspended[f"full/{x}"] for x in names) - t0)
            await ctl.stop()
            await ctl.api.close()
    return {"p50": pct(lat, 50), "p99": pct(lat, 99), "drain_per_s": drain}


async def baseline(n: int, separate: bool) -> dict:
    """The least an admission costs on this stand-in: three sequential calls by a bare client."""
    async with api_server(separate) as api:
        async with client.ApiClient(api.client_configuration()) as c:
            kube = KubeApi(c, qps=100000, burst=100000)
            await kube.create(K.NAMESPACES, None, {"metadata": {"name": "b"}})
            jobs = [await kube.create(K.JOBS, "b", job("b", f"j{i:05d}", "q")) for i in range(n)]
            t0 = time.monotonic()
            for j in jobs:
                wl = await kube.create(K.WORKLOADS, "b", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                                          "metadata": {"name": "w" + j["metadata"]["name"]},
                                                          "spec": {"queueName": "q", "podSets": [
                                                              {"name": "main", "count": 1,
                                                               "template": j["spec"]["template"]}]}})
                wl["status"] = {"admission": {"clusterQueue": "x", "podSetAssignments": [
                    {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "gh200"},
                     "resourceUsage": {"nvidia.com/gpu": "1"}}]}}
                await kube.replace(K.WORKLOADS, wl, "status")
                body = copy.deepcopy(j)
                body["spec"]["suspend"] = False
                await kube.replace(K.JOBS, body)
            per = (time.monotonic() - t0) / n
    return {"per_admission_ms": per * 1000, "admissions_per_s": 1 / per}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--qps", type=float, default=5000.0, help="the controller's write rate limit")
    ap.add_argument("--same-process", action="store_true",
                    help="run the stand-in in this process (its CPU then competes with the controller's)")
    args = ap.parse_args()
    sep = not args.same_process
    options = dataclasses.replace(Options(), qps=args.qps, burst=int(args.qps), status_interval=1.0)
    b = await baseline(min(args.jobs, 300), sep)
    print(f"stand-in {'in a child process' if sep else 'in this process'}; controller qps limit {args.qps:g}")
    print(f"baseline (bare client, 3 sequential calls per admission): {b['per_admission_ms']:.2f} ms per admission, "
          f"{b['admissions_per_s']:.0f} admissions/s")
    r = await burst(args.jobs, options, sep)
    print(f"burst: {args.jobs} Jobs created at once: creation->unsuspend p50 {r['p50']:.3f}s p99 {r['p99']:.3f}s; "
          f"{r['admissions_per_s']:.0f} admissions/s ({r['admissions_per_s'] / b['admissions_per_s']:.2f}x the "
          f"sequential baseline); {r['writes_per_admission']:.2f} API writes per admission")
    dq = await deep(args.jobs, options, sep)
    print(f"deep: 200 Jobs at 50/s with {args.jobs} queued behind a full ClusterQueue: creation->unsuspend "
          f"p50 {dq['p50'] * 1000:.0f} ms p99 {dq['p99'] * 1000:.0f} ms; draining the {args.jobs}: "
          f"{dq['drain_per_s']:.0f} admissions/s")


if __name__ == "__main__":
    asyncio.run(main())
