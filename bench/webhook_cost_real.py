"""Benchmark: what gpuqueue's pod webhooks cost per pod on a real control plane, and whether any call
is dropped, for pods that request a GPU and pods that request none, in alternating phases on the
same cluster (issue 37, point 2; issue 36, point 3). kube-apiserver calls webhooks over HTTP/1.1
only (k8s.io/apiserver/pkg/util/webhook/client.go sets NextProtos to http/1.1), keeping 25 idle
connections per webhook host: each call beyond them opens a connection, a TLS handshake.

The end-to-end suite's control plane (tests/e2e/harness.py, named by the GPUQUEUE_E2E_* variables
of tests/e2e/env.py), with the webhook configurations it installs for that server. Each phase
restarts `gpuqueue webhook`, then creates PODS pods at RATE per second (an asyncio client with
keep-alive connections, Poisson arrivals), in a namespace gpuqueue does not queue. "gpu" pods
request one GPU: the pod webhooks (`pod.gpuqueue.io`, mutating and validating) are called for each.
"cpu" pods request none: where the server has matchConditions (1.28+) the webhooks are not called
for them at all; before, they are called as GPU pods are.

Per phase: the webhook process's CPU (user+system, /proc) over the phase divided by the pods
created; kube-apiserver's own figures for the calls (apiserver_admission_webhook_admission_duration_seconds
for pod.gpuqueue.io, p50/p99 interpolated within its buckets, whose edges are 5, 25 and 100 ms, and the share of calls
within 5 and within 25 ms; and apiserver_admission_webhook_rejection_count with
error_type calling_webhook_error: calls that failed); the creations that failed (any answer but 201);
and the most connections to the webhook seen open during the phase (ss).

    GPUQUEUE_E2E_K8S_BIN=... GPUQUEUE_E2E_ETCD=... GPUQUEUE_E2E_KUBECTL=... \\
        python bench/webhook_cost_real.py [--pods 2000] [--rate 100] [--runs 3] [--kinds gpu,cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import ssl
import statistics
import subprocess
import sys
import time
from collections import defaultdict

import bench_env  # noqa: E402  (the repository on sys.path, or one line saying why not)

import aiohttp  # noqa: E402

from tests.e2e.env import missing  # noqa: E402
from tests.e2e.harness import Cluster  # noqa: E402

WEBHOOK = "pod.gpuqueue.io"


def pod(ns: str, i: int, gpu: bool) -> dict:
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpu:
        resources = {"requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                     "limits": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i:05d}", "namespace": ns, "labels": {"app": "cost"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                                     "resources": resources}]}}


def webhook_connections(port: int) -> int:
    """Established connections to the webhook's port now (ss), kube-apiserver's among them."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True).stdout
    return len([line for line in out.splitlines() if line.strip()])


async def create_pods(e2e: Cluster, ns: str, n: int, rate: float, gpu: bool, sample=None) -> dict[int, int]:
    """Creates ``n`` pods at ``rate`` per second; the count of each HTTP status answered."""
    c = e2e.c
    ctx = ssl.create_default_context(cafile=c.path("pki", "ca.crt"))
    ctx.load_cert_chain(c.path("pki", "admin.crt"), c.path("pki", "admin.key"))
    statuses: dict[int, int] = defaultdict(int)
    url = f"{c.server}/api/v1/namespaces/{ns}/pods"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=64)) as s:
        async def one(i: int) -> None:
            try:
                async with s.post(url, json=pod(ns, i, gpu), timeout=aiohttp.ClientTimeout(total=60)) as r:
                    await r.read()
                    statuses[r.status] += 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                statuses[0] += 1

        tasks, start, at = [], time.monotonic(), 0.0
        for i in range(n):
            if sample is not None and i % 100 == 50:
                sample()
            at += random.expovariate(rate)
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return dict(statuses)


def scrape(e2e: Cluster) -> str:
    status, text = e2e.api.call("GET", "/metrics")
    if status != 200 or not isinstance(text, str):
        raise RuntimeError(f"GET /metrics answered {status}")
    return text


LINE = re.compile(r'^(\w+)(?:\{([^}]*)\})? ([0-9.e+-]+|\+Inf)$')


def samples(text: str, metric: str):
    """(labels, value) of each of ``metric``'s samples in a /metrics text."""
    for line in text.splitlines():
        m = LINE.match(line)
        if m and m.group(1) == metric:
            yield dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")), float(m.group(3))


def series(text: str, metric: str, **match: str) -> dict[str, float]:
    """Sum of ``metric``'s samples whose labels include ``match``, keyed by the `le` label (or '')."""
    out: dict[str, float] = defaultdict(float)
    for labels, value in samples(text, metric):
        if all(labels.get(k) == v for k, v in match.items()):
            out[labels.get("le", "")] += value
    return out


def failed_webhook_calls(e2e: Cluster) -> float:
    """kube-apiserver's count of webhook calls that failed (no answer, refused, reset, timed out)."""
    return sum(series(scrape(e2e), "apiserver_admission_webhook_rejection_count",
                      error_type="calling_webhook_error").values())


def quantile(before: dict[str, float], after: dict[str, float], q: float) -> float:
    """The q-quantile of the observations between two scrapes of a histogram, interpolated in its bucket."""
    buckets = sorted(((float(le), after[le] - before.get(le, 0.0)) for le in after if le not in ("", "+Inf")))
    total = after.get("+Inf", 0.0) - before.get("+Inf", 0.0)
    if total <= 0:
        return float("nan")
    target, lo, prev = q * total, 0.0, 0.0
    for le, count in buckets:
        if count >= target:
            return lo + (le - lo) * ((target - prev) / (count - prev) if count > prev else 1.0)
        lo, prev = le, count
    return float("inf")


