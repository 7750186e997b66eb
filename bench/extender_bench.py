"""Benchmark: the scheduler extender's /filter (+ /prioritize) per pod, over HTTPS keep-alive.

A cache of 5,000 nodes of three flavors (GH200 4 GPUs, H100 8, A100 8; some bound pods, a few
cordoned or tainted), pods of admitted Jobs whose filter request names 500 candidate nodes
(kube-scheduler's sample at that size: 10%), mostly of the pod's flavor. Per pod: POST /filter,
then, only when it passed more than one node, POST /prioritize with exactly the nodes /filter
answered, as kube-scheduler does (same pod bytes, the answered NodeNames in order). An admitted
pod's /filter passes the one node it chose (docs/extender.md), so kube-scheduler skips the call.

Every pod is in the extender's pod cache (as the pod informer would have it) and its Job is admitted
for more pods than are ever in flight, so each request takes the whole enforcement path (the pod
looked up by uid, its owner, its Workload, its pod set's count and requests) and none is refused;
the client presents kube-scheduler's client certificate (mutual TLS, as the product requires).

The server runs in its own process, pinned to one CPU and the client to another (on 2 cores a
server the OS moves between CPUs pays for cold caches on every move; ``--no-pin`` measures
that too); the baseline is a bare handler in that same server (the extender's own HTTP layer,
gpuqueue/http11.py) answering the same requests with a constant, so the ratio is what
our logic costs on top of HTTP (prioritize bodies for the baseline are made once from an
extender answer). bench/http_layer_bench.py compares HTTP layers and event loops. Rounds alternate
bare and extender, at one connection and at a few; figures are medians over the rounds. Every
attempt carries its own pod uid and resourceVersion, so what the extender remembers per pod
helps only within one attempt (its /filter then /prioritize), as with kube-scheduler.

What the target (>= 1,000 pods/s on one core, p99 <= 5 ms) needs: "pods per server CPU-second"
(one core's throughput, whatever else the machine runs) and the p99 at one connection.

``--watch-lag MS`` measures instead what a pod costs when kube-scheduler asks before the
extender's pod watch has brought it (issue 25): no attempt's pod is in the cache when its /filter
arrives; the server takes it in MS milliseconds after the request came (the watch's lag), and the
client reports /filter's latency and how many answers were an Error rather than nodes.

    python bench/extender_bench.py [--pods 1000] [--rounds 3] [--concurrency 1,4] [--no-pin]
    python bench/extender_bench.py --watch-lag 20 [--pods 200]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import multiprocessing as mp
import os
import sys
import random
import re
import ssl
import statistics
import tempfile
import time
from pathlib import Path

import bench_env  # noqa: E402,F401  (the repository on sys.path, or one line saying why not)

import aiohttp  # noqa: E402
import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

from gpuqueue.certs.generate import ServingIdentity, generate, write_files  # noqa: E402
from gpuqueue.extender.placement import FlavorSelector, NodeCache, NodeInfo, Taint  # noqa: E402
from gpuqueue.tls import ReloadingTLS  # noqa: E402
from gpuqueue.extender.scheduler import InMemoryClusterView, routes  # noqa: E402
from gpuqueue.extender.scheduler.memo import PodMemo  # noqa: E402
from gpuqueue.http11 import JSON, Answer, Route, Server  # noqa: E402
from gpuqueue.extender.scheduler.verbs import filter_verb, prioritize_verb  # noqa: E402
from tests import shared_fixtures  # noqa: E402
from pinning import LOAD_CPU, SERVER_CPU, pin  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = shared_fixtures.FIXTURES / "k8s-1.24/extender/filter.request.nodeCacheCapable-true.3-nodes.json"
FLAVORS = {
    "gh200": ({"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}, 4),
    "h100": ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 8),
    "a100": ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, 8),
}
# --nodes and --candidates reach the server's process (spawned: it imports this module anew) through
# the environment.
NODES = int(os.environ.get("EXTENDER_BENCH_NODES", "5000"))
CANDIDATES = int(os.environ.get("EXTENDER_BENCH_CANDIDATES", "500"))
DISTINCT_PODS = 200


def node_names_by_flavor() -> dict[str, list[str]]:
    names = {f: [] for f in FLAVORS}
    for i in range(NODES):
        f = list(FLAVORS)[i % 3]
        names[f].append(f"{f}-node-{i:05d}")
    return names


# Pods are never bound here, so each one stays reserved on its node for the TTL: a short one
# keeps the cluster's occupancy steady (about 2 s worth of pods in flight) instead of filling
# it up as the run goes on, so that rounds compare.
RESERVATION_TTL = 2.0


def build_view(seed: int = 1, attempts: int = 0) -> InMemoryClusterView:
    """The cluster; its pod cache holds the pods of the first ``attempts`` scheduling attempts
    (the extender judges a pod as its cache has it, as the pod informer would)."""
    rnd = random.Random(seed)
    cache = NodeCache(topology_label="topology.kubernetes.io/zone", reservation_ttl=RESERVATION_TTL)
    view = InMemoryClusterView(cache)
    for flavor, names in node_names_by_flavor().items():
        labels, gpus = FLAVORS[flavor]
        for j, name in enumerate(names):
            taints = (Taint("nvidia.com/gpu", "present", "NoSchedule"),) if j % 97 == 0 else ()
            cache.upsert_node(NodeInfo(name, {**labels, "topology.kubernetes.io/zone": f"zone-{j % 20}"},
                                       taints, unschedulable=(j % 89 == 0),
                                       allocatable={"nvidia.com/gpu": gpus, "cpu": 72000, "memory": 480 << 30}))
            used = rnd.randint(0, gpus - 1)
            if used:
                cache.bind(f"bound-{name}", name, used, job_key=f"other/job-{j % 50}")
        # admitted for more pods than ever run at once (no pod is bound; in flight for the TTL)
        view.admit(f"team-{flavor}/train", FlavorSelector.of(flavor, labels), count=10**6,
                   per_pod={"nvidia.com/gpu": 1}, uid=f"uid-train-{flavor}")
    pods = [view.add_pod(orjson.loads(body)["Pod"]) for body, _ in request_bodies()]
    for i in range(attempts):
        k = i % len(pods)
        # at the version attempt() gives the body: kube-scheduler's copy of a pod is the watch's
        view.add_pod(dataclasses.replace(pods[k], uid=f"uid-{k:05d}-{i}", resource_version=f"{i}{pods[k].resource_version}"))
    return view


def request_bodies(seed: int = 2) -> list[tuple[bytes, list[str]]]:
    """(filter body, candidate names) for DISTINCT_PODS pods over the three flavors."""
    rnd = random.Random(seed)
    base = json.loads(FIXTURE.read_text())
    by_flavor = node_names_by_flavor()
    others = {f: [n for g, ns in by_flavor.items() if g != f for n in ns] for f in FLAVORS}
    out = []
    for k in range(DISTINCT_PODS):
        flavor = list(FLAVORS)[k % 3]
        body = copy.deepcopy(base)
        meta = body["Pod"]["metadata"]
        meta["namespace"], meta["name"], meta["uid"] = f"team-{flavor}", f"train-{k}", f"uid-{k:05d}"
        meta["labels"]["job-name"] = "train"
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                    "uid": f"uid-train-{flavor}", "controller": True, "blockOwnerDeletion": True}]
        res = body["Pod"]["spec"]["containers"][0]["resources"]
        res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = "1"
        mine = min(len(by_flavor[flavor]), CANDIDATES * 9 // 10)
        names = rnd.sample(by_flavor[flavor], mine) + rnd.sample(others[flavor], CANDIDATES - mine)
        rnd.shuffle(names)
        body["NodeNames"] = names
        out.append((orjson.dumps(body) + b"\n", names))
    return out


def attempt(body: bytes, k: int, i: int) -> bytes:
    """Pod ``k``'s body as the ``i``-th scheduling attempt: a uid and resourceVersion of its own,
    so nothing the extender remembers per pod carries over from one attempt to the next."""
    return body.replace(b'"uid":"uid-%05d"' % k, b'"uid":"uid-%05d-%d"' % (k, i)).replace(
        b'"resourceVersion":"', b'"resourceVersion":"%d' % i, 1)


_NAMES_HEAD = b',"Nodes":null,"NodeNames":'


def prioritize_body(filter_body: bytes, names: list[str]) -> bytes:
    """What kube-scheduler sends to /prioritize after this /filter: the same pod bytes, the
    answered names."""
    head = filter_body[:filter_body.rindex(_NAMES_HEAD)]
    return head + _NAMES_HEAD + orjson.dumps(names) + b"}\n"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


# -- the server process ------------------------------------------------------------------------

def make_certs(d: Path) -> Path:
    """What `gpuqueue certs generate` writes, for 127.0.0.1: the client presents kube-scheduler's
    client certificate, as the product requires."""
    write_files(d, generate(ServingIdentity("gpuqueue-extender", ips=("127.0.0.1",))))
    return d / "ca.crt"


def client_context(d: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    ctx.load_cert_chain(d / "scheduler-client.crt", d / "scheduler-client.key")
    return ctx


BARE_ANSWER = b'{"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


_UID = re.compile(rb'"uid":"uid-(\d{5})-(\d+)"')


def lagging_watch(route: Route, view: InMemoryClusterView, lag: float) -> Route:
    """``route`` with the attempt's pod taken into ``view`` ``lag`` seconds after its request came."""
    pods = {p.uid: p for p in (view.pod(f"uid-{k:05d}") for k in range(DISTINCT_PODS)) if p is not None}

    def handle(body: bytes, conn):
        m = _UID.search(body)
        if m is not None:
            uid = f"uid-{m.group(1).decode()}-{m.group(2).decode()}"
            pod = dataclasses.replace(pods[f"uid-{m.group(1).decode()}"], uid=uid)
            asyncio.get_running_loop().call_later(lag, view.add_pod, pod)
        return route.handle(body, conn)

    return Route(route.method, handle)


