"""Benchmark: what the extender's HTTP/TLS layer costs per pod, server variant against variant.

Each variant is one server process pinned to one CPU (the client on another), serving one
connection at a time as kube-scheduler calls an extender: per pod, POST /filter then POST
/prioritize with the bodies of ``extender_bench.py`` (5,000-node cache, 500 candidates, ~12 KB
bodies). A variant is ``KIND/TRANSPORT/LOOP``:

- KIND ``raw``: a minimal asyncio Protocol that finds Content-Length, waits for the body and
  writes a constant answer: the event loop (and TLS) with next to no HTTP;
- ``bare``: an aiohttp ``web.Application`` route that reads the body and answers a constant,
  as ``extender_bench.py``'s baseline;
- ``lowbare``: aiohttp's low-level ``web.Server`` with the same handler (no router, no
  middlewares, no Application);
- ``ext:LABEL``: the extender, ``start()`` of the app module named by ``--app LABEL=SOURCE``
  (SOURCE is a file, or ``git:REV`` for extender/scheduler/app.py at that revision; ``ext:cur``
  is the checkout's own app.py). Only the HTTP layer differs between two ``ext`` variants: they
  import the same verbs.
- TRANSPORT ``http`` or ``https`` (the extender's TLS context, gpuqueue/tls.py); LOOP ``asyncio``
  or ``uvloop`` (not a dependency of gpuqueue: ``pip install uvloop`` to measure it).

Rounds alternate the variants (the order rotates every round), so that a change of the shared
machine's load falls on all of them; figures are medians over rounds. Server CPU is read from
the kernel's per-thread run time of the server process (/proc/PID/task/*/schedstat, ns), so no
request of the measurement itself is counted.

    python bench/http_layer_bench.py [--pods 1000] [--rounds 5]
        [--variants raw/http/asyncio,raw/https/asyncio,bare/http/asyncio,...] [--app main=git:main]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import multiprocessing as mp
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_env  # noqa: E402,F401  (the repository on sys.path, or one line saying why not)

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from extender_bench import (BARE_ANSWER, answered_names, attempt, build_view, make_certs, pct,  # noqa: E402
                            prioritize_body, request_bodies)
from pinning import LOAD_CPU, SERVER_CPU, pin  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAW_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % len(BARE_ANSWER)) + BARE_ANSWER
DEFAULT_VARIANTS = "raw/http/asyncio,raw/https/asyncio,bare/http/asyncio,bare/https/asyncio,ext:cur/https/asyncio"


class RawHTTP(asyncio.Protocol):
    """Just enough HTTP/1.1 for this client: keep-alive, Content-Length bodies."""

    def connection_made(self, transport):
        self.transport, self.buf = transport, bytearray()

    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.buf[:end + 2]).lower()
            at = head.find(b"content-length:")
            size = int(head[at + 15:head.index(b"\r\n", at)]) if at >= 0 else 0
            if len(self.buf) < end + 4 + size:
                return
            del self.buf[:end + 4 + size]
            self.transport.write(RAW_RESPONSE)


class HttptoolsBare(asyncio.Protocol):
    """llhttp (httptools) parsing, the body gathered, a constant answer written at once."""

    def connection_made(self, transport):
        import httptools
        self.transport, self.parser, self.body = transport, httptools.HttpRequestParser(self), []

    def data_received(self, data):
        self.parser.feed_data(data)

    def on_body(self, chunk):
        self.body.append(chunk)

    def on_message_complete(self):
        b"".join(self.body)
        self.body = []
        self.transport.write(RAW_RESPONSE)


def load_app_module(label: str, source: str):
    if source.startswith("git:"):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{source[4:]}:extender/scheduler/app.py"],
                              check=True, capture_output=True, text=True).stdout
        path = Path(tempfile.mkdtemp()) / f"app_{label}.py"
        path.write_text(text)
    else:
        path = Path(source)
        sys.path.insert(0, str(path.parent))  # its own imports beside it
    spec = importlib.util.spec_from_file_location(f"bench_app_{label}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def serve(variant: str, app_source: str | None, cert_dir: str, port_q: mp.Queue) -> None:
    pin(SERVER_CPU)
    kind, transport, loop_kind = variant.split("/")
    https = transport == "https"
    from gpuqueue.tls import ReloadingTLS
    ctx = ReloadingTLS(Path(cert_dir)).context if https else None

    async def bare(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=BARE_ANSWER, content_type="application/json")

    async def main():
        if kind in ("raw", "htbare"):
            protocol = RawHTTP if kind == "raw" else HttptoolsBare
            server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0, ssl=ctx)
            port = server.sockets[0].getsockname()[1]
        elif kind in ("bare", "lowbare"):
            if kind == "bare":
                app = web.Application()
                app.router.add_post("/filter", bare)
                app.router.add_post("/prioritize", bare)
                runner = web.AppRunner(app, access_log=None)
            else:
                runner = web.ServerRunner(web.Server(bare, access_log=None))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
            await site.start()
            port = runner.addresses[0][1]
        else:
            mod = load_app_module(kind[4:], app_source)
            runner = await mod.start(build_view(), host="127.0.0.1", port=0,
                                     cert_dir=cert_dir if https else None, insecure_http=not https)
            port = runner.addresses[0][1]
        port_q.put((os.getpid(), port))
        await asyncio.Event().wait()

    if loop_kind == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    else:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


def user_system(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` (clock ticks: for the split only)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def server_cpu(pid: int) -> float:
    """Seconds on CPU of every thread of ``pid``, from the scheduler's nanosecond counters."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


