"""Benchmark: POST /mutate-batch-v1-job over TLS with keep-alive, against a bare handler on the
same HTTP layer and listener (gpuqueue.http11 behind gpuqueue.listener) that returns the very same
response bytes, measured in the same run.

    /work/venv/bin/python bench/webhook_bench.py [--seconds 3] [--rounds 5] [--rate 500]
                                                 [--connections 8] [--python-load]

Each server runs in its own process pinned to CPU 0; the load generator is pinned to CPU 1.
The load generator is wrk (Debian package `wrk`) when it is on PATH: compiled, so it does not
eat the figures as a Python client does on a small machine. Without wrk the script falls back
to an aiohttp client in this process, and says so.

Per round and server:
- throughput: closed loop, N keep-alive connections, as fast as the server answers;
- latency at a fixed rate: each connection waits an exponentially distributed pause between
  requests (a Poisson arrival stream of --rate per second in total), p50/p99 measured;
- server CPU per review: user+system time of the server process over the throughput run
  (/proc), divided by the reviews answered. Its inverse is the throughput one fully available
  core would give, the figure least disturbed by other load on a shared machine.
bare and webhook alternate --rounds times; medians are reported, and ratios webhook / bare.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import re
import shutil
import ssl
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import bench_env  # noqa: E402  (the repository on sys.path, or one line saying why not)

import aiohttp  # noqa: E402

from tests import shared_fixtures  # noqa: E402
from pinning import LOAD_CPU, SERVER_CPU, pin  # noqa: E402

FIXTURE = shared_fixtures.FIXTURES / "k8s-1.24/admission/mutating-review-request.job-create.no-labels.json"
PATHS = {"job": "/mutate-batch-v1-job", "pod": "/mutate--v1-pod", "pod-validate": "/validate--v1-pod",
         "binding": "/validate--v1-binding"}


def _pod(gpus: int) -> dict:
    """A pod as the Job controller creates it, after kube-apiserver's defaulting (what a mutating
    webhook receives), requesting ``gpus`` GPUs."""
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": str(gpus)}}
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"generateName": "train-", "namespace": "team-a", "creationTimestamp": None,
                     "labels": {"batch.kubernetes.io/controller-uid": "8f0f6a34-7a51-4c5e-9a38-0d6c9a1e5b21",
                                "batch.kubernetes.io/job-name": "train", "controller-uid": "8f0f6a34-7a51-4c5e-9a38-0d6c9a1e5b21",
                                "job-name": "train", "kueue.x-k8s.io/queue-name": "gpu-queue"},
                     "annotations": {"batch.kubernetes.io/job-completion-index": "3"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                          "uid": "8f0f6a34-7a51-4c5e-9a38-0d6c9a1e5b21", "controller": True,
                                          "blockOwnerDeletion": True}],
                     "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                                        "time": "2026-12-07T10:00:00Z", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}}},
                                                     "f:spec": {"f:containers": {}}}}]},
        "spec": {"volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [
                     {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                     {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}],
                     "defaultMode": 420}}],
                 "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                 "command": ["python", "train.py", "--epochs", "10"], "resources": resources,
                                 "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                                 "imagePullPolicy": "IfNotPresent"}],
                 "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                 "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"},
                 "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
                 "schedulerName": "default-scheduler",
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300},
                                 {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300}],
                 "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {}}


def _review(kind: str) -> dict:
    """The AdmissionReview kube-apiserver sends for ``kind``'s path."""
    if kind == "job":
        return json.loads(FIXTURE.read_text())
    user = {"username": "system:serviceaccount:kube-system:job-controller", "groups": ["system:serviceaccounts",
            "system:serviceaccounts:kube-system", "system:authenticated"]}
    common = {"uid": "0c5f1a0e-3b8e-4f55-a1f3-1f2b7d9e6a10", "namespace": "team-a", "operation": "CREATE",
              "userInfo": user, "dryRun": False}
    if kind == "binding":
        request = {**common, "kind": {"group": "", "version": "v1", "kind": "Binding"},
                   "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "binding",
                   "requestKind": {"group": "", "version": "v1", "kind": "Binding"},
                   "requestResource": {"group": "", "version": "v1", "resource": "pods"}, "requestSubResource": "binding",
                   "name": "train-3-abcde",
                   "userInfo": {"username": "system:kube-scheduler", "groups": ["system:authenticated"]},
                   "object": {"kind": "Binding", "apiVersion": "v1",
                              "metadata": {"name": "train-3-abcde", "namespace": "team-a", "uid": "b3d1", "creationTimestamp": None},
                              "target": {"kind": "Node", "name": "gh200-017"}},
                   "oldObject": None, "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}
    else:
        request = {**common, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                   "resource": {"group": "", "version": "v1", "resource": "pods"},
                   "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                   "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                   "object": _pod(4), "oldObject": None, "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def _serve(kind: str, cert_dir: str, port_q: mp.Queue, answer: bytes, path: str) -> None:
    pin(SERVER_CPU)
    from gpuqueue.tls import ReloadingTLS
    from gpuqueue.webhook.kueue_validation import NoCohorts
    from gpuqueue.jobframework.managed import StaticQueueView
    from gpuqueue.http11 import JSON, Answer, Route, Server
    from gpuqueue.heap import settle_heap
    from gpuqueue.webhook.app import AdmissionHandlers, WebhookSettings, start_server

    async def main() -> None:
        tls = ReloadingTLS(Path(cert_dir))
        if kind == "webhook":
            http = AdmissionHandlers(WebhookSettings(), StaticQueueView(local_queues={("team-a", "default")}),
                                     NoCohorts()).server()
        else:
            bare = Answer(200, JSON, answer)
            http = Server({path.encode(): Route(b"POST", lambda body, conn: bare)}, 8 * 1024 * 1024)
        server = await start_server(http, "127.0.0.1", 0, tls.context)
        settle_heap()  # as `gpuqueue webhook` does; for both servers, so the comparison stays fair
        port_q.put(server.port)
        await asyncio.Event().wait()

    asyncio.run(main())


def _cpu_seconds(pid: int) -> float | None:
    try:
        return bench_env.cpu_seconds(pid)
    except OSError:
        return None


@dataclass
class Run:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


# -- wrk ----------------------------------------------------------------------------------------

WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
{close}local pause_ms = {pause_ms}
if pause_ms > 0 then
  function delay()  -- wrk truncates to whole ms: round instead, the mean stays right
    return math.floor(-math.log(1 - math.random()) * pause_ms + 0.5)
  end
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK %d %d %d %d %d\\n", summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


def _wrk(url: str, body_file: Path, seconds: int, conns: int, pause_ms: float, tmp: Path, close: bool = False) -> Run:
    script = tmp / f"post-{pause_ms:g}.lua"
    script.write_text(WRK_SCRIPT.format(body=body_file, pause_ms=pause_ms,
                                        close='wrk.headers["Connection"] = "close"\n' if close else ""))
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "-s", str(script), url],
                         capture_output=True, text=True, check=True, preexec_fn=lambda: pin(LOAD_CPU)).stdout
    m = re.search(r"^WRK (\d+) (\d+) (\d+) (\d+) (\d+)$", out, re.M)
    if m is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    n, dur_us, errors, p50, p99 = map(int, m.groups())
    if errors:
        raise RuntimeError(f"wrk saw {errors} errors (non-2xx answers, timeouts or socket errors):\n{out}")
    return Run(n, dur_us / 1e6, p50 / 1000, p99 / 1000)


