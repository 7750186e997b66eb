"""Benchmark: the scheduler extender's /filter + /prioritize per pod, over HTTPS keep-alive.

A cache of 5,000 nodes of three flavors (GH200 4 GPUs, H100 8, A100 8; some bound pods, a few
cordoned or tainted), pods of admitted Jobs whose filter request names 500 candidate nodes
(kube-scheduler's sample at that size: 10%), mostly of the pod's flavor. Per pod: POST /filter,
then POST /prioritize with the nodes that passed, as kube-scheduler does.

The server runs in its own process (one core); the baseline is a bare aiohttp handler in that
same server answering the same bodies with a constant, so the ratio is what our logic costs on
top of HTTP. Also reports the verbs called in-process (no HTTP), and server CPU per pod. Every
attempt carries its own pod uid and resourceVersion, so what the extender memoizes per pod helps
only within one attempt (its /filter then /prioritize), as with kube-scheduler.

    python bench/extender_bench.py [--pods 3000] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as dt
import ipaddress
import json
import multiprocessing as mp
import os
import random
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp  # noqa: E402
import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

from extender.placement import FlavorSelector, NodeCache, NodeInfo, Taint  # noqa: E402
from extender.scheduler import InMemoryClusterView, build_app, tls_context  # noqa: E402
from extender.scheduler.verbs import filter_verb, prioritize_verb  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/fixtures/k8s-1.24/extender/filter.request.nodeCacheCapable-true.3-nodes.json"
FLAVORS = {
    "gh200": ({"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}, 4),
    "h100": ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 8),
    "a100": ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, 8),
}
NODES = 5000
CANDIDATES = 500
DISTINCT_PODS = 200


def node_names_by_flavor() -> dict[str, list[str]]:
    names = {f: [] for f in FLAVORS}
    for i in range(NODES):
        f = list(FLAVORS)[i % 3]
        names[f].append(f"{f}-node-{i:05d}")
    return names


def build_view(seed: int = 1) -> InMemoryClusterView:
    rnd = random.Random(seed)
    cache = NodeCache(topology_label="topology.kubernetes.io/zone")
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
        view.admit(f"team-{flavor}/train", FlavorSelector.of(flavor, labels))
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
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j",
                                    "controller": True, "blockOwnerDeletion": True}]
        res = body["Pod"]["spec"]["containers"][0]["resources"]
        res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = "1"
        names = rnd.sample(by_flavor[flavor], 450) + rnd.sample(others[flavor], 50)
        rnd.shuffle(names)
        body["NodeNames"] = names
        out.append((orjson.dumps(body) + b"\n", names))
    return out


def attempt(body: bytes, k: int, i: int) -> bytes:
    """Pod ``k``'s body as the ``i``-th scheduling attempt: a uid and resourceVersion of its own,
    so nothing the extender remembers per pod carries over from one attempt to the next."""
    return body.replace(b'"uid":"uid-%05d"' % k, b'"uid":"uid-%05d-%d"' % (k, i)).replace(
        b'"resourceVersion":"', b'"resourceVersion":"%d' % i, 1)


def prioritize_body(filter_body: bytes, names: list[str]) -> bytes:
    d = orjson.loads(filter_body)
    d["NodeNames"] = names
    return orjson.dumps(d) + b"\n"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


# -- the server process ------------------------------------------------------------------------

def make_certs(d: Path) -> Path:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    (d / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return d / "tls.crt"


def serve(cert_dir: str, port_q: mp.Queue) -> None:
    view = build_view()
    app = build_app(view)
    bare_answer = b'{"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'

    async def bare(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=bare_answer, content_type="application/json")

    async def cpu(request: web.Request) -> web.Response:
        t = os.times()
        return web.json_response({"cpu": t.user + t.system})

    app.router.add_post("/bare/{verb}", bare)
    app.router.add_get("/cpu", cpu)

    async def main():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls_context(cert_dir))
        await site.start()
        port_q.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(main())


# -- the client --------------------------------------------------------------------------------

async def run_load(base: str, prefix: str, bodies, pods: int, concurrency: int, ctx: ssl.SSLContext,
                   prio_bodies: dict[int, bytes] | None):
    """Returns (per-call latencies, per-pod latencies, wall seconds, server cpu seconds)."""
    calls: list[float] = []
    per_pod: list[float] = []
    headers = {"Content-Type": "application/json"}
    conn = aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def cpu() -> float:
            async with s.get(f"{base}/cpu") as r:
                return (await r.json())["cpu"]

        counter = iter(range(pods))

        async def worker():
            for i in counter:
                k = i % len(bodies)
                fbody = attempt(bodies[k][0], k, i)
                t0 = time.perf_counter()
                async with s.post(f"{base}{prefix}/filter", data=fbody, headers=headers) as r:
                    res = orjson.loads(await r.read())
                t1 = time.perf_counter()
                if prio_bodies is None:
                    pbody = prioritize_body(fbody, res["NodeNames"])
                else:
                    pbody = attempt(prio_bodies[k], k, i)
                t2 = time.perf_counter()
                async with s.post(f"{base}{prefix}/prioritize", data=pbody, headers=headers) as r:
                    await r.read()
                t3 = time.perf_counter()
                calls.extend((t1 - t0, t3 - t2))
                per_pod.append((t1 - t0) + (t3 - t2))

        for _ in range(concurrency):  # warm up connections
            async with s.get(f"{base}/cpu") as r:
                await r.read()
        c0 = await cpu()
        w0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - w0
        c1 = await cpu()
    return calls, per_pod, wall, c1 - c0


def in_process(bodies, pods: int) -> list[float]:
    view = build_view()
    out = []
    for i in range(pods):
        k = i % len(bodies)
        fbody = attempt(bodies[k][0], k, i)
        t0 = time.perf_counter()
        res = filter_verb(fbody, view)
        prioritize_verb(prioritize_body(fbody, res["NodeNames"]), view)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()

    bodies = request_bodies()
    # prioritize bodies as the extender's filter would trim them (computed once, same for the baseline)
    view = build_view()
    prio_bodies = {k: prioritize_body(b, filter_verb(b, view)["NodeNames"]) for k, (b, _) in enumerate(bodies)}
    passed = statistics.mean(len(orjson.loads(b)["NodeNames"]) for b in prio_bodies.values())
    print(f"cache: {NODES} nodes, 3 flavors; {CANDIDATES} candidates per filter, "
          f"{passed:.0f} passed on average (sent to prioritize); pod body {len(bodies[0][0])} bytes")

    lat = in_process(bodies, min(args.pods, 2000))
    print(f"in-process filter+prioritize per pod: p50 {pct(lat, 50) * 1e3:.3f} ms, p99 {pct(lat, 99) * 1e3:.3f} ms "
          f"({1 / statistics.mean(lat):.0f} pods/s)")

    with tempfile.TemporaryDirectory() as d:
        ca = make_certs(Path(d))
        q: mp.Queue = mp.get_context("spawn").Queue()
        proc = mp.get_context("spawn").Process(target=serve, args=(d, q), daemon=True)
        proc.start()
        try:
            port = q.get(timeout=120)
            base = f"https://127.0.0.1:{port}"
            ctx = ssl.create_default_context(cafile=str(ca))
            results = {}
            for label, prefix, conc in (("bare", "/bare", 1), ("extender", "", 1),
                                        ("bare", "/bare", args.concurrency), ("extender", "", args.concurrency)):
                results[(label, conc)] = asyncio.run(run_load(base, prefix, bodies, args.pods, conc, ctx, prio_bodies))
        finally:
            proc.terminate()
            proc.join()

    print(f"\nover HTTPS keep-alive, {args.pods} pods (filter + prioritize each), server in one process:")
    print(f"{'':28s}{'call p50':>10s}{'call p99':>10s}{'pod p50':>10s}{'pod p99':>10s}{'pods/s':>9s}"
          f"{'server CPU/pod':>16s}{'pods/CPU-s':>12s}")
    for (label, conc), (calls, per_pod, wall, cpu) in results.items():
        print(f"{label + f' (concurrency {conc})':28s}{pct(calls, 50) * 1e3:9.3f}m{pct(calls, 99) * 1e3:9.3f}m"
              f"{pct(per_pod, 50) * 1e3:9.3f}m{pct(per_pod, 99) * 1e3:9.3f}m{args.pods / wall:9.0f}"
              f"{cpu / args.pods * 1e3:14.3f}ms{args.pods / cpu:12.0f}")
    for conc in (1, args.concurrency):
        e, b = results[("extender", conc)], results[("bare", conc)]
        print(f"ratio extender/bare at concurrency {conc}: pod p50 x{pct(e[1], 50) / pct(b[1], 50):.2f}, "
              f"server CPU per pod x{e[3] / b[3]:.2f}")


if __name__ == "__main__":
    main()