def serve(cert_dir: str, port_q: mp.Queue, pinned: bool, attempts: int, lag: float = 0.0) -> None:
    if pinned:
        pin(SERVER_CPU)
    view = build_view(attempts=attempts)
    bare = Route(b"POST", lambda body, conn: Answer(200, JSON, BARE_ANSWER))

    def cpu(body: bytes, conn) -> Answer:
        t = os.times()
        return Answer(200, JSON, orjson.dumps({"cpu": t.user + t.system}))

    table = {**routes(view, client_cert=True), b"/bare/filter": bare, b"/bare/prioritize": bare,
             b"/cpu": Route(b"GET", cpu)}
    if lag:
        table[b"/filter"] = lagging_watch(table[b"/filter"], view, lag)

    # The baseline the issue names: a bare aiohttp handler, on the same loop, TLS and process.
    async def aiohttp_bare(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=BARE_ANSWER, content_type="application/json")

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_post("/bare/{verb}", aiohttp_bare)
    async def aiohttp_cpu(request: web.Request) -> web.Response:
        return web.Response(body=cpu(b"", None).body, content_type="application/json")

    app.router.add_get("/cpu", aiohttp_cpu)

    async def main():
        # kube-scheduler's client certificate is verified, as by the product's default
        tls = ReloadingTLS(Path(cert_dir), client_ca=Path(cert_dir) / "ca.crt").context
        server = Server(table, 16 * 1024 * 1024)
        await server.listen("127.0.0.1", 0, tls)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
        port_q.put((server.addresses[0][1], runner.addresses[0][1]))
        await asyncio.Event().wait()

    asyncio.run(main())