def share_within(before: dict[str, float], after: dict[str, float], le: float) -> float:
    """The percentage of a histogram's observations between two scrapes that fell within ``le``
    seconds, a bucket edge (kube-apiserver's webhook buckets: 5 ms, 25 ms, 100 ms, ...)."""
    edge = next((k for k in after if k not in ("", "+Inf") and abs(float(k) - le) < 1e-9), None)
    total = after.get("+Inf", 0.0) - before.get("+Inf", 0.0)
    if edge is None or total <= 0:
        return float("nan")
    return 100.0 * (after[edge] - before.get(edge, 0.0)) / total


def phase(e2e: Cluster, name: str, pods: int, rate: float, gpu: bool) -> dict:
    e2e.restart_webhook()
    e2e.namespace(name)
    time.sleep(1.0)
    before, cpu0 = scrape(e2e), bench_env.cpu_seconds(e2e.webhook.pid)
    t0 = time.monotonic()
    conns: list[int] = []
    statuses = asyncio.run(create_pods(e2e, name, pods, rate, gpu,
                                       sample=lambda: conns.append(webhook_connections(e2e.webhook_port))))
    wall = time.monotonic() - t0
    after, cpu1 = scrape(e2e), bench_env.cpu_seconds(e2e.webhook.pid)
    hist = "apiserver_admission_webhook_admission_duration_seconds_bucket"
    admit_b, admit_a = (series(t, hist, name=WEBHOOK, type="admit") for t in (before, after))
    valid_b, valid_a = (series(t, hist, name=WEBHOOK, type="validating") for t in (before, after))
    err = "apiserver_admission_webhook_rejection_count"
    errors = sum(series(after, err, error_type="calling_webhook_error").values()) - \
        sum(series(before, err, error_type="calling_webhook_error").values())  # the phase's, from its two scrapes
    calls = (admit_a.get("+Inf", 0.0) - admit_b.get("+Inf", 0.0)) + (valid_a.get("+Inf", 0.0) - valid_b.get("+Inf", 0.0))
    return {"rate": pods / wall, "calls": calls / pods, "cpu_ms": (cpu1 - cpu0) / pods * 1000,
            "admit_p50": quantile(admit_b, admit_a, 0.5) * 1000, "admit_p99": quantile(admit_b, admit_a, 0.99) * 1000,
            "admit_le5ms": share_within(admit_b, admit_a, 0.005), "admit_le25ms": share_within(admit_b, admit_a, 0.025),
            "valid_p99": quantile(valid_b, valid_a, 0.99) * 1000, "webhook_errors": errors,
            "failed": sum(v for k, v in statuses.items() if k != 201), "max_conns": max(conns, default=0)}


def clean(e2e: Cluster, name: str) -> None:
    """The phase's namespace deleted and gone: the next phase does not share the cores with the
    deletion of this one's pods."""
    e2e.delete_namespaces([name])
    e2e.wait_for(f"namespace {name} gone", lambda: not [n for n in e2e.items("/api/v1/namespaces")
                                                         if n["metadata"]["name"] == name], timeout=600, poll=1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kinds", default="gpu,cpu", help="the kinds of pod, alternating: gpu, cpu")
    args = ap.parse_args()
    why = missing()
    if why:
        sys.exit(f"webhook_cost_real.py: {why}")
    kinds = args.kinds.split(",")
    if set(kinds) - {"gpu", "cpu"}:
        sys.exit(f"webhook_cost_real.py: --kinds takes gpu and cpu, got {args.kinds}")
    e2e = Cluster(log=lambda msg: print(msg, flush=True))
    results: dict[str, list[dict]] = defaultdict(list)
    try:
        e2e.start()
        e2e.kubelet.passive = True
        version = ".".join(map(str, e2e.version))
        print(f"Kubernetes v{version}; {args.pods} pods per phase at {args.rate:g}/s", flush=True)
        for run in range(args.runs):
            for kind in (kinds if run % 2 == 0 else list(reversed(kinds))):
                name = f"cost-{kind}-{run}"
                got = phase(e2e, name, args.pods, args.rate, kind == "gpu")
                results[kind].append(got)
                print(f"run {run + 1} {kind}: " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()), flush=True)
                clean(e2e, name)
    finally:
        e2e.stop()
    print(f"\nKubernetes v{version}, pods at {args.rate:g}/s, {args.pods} per phase, "
          f"median (min-max) of {args.runs} alternating runs (real control plane):")
    keys = ("rate", "calls", "cpu_ms", "admit_p50", "admit_p99", "admit_le5ms", "admit_le25ms", "valid_p99",
            "webhook_errors", "failed", "max_conns")
    print(f"{'':8}" + "".join(f"{k:>22}" for k in keys))
    for kind in kinds:
        rows = results[kind]
        cells = []
        for k in keys:
            xs = [r[k] for r in rows]
            cells.append(f"{statistics.median(xs):8.2f} ({min(xs):.2f}-{max(xs):.2f})")
        print(f"{kind:8}" + "".join(f"{c:>22}" for c in cells))
    if len(kinds) == 2 and all(results[k] for k in kinds):
        a, b = kinds
        for k in ("calls", "cpu_ms"):
            ma, mb = statistics.median(r[k] for r in results[a]), statistics.median(r[k] for r in results[b])
            print(f"{k}: {b} / {a} = {mb / ma:.2f}" if ma else f"{k}: {a} is 0")


if __name__ == "__main__":
    main()
