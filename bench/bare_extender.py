"""A scheduler extender that does no work: /filter passes the first candidate it is sent, on the
extender's own HTTP layer and TLS (gpuqueue.http11, the serving certificate of a `gpuqueue certs`
folder). With ``--pack N`` it passes instead the candidate it has sent the most pods to that has
had fewer than N (one GPU each): gpuqueue's bin-packing, without its checks. ``bench/scheduler_throughput.py --bare`` runs kube-scheduler against it, so what the
extender call itself costs kube-scheduler (encoding the pod and the names, the round trip, one
passed node) is measured apart from what gpuqueue's extender does to answer it.

    python bench/bare_extender.py --cert-dir DIR --port PORT [--pack 8]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import bench_env  # noqa: F401  (the repository on sys.path, or one line saying why not)

import orjson  # noqa: E402

from gpuqueue.http11 import JSON, Answer, Route, Server  # noqa: E402
from gpuqueue.tls import ReloadingTLS  # noqa: E402


def first_candidate(body: bytes, conn) -> Answer:
    names = orjson.loads(body).get("NodeNames") or []
    return Answer(200, JSON, orjson.dumps({"NodeNames": names[:1], "FailedNodes": {},
                                           "FailedAndUnresolvableNodes": {}, "Error": ""}))


def packing(per_node: int):
    # Counted per namespace: every phase of the bench runs its Job in a namespace of its own and
    # deletes it before the next, and this extender hears of no deletion.
    sent: dict[tuple[str, str], int] = {}

    def fullest_candidate(body: bytes, conn) -> Answer:
        args = orjson.loads(body)
        names = args.get("NodeNames") or []
        ns = ((args.get("Pod") or {}).get("metadata") or {}).get("namespace") or ""
        best = max((n for n in names if sent.get((ns, n), 0) < per_node), key=lambda n: sent.get((ns, n), 0),
                   default=None)
        if best is not None:
            sent[ns, best] = sent.get((ns, best), 0) + 1
        return Answer(200, JSON, orjson.dumps({"NodeNames": [best] if best else [], "FailedNodes": {},
                                               "FailedAndUnresolvableNodes": {}, "Error": ""}))
    return fullest_candidate


async def serve(cert_dir: str, port: int, pack: int = 0) -> None:
    handle = packing(pack) if pack else first_candidate
    server = Server({b"/filter": Route(b"POST", handle)}, 16 * 1024 * 1024, name="bare extender")
    await server.listen("127.0.0.1", port, ReloadingTLS(Path(cert_dir)).context)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cert-dir", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pack", type=int, default=0, help="pack pods of one GPU onto nodes of this many")
    args = ap.parse_args()
    asyncio.run(serve(args.cert_dir, args.port, args.pack))


if __name__ == "__main__":
    main()