# -- the client --------------------------------------------------------------------------------

def answered_names(answer: bytes) -> list[str]:
    return orjson.loads(answer)["NodeNames"]


async def run_load(base: str, prefix: str, bodies, pods: int, first: int, concurrency: int,
                   ctx: ssl.SSLContext, prio_bodies: dict[int, bytes] | None) -> dict:
    """One round of ``pods`` pods over ``concurrency`` keep-alive connections. Prioritize bodies
    come from the filter answers unless ``prio_bodies`` gives them (the bare baseline)."""
    per_pod: list[float] = []
    prio_names = {k: orjson.loads(b)["NodeNames"] for k, b in (prio_bodies or {}).items()}
    headers = {"Content-Type": "application/json"}
    conn = aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def cpu() -> float:
            async with s.get(f"{base}/cpu") as r:
                return (await r.json())["cpu"]

        counter = iter(range(first, first + pods))

        async def worker():
            for i in counter:
                k = i % len(bodies)
                fbody = attempt(bodies[k][0], k, i)
                t0 = time.perf_counter()
                async with s.post(f"{base}{prefix}/filter", data=fbody, headers=headers) as r:
                    answer = await r.read()
                t1 = time.perf_counter()
                names = prio_names[k] if prio_bodies is not None else answered_names(answer)
                if len(names) < 2:  # one feasible node: kube-scheduler binds without scoring
                    per_pod.append(t1 - t0)
                    continue
                pbody = (attempt(prio_bodies[k], k, i) if prio_bodies is not None
                         else prioritize_body(fbody, names))
                t2 = time.perf_counter()
                async with s.post(f"{base}{prefix}/prioritize", data=pbody, headers=headers) as r:
                    await r.read()
                per_pod.append((t1 - t0) + (time.perf_counter() - t2))

        await asyncio.gather(*(cpu() for _ in range(concurrency)))  # open the connections first
        c0 = await cpu()
        w0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - w0
        c1 = await cpu()
    return {"p50": pct(per_pod, 50), "p99": pct(per_pod, 99), "wall_rate": pods / wall, "cpu": (c1 - c0) / pods}