# -- the Python fallback -------------------------------------------------------------------------

async def _py_throughput(url: str, body: bytes, ctx: ssl.SSLContext, seconds: float, conns: int) -> Run:
    done = 0
    lat: list[float] = []
    deadline = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=conns)) as s:
        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    assert r.status == 200
                lat.append((time.perf_counter() - t0) * 1000)
                done += 1
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conns)))
        return Run(done, time.perf_counter() - start, _pct(lat, 50), _pct(lat, 99))


async def _py_latency(url: str, body: bytes, ctx: ssl.SSLContext, seconds: float, rate: float, conns: int) -> Run:
    lat: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=conns)) as s:
        async def one() -> None:
            t0 = time.perf_counter()
            async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                assert r.status == 200
            lat.append((time.perf_counter() - t0) * 1000)
        for _ in range(20):  # open every keep-alive connection before measuring: no handshakes inside
            await asyncio.gather(*(one() for _ in range(conns)))
        lat.clear()
        gc.collect()
        tasks = []
        start = time.perf_counter()
        for i in range(int(seconds * rate)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        return Run(len(lat), time.perf_counter() - start, _pct(lat, 50), _pct(lat, 99))


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _answer_of(cert_dir: str, body: bytes, ctx: ssl.SSLContext, path: str) -> bytes:
    q: mp.Queue = mp.Queue()
    proc = mp.Process(target=_serve, args=("webhook", cert_dir, q, b"", path), daemon=True)
    proc.start()
    try:
        return asyncio.run(_one_answer(f"https://127.0.0.1:{q.get(timeout=20)}{path}", body, ctx))
    finally:
        proc.terminate()
        proc.join()


async def _one_answer(url: str, body: bytes, ctx: ssl.SSLContext) -> bytes:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        async with s.post(url, data=body) as r:
            return await r.read()


# -- main ------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=3, help="length of each measurement")
    ap.add_argument("--rate", type=float, default=500.0, help="reviews/s of the fixed-rate latency run")
    ap.add_argument("--connections", type=int, default=8, help="keep-alive connections of the throughput run")
    ap.add_argument("--rate-connections", type=int, default=32,
                    help="connections of the fixed-rate run: each pauses connections/rate on average after an "
                         "answer, so the more there are, the less the answer time itself lowers the rate reached")
    ap.add_argument("--rounds", type=int, default=5, help="bare and webhook alternate this many times; medians reported")
    ap.add_argument("--python-load", action="store_true", help="use the Python load generator even if wrk is there")
    ap.add_argument("--review", choices=sorted(PATHS), default="job",
                    help="job: the recorded Job creation; pod / pod-validate: a Job's 4-GPU pod created; "
                         "binding: kube-scheduler binding a pod")
    ap.add_argument("--close", action="store_true",
                    help="a new TLS connection for every review (Connection: close), as kube-apiserver does past "
                         "its 25 idle connections per webhook host; wrk only")
    args = ap.parse_args()
    shared_fixtures.require_for_script("bench/webhook_bench.py")

    from gpuqueue.certs.generate import ServingIdentity, generate, write_files

    use_wrk = shutil.which("wrk") is not None and not args.python_load
    if args.close and not use_wrk:
        ap.error("--close needs wrk")
    path = PATHS[args.review]
    doc = _review(args.review)
    body = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
    rows: dict[str, list[tuple[float, float, float, float, float]]] = {"bare": [], "webhook": []}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        write_files(tmp, generate(ServingIdentity(ips=("127.0.0.1",))))
        (tmp / "body.json").write_bytes(body)
        ctx = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
        if not use_wrk:
            pin(LOAD_CPU)
        answer = _answer_of(str(tmp), body, ctx, path)  # the bare server answers the same bytes
        for kind in ("bare", "webhook") * args.rounds:
            q: mp.Queue = mp.Queue()
            proc = mp.Process(target=_serve, args=(kind, str(tmp), q, answer, path), daemon=True)
            proc.start()
            try:
                url = f"https://127.0.0.1:{q.get(timeout=20)}{path}"
                got = asyncio.run(_one_answer(url, body, ctx))
                assert got == answer, (kind, got[:200])
                if use_wrk:
                    _wrk(url, tmp / "body.json", 1, args.connections, 0, tmp)  # warm-up
                    cpu0 = _cpu_seconds(proc.pid)
                    tput = _wrk(url, tmp / "body.json", args.seconds, args.connections, 0, tmp, args.close)
                    cpu1 = _cpu_seconds(proc.pid)
                    fixed = _wrk(url, tmp / "body.json", args.seconds, args.rate_connections,
                                 args.rate_connections * 1000 / args.rate, tmp, args.close)
                else:
                    cpu0 = _cpu_seconds(proc.pid)
                    tput = asyncio.run(_py_throughput(url, body, ctx, args.seconds, args.connections))
                    cpu1 = _cpu_seconds(proc.pid)
                    fixed = asyncio.run(_py_latency(url, body, ctx, args.seconds, args.rate, args.connections))
                cpu_us = (cpu1 - cpu0) / tput.requests * 1e6 if cpu0 is not None and cpu1 is not None else float("nan")
                rows[kind].append((tput.rate, cpu_us, fixed.rate, fixed.p50_ms, fixed.p99_ms))
            finally:
                proc.terminate()
                proc.join()
    med = {k: [statistics.median(r[i] for r in v) for i in range(5)] for k, v in rows.items()}
    # ratios of the two servers measured next to each other, then the median of those
    pair = [statistics.median(w[i] / b[i] for b, w in zip(rows["bare"], rows["webhook"])) for i in range(5)]
    gen = "wrk (1 thread, pinned to CPU 1)" if use_wrk else "Python aiohttp client (wrk not found: figures include its own cost)"
    what = {"job": "recorded kube-apiserver review, Job without labels -> default LocalQueue",
            "pod": "a Job's 4-GPU pod created, mutating", "pod-validate": "a Job's 4-GPU pod created, validating",
            "binding": "kube-scheduler binding a pod"}[args.review]
    print(f"request body {len(body)} B ({what}), {'a new TLS connection per review' if args.close else 'keep-alive'}; "
          f"load generator: {gen}")
    print(f"medians of {args.rounds} alternating rounds, {args.seconds:g} s each, {args.connections} keep-alive connections "
          f"({args.rate_connections if use_wrk else args.connections} at the fixed rate), server pinned to CPU {SERVER_CPU}")
    print(f"{'':9}{'req/s':>9}{'CPU us/req':>12}{'req/s/core':>12}{'fixed rate':>12}{'p50 ms':>9}{'p99 ms':>9}")
    for kind in ("bare", "webhook"):
        rps, cpu, rate, p50, p99 = med[kind]
        print(f"{kind:9}{rps:9.0f}{cpu:12.0f}{1e6 / cpu:12.0f}{rate:12.0f}{p50:9.2f}{p99:9.2f}")
    print(f"{'ratio':9}{pair[0]:9.2f}{pair[1]:12.2f}{1 / pair[1]:12.2f}{pair[2]:12.2f}{pair[3]:9.2f}{pair[4]:9.2f}"
          "   (webhook / bare, median of per-round ratios)")
    print("per round (req/s, CPU us/req, p99 ms at fixed rate): " + "; ".join(
        f"bare {b[0]:.0f}/{b[1]:.0f}/{b[4]:.2f} webhook {w[0]:.0f}/{w[1]:.0f}/{w[4]:.2f}"
        for b, w in zip(rows["bare"], rows["webhook"])))


if __name__ == "__main__":
    main()
