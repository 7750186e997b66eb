"""Benchmark: POST /mutate-batch-v1-job over TLS with keep-alive, against a bare aiohttp
TLS handler that returns the very same response bytes, measured in the same run.

    /work/venv/bin/python bench/webhook_bench.py [--seconds 5] [--rate 500] [--connections 8]

Each server runs in its own process pinned to one core (CPU 0 when available); the
load generator runs in this process (pinned to another core when there is one).
Reported: max throughput (closed loop, N keep-alive connections) and p50/p99 latency
at a fixed open-loop rate, each with its ratio to the bare handler.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/k8s-1.24/admission/mutating-review-request.job-create.no-labels.json"
PATH = "/mutate-batch-v1-job"


def _pin(cpu: int) -> None:
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[cpu % len(cpus)]})
    except (AttributeError, OSError):
        pass


def _serve(kind: str, cert_dir: str, port_q: mp.Queue, answer: bytes) -> None:
    _pin(0)
    from certs.reload import ReloadingTLS
    from webhook.mutation import StaticQueueView
    from webhook.kueue_validation import NoCohorts
    from webhook.server import AdmissionHandlers, WebhookSettings, start_server

    async def main() -> None:
        tls = ReloadingTLS(Path(cert_dir))
        if kind == "webhook":
            app = AdmissionHandlers(WebhookSettings(), StaticQueueView(local_queues={("team-a", "default")}), NoCohorts()).app()
        else:
            async def bare(request: web.Request) -> web.Response:
                await request.read()
                return web.Response(body=answer, content_type="application/json")
            app = web.Application()
            app.router.add_post(PATH, bare)
        server = await start_server(app, "127.0.0.1", 0, tls.context)
        port_q.put(server.port)
        await asyncio.Event().wait()

    asyncio.run(main())


async def _throughput(url: str, body: bytes, ctx: ssl.SSLContext, seconds: float, conns: int) -> float:
    done = 0
    deadline = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=conns)) as s:
        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    assert r.status == 200
                done += 1
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conns)))
        return done / (time.perf_counter() - start)


async def _latency(url: str, body: bytes, ctx: ssl.SSLContext, seconds: float, rate: float, conns: int) -> list[float]:
    lat: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=conns)) as s:
        async def one() -> None:
            t0 = time.perf_counter()
            async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
            lat.append((time.perf_counter() - t0) * 1000)
        for _ in range(20):  # open every keep-alive connection before measuring: no handshakes inside
            await asyncio.gather(*(one() for _ in range(conns)))
        lat.clear()
        gc.collect()
        tasks = []
        start = time.perf_counter()
        n = int(seconds * rate)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return lat


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="bare and webhook alternate this many times; medians reported")
    args = ap.parse_args()

    from certs.generate import ServingIdentity, generate, write_files
    from webhook.mutation import ManagedJobsConfig, StaticQueueView, mutate_job
    from webhook import review

    doc = json.loads(FIXTURE.read_text())
    body = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
    req = doc["request"]
    answer = review.allow(req["uid"], mutate_job(req["object"], StaticQueueView(local_queues={("team-a", "default")}),
                                                 ManagedJobsConfig()).patch)
    results: dict[str, list[tuple[float, float, float]]] = {"bare": [], "webhook": []}
    with tempfile.TemporaryDirectory() as tmp:
        write_files(Path(tmp), generate(ServingIdentity(ips=("127.0.0.1",))))
        ctx = ssl.create_default_context(cafile=f"{tmp}/ca.crt")
        _pin(1)
        for kind in ("bare", "webhook") * args.rounds:
            q: mp.Queue = mp.Queue()
            proc = mp.Process(target=_serve, args=(kind, tmp, q, answer), daemon=True)
            proc.start()
            try:
                url = f"https://127.0.0.1:{q.get(timeout=20)}{PATH}"
                got = asyncio.run(_one_answer(url, body, ctx))
                assert got == answer, (kind, got[:200])
                rps = asyncio.run(_throughput(url, body, ctx, args.seconds, args.connections))
                lat = asyncio.run(_latency(url, body, ctx, args.seconds, args.rate, args.connections))
                results[kind].append((rps, statistics.median(lat), _pct(lat, 99)))
            finally:
                proc.terminate()
                proc.join()
    b, w = ([statistics.median(r[i] for r in results[k]) for i in range(3)] for k in ("bare", "webhook"))
    print(f"request body {len(body)} B (recorded kube-apiserver review, Job without labels -> default LocalQueue)")
    print(f"medians of {args.rounds} alternating rounds, {args.seconds:.0f} s each, {args.connections} keep-alive connections")
    print(f"{'':10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}   (latency at {args.rate:.0f}/s)")
    print(f"{'bare':10}{b[0]:10.0f}{b[1]:10.2f}{b[2]:10.2f}")
    print(f"{'webhook':10}{w[0]:10.0f}{w[1]:10.2f}{w[2]:10.2f}")
    print(f"{'ratio':10}{w[0] / b[0]:10.2f}{w[1] / b[1]:10.2f}{w[2] / b[2]:10.2f}   (webhook / bare)")


async def _one_answer(url: str, body: bytes, ctx: ssl.SSLContext) -> bytes:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        async with s.post(url, data=body) as r:
            return await r.read()


if __name__ == "__main__":
    main()