def in_process(bodies, pods: int, rounds: int) -> list[float]:
    """Server CPU per pod of the verbs alone (no HTTP), per round."""
    view = build_view(attempts=(rounds + 1) * pods)
    memo = PodMemo()
    out = []
    for r in range(rounds + 1):
        t0 = time.thread_time()
        for i in range(r * pods, (r + 1) * pods):
            k = i % len(bodies)
            fbody = attempt(bodies[k][0], k, i)
            names = answered_names(filter_verb(fbody, view, memo))
            if len(names) > 1:
                prioritize_verb(prioritize_body(fbody, names), view, memo)
        if r:  # the first round warms up
            out.append((time.thread_time() - t0) / pods)
    return out


async def lag_load(base: str, bodies, pods: int, ctx: ssl.SSLContext) -> tuple[list[float], int]:
    """/filter of ``pods`` attempts one after another, as kube-scheduler sends them: latencies and
    how many were answered with an Error."""
    latencies, errors = [], 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1)) as s:
        for i in range(pods):
            k = i % len(bodies)
            t0 = time.perf_counter()
            async with s.post(f"{base}/filter", data=attempt(bodies[k][0], k, i),
                              headers={"Content-Type": "application/json"}) as r:
                answer = orjson.loads(await r.read())
            latencies.append(time.perf_counter() - t0)
            errors += bool(answer.get("Error"))
    return latencies, errors


def watch_lag(args) -> None:
    bodies = request_bodies()
    with tempfile.TemporaryDirectory() as d:
        make_certs(Path(d))
        q: mp.Queue = mp.get_context("spawn").Queue()
        proc = mp.get_context("spawn").Process(target=serve, args=(d, q, not args.no_pin, 0, args.watch_lag / 1e3),
                                               daemon=True)
        proc.start()
        try:
            port, _ = q.get(timeout=120)
            latencies, errors = asyncio.run(lag_load(f"https://127.0.0.1:{port}", bodies, args.pods,
                                                     client_context(Path(d))))
        finally:
            proc.terminate()
            proc.join()
    print(f"pod watch {args.watch_lag:g} ms behind kube-scheduler, {args.pods} pods: /filter p50 "
          f"{ms(pct(latencies, 50))}, p99 {ms(pct(latencies, 99))}, max {ms(max(latencies))}; "
          f"{errors} answered Error, {args.pods - errors} placed")