async def one_round(url: str, pid: int, bodies, prio_bodies, pods: int, first: int,
                    ctx: ssl.SSLContext | None, constant: bool) -> dict:
    per_pod: list[float] = []
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx if ctx else False, limit=1)) as s:
        async def pod(i: int) -> None:
            k = i % len(bodies)
            fbody = attempt(bodies[k][0], k, i)
            t0 = time.perf_counter()
            async with s.post(f"{url}/filter", data=fbody, headers=headers) as r:
                assert r.status == 200, r.status
                answer = await r.read()
            t1 = time.perf_counter()
            pbody = attempt(prio_bodies[k], k, i) if constant else prioritize_body(fbody, answered_names(answer))
            t2 = time.perf_counter()
            async with s.post(f"{url}/prioritize", data=pbody, headers=headers) as r:
                assert r.status == 200, r.status
                await r.read()
            per_pod.append((t1 - t0) + (time.perf_counter() - t2))

        await pod(first)  # opens the connection (and its TLS session) outside the measurement
        c0, w0, us0 = server_cpu(pid), time.perf_counter(), user_system(pid)
        for i in range(first + 1, first + 1 + pods):
            await pod(i)
        wall, cpu, us1 = time.perf_counter() - w0, server_cpu(pid) - c0, user_system(pid)
    user, system = us1[0] - us0[0], us1[1] - us0[1]
    return {"p50": pct(per_pod, 50), "p99": pct(per_pod, 99), "wall_rate": pods / wall, "cpu": cpu / pods,
            "sys": system / max(user + system, 1e-9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=1000, help="pods per round and variant")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="KIND/TRANSPORT/LOOP, comma separated")
    ap.add_argument("--app", action="append", default=[], metavar="LABEL=SOURCE",
                    help="an extender app module: a file or git:REV (ext:cur is this checkout's)")
    ap.add_argument("--baseline", help="the variant the others are divided by (default: the first)")
    args = ap.parse_args()
    pin(LOAD_CPU)
    apps = {"cur": str(ROOT / "extender/scheduler/app.py")}
    apps.update(a.split("=", 1) for a in args.app)
    variants = args.variants.split(",")
    baseline = args.baseline or variants[0]

    bodies = request_bodies()
    # The constant handlers answer no names: their prioritize bodies are made once from the verbs.
    from gpuqueue.extender.scheduler.memo import PodMemo
    from gpuqueue.extender.scheduler.verbs import filter_verb
    view, memo = build_view(), PodMemo()
    prio_bodies = {k: prioritize_body(b, answered_names(filter_verb(b, view, memo))) for k, (b, _) in enumerate(bodies)}
    print(f"{len(variants)} variants, {args.pods} pods per round each, {args.rounds} rounds; "
          f"filter body {len(bodies[0][0])} bytes; load average {os.getloadavg()[0]:.1f}")

    results: dict[str, list[dict]] = {v: [] for v in variants}
    spawn = mp.get_context("spawn")
    procs, where = [], {}
    with tempfile.TemporaryDirectory() as d:
        ca = make_certs(Path(d))
        client_ctx = ssl.create_default_context(cafile=str(ca))
        try:
            for v in variants:
                kind = v.split("/")[0]
                q = spawn.Queue()
                p = spawn.Process(target=serve, args=(v, apps.get(kind[4:]) if kind.startswith("ext:") else None, d, q),
                                  daemon=True)
                p.start()
                procs.append(p)
                where[v] = q.get(timeout=120)
            first = 0
            for r in range(args.rounds + 1):  # round 0 warms every server up
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for v in order:
                    pid, port = where[v]
                    https = v.split("/")[1] == "https"
                    res = asyncio.run(one_round(f"{'https' if https else 'http'}://127.0.0.1:{port}", pid, bodies,
                                                prio_bodies, args.pods if r else args.pods // 4, first,
                                                client_ctx if https else None, not v.startswith("ext:")))
                    first += args.pods + 1
                    if r:
                        results[v].append(res)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.join()

    print(f"\nserver pinned to CPU {SERVER_CPU}, client to CPU {LOAD_CPU}, one connection; medians of "
          f"{args.rounds} rounds; ratios are per round against {baseline}, then the median "
          f"(min-max); load average {os.getloadavg()[0]:.1f}")
    print(f"{'':30s}{'pod p50':>9s}{'pod p99':>9s}{'pods/s':>8s}{'CPU/pod':>10s}{'per request':>12s}"
          f"{'kernel':>8s}{'x ' + baseline:>30s}")
    for v in variants:
        rs = results[v]
        ratios = sorted(a["cpu"] / b["cpu"] for a, b in zip(rs, results[baseline]))
        med = lambda key: statistics.median(x[key] for x in rs)  # noqa: E731
        print(f"{v:30s}{med('p50') * 1e3:7.3f}ms{med('p99') * 1e3:7.3f}ms{med('wall_rate'):8.0f}"
              f"{med('cpu') * 1e6:8.0f}us{med('cpu') * 1e6 / 2:10.0f}us{med('sys') * 100:7.0f}%"
              f"{f'x{statistics.median(ratios):.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f})':>30s}")
    print("\nper round, server CPU per pod (us): " + "; ".join(
        f"{v}: " + " ".join(f"{x['cpu'] * 1e6:.0f}" for x in results[v]) for v in variants))


if __name__ == "__main__":
    main()