def ms(x: float) -> str:
    return f"{x * 1e3:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=1000, help="pods per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=NODES, help="nodes in the cache, over 3 flavors")
    ap.add_argument("--candidates", type=int, default=CANDIDATES,
                    help="node names per /filter (nine in ten of the pod's flavor, as kube-scheduler's own filters "
                         "leave them; the rest others)")
    ap.add_argument("--concurrency", default="1,4", help="connections, comma separated")
    ap.add_argument("--no-pin", action="store_true",
                    help="let the OS move the server and the client between CPUs (default: one CPU each)")
    ap.add_argument("--watch-lag", type=float, default=0.0, metavar="MS",
                    help="measure pods the extender's pod watch brings MS ms after kube-scheduler asks")
    args = ap.parse_args()
    shared_fixtures.require_for_script("bench/extender_bench.py")
    if (args.nodes, args.candidates) != (NODES, CANDIDATES):  # this process and the server's, anew
        os.environ.update(EXTENDER_BENCH_NODES=str(args.nodes), EXTENDER_BENCH_CANDIDATES=str(args.candidates))
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if not args.no_pin:
        pin(LOAD_CPU)
    if args.watch_lag:
        watch_lag(args)
        return
    levels = [int(c) for c in args.concurrency.split(",")]

    bodies = request_bodies()
    view = build_view()
    memo = PodMemo()
    prio_bodies = {k: prioritize_body(b, answered_names(filter_verb(b, view, memo))) for k, (b, _) in enumerate(bodies)}
    passed = statistics.mean(len(orjson.loads(b)["NodeNames"]) for b in prio_bodies.values())
    print(f"cache: {NODES} nodes, 3 flavors; {CANDIDATES} candidates per filter, "
          f"{passed:.0f} passed on average (prioritize is called when more than one does); filter body {len(bodies[0][0])} bytes; "
          f"{args.pods} pods per round, {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")

    del view, memo  # the client stays light: a slower client leaves the server's caches colder
    rounds: dict[tuple[str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory() as d:
        make_certs(Path(d))
        q: mp.Queue = mp.get_context("spawn").Queue()
        attempts = len(levels) * (1 + 3 * args.rounds) * args.pods  # the uids the rounds below use
        proc = mp.get_context("spawn").Process(target=serve, args=(d, q, not args.no_pin, attempts), daemon=True)
        proc.start()
        try:
            port, aiohttp_port = q.get(timeout=120)
            base, aiohttp_base = f"https://127.0.0.1:{port}", f"https://127.0.0.1:{aiohttp_port}"
            ctx = client_context(Path(d))
            first = 0
            for conc in levels:
                asyncio.run(run_load(base, "", bodies, args.pods // 4, first, conc, ctx, None))  # warm-up
                first += args.pods
                for _ in range(args.rounds):
                    for label, url, prefix, prio in (("bare aiohttp", aiohttp_base, "/bare", prio_bodies),
                                                     ("bare", base, "/bare", prio_bodies),
                                                     ("extender", base, "", None)):
                        res = asyncio.run(run_load(url, prefix, bodies, args.pods, first, conc, ctx, prio))
                        rounds.setdefault((label, conc), []).append(res)
                        first += args.pods
        finally:
            proc.terminate()
            proc.join()

    def med(label: str, conc: int, key: str) -> float:
        return statistics.median(r[key] for r in rounds[(label, conc)])

    where = "the OS's choice of CPUs" if args.no_pin else f"server pinned to CPU {SERVER_CPU}, client to CPU {LOAD_CPU}"
    print(f"\nover HTTPS keep-alive, server in one process, {where} (medians of {args.rounds} rounds):")
    print(f"{'':26s}{'pod p50':>10s}{'pod p99':>10s}{'wall pods/s':>13s}{'server CPU/pod':>16s}{'pods/CPU-s':>12s}")
    for (label, conc) in rounds:
        print(f"{label + f', {conc} connection' + ('s' if conc > 1 else ''):26s}"
              f"{med(label, conc, 'p50') * 1e3:8.2f}ms{med(label, conc, 'p99') * 1e3:8.2f}ms"
              f"{med(label, conc, 'wall_rate'):13.0f}{med(label, conc, 'cpu') * 1e3:14.3f}ms"
              f"{1 / med(label, conc, 'cpu'):12.0f}")
    for conc in levels:
        for bare in ("bare aiohttp", "bare"):
            ratios = [e["cpu"] / b["cpu"] for e, b in zip(rounds[("extender", conc)], rounds[(bare, conc)])]
            extra = [e["cpu"] - b["cpu"] for e, b in zip(rounds[("extender", conc)], rounds[(bare, conc)])]
            print(f"extender / {bare} at {conc} connection{'s' if conc > 1 else ''}: server CPU per pod "
                  f"x{statistics.median(ratios):.2f} (+{statistics.median(extra) * 1e3:.3f} ms), pod p50 "
                  f"x{med('extender', conc, 'p50') / med(bare, conc, 'p50'):.2f}")
    cpu = in_process(bodies, args.pods, args.rounds)
    print(f"verbs in process (no HTTP), after the rounds: CPU per pod {ms(statistics.median(cpu))} "
          f"({1 / statistics.median(cpu):.0f} pods per CPU-second), rounds {', '.join(ms(c) for c in cpu)}")
    rate, p99 = 1 / med("extender", levels[0], "cpu"), med("extender", levels[0], "p99")
    print(f"\ntarget (>= 1,000 pods/s on one core, p99 <= 5 ms at {levels[0]} connection): "
          f"{rate:.0f} pods per server CPU-second, p99 {p99 * 1e3:.2f} ms -> "
          f"{'met' if rate >= 1000 and p99 <= 0.005 else 'NOT met'}")


if __name__ == "__main__":
    main()
