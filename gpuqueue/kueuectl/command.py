"""The verbs' command lines, with kueuectl's names, aliases and flags."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Awaitable, Callable

from gpuqueue.kueuectl.workloads import STATUSES

ALIASES = {"workloads": ["workload", "wl"], "clusterqueues": ["clusterqueue", "cq"],
           "localqueues": ["localqueue", "lq"]}
SINGULAR = {"workloads": "workload", "clusterqueues": "clusterqueue", "localqueues": "localqueue"}


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")
    return text.lower() == "true"


def _status(text: str) -> str:
    if text.lower() not in STATUSES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(STATUSES)}, got {text!r}")
    return text.lower()


def _common(p: argparse.ArgumentParser, namespaced: bool, listing: bool) -> None:
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    if namespaced:
        p.add_argument("-n", "--namespace", default=None,
                       help="namespace (default: the kubeconfig context's, else default)")
    if namespaced and listing:
        p.add_argument("-A", "--all-namespaces", action="store_true",
                       help="list across all namespaces; --namespace is ignored")
    if listing:
        p.add_argument("-l", "--selector", default="",
                       help="label selector to filter on, e.g. -l key1=value1,key2!=value2")
        p.add_argument("--field-selector", default="",
                       help="field selector to filter on, e.g. --field-selector metadata.name=x")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    lst = sub.add_parser("list", help="list Workloads, ClusterQueues or LocalQueues (kueuectl list)")
    kinds = lst.add_subparsers(dest="kind", required=True, metavar="{workloads,clusterqueues,localqueues}")

    w = kinds.add_parser("workloads", aliases=ALIASES["workloads"], help="list Workloads")
    _common(w, namespaced=True, listing=True)
    w.add_argument("-c", "--clusterqueue", default="", help="only those of this ClusterQueue")
    w.add_argument("-q", "--localqueue", default="", help="only those of this LocalQueue")
    w.add_argument("--status", action="append", type=_status, metavar="STATUS",
                   help=f"only those in this status (repeatable): {', '.join(STATUSES)}")
    w.add_argument("--for", dest="for_object", default="", metavar="TYPE[.GROUP]/NAME",
                   help="only the Workload of this object, e.g. --for job/my-job")
    w.set_defaults(run=_runner("list_workloads"))

    c = kinds.add_parser("clusterqueues", aliases=ALIASES["clusterqueues"], help="list ClusterQueues")
    _common(c, namespaced=False, listing=True)
    c.add_argument("--active", type=_bool, default=None, metavar="true|false",
                   help="only the active (or inactive) ClusterQueues")
    c.set_defaults(run=_runner("list_cluster_queues"))

    q = kinds.add_parser("localqueues", aliases=ALIASES["localqueues"], help="list LocalQueues")
    _common(q, namespaced=True, listing=True)
    q.add_argument("-c", "--clusterqueue", default="", help="only those pointing to this ClusterQueue")
    q.set_defaults(run=_runner("list_local_queues"))

    for verb, what in (("stop", "hold: admit nothing more, and evict what runs unless --keep-already-running"),
                       ("resume", "undo stop")):
        v = sub.add_parser(verb, help=f"{verb} a ClusterQueue, LocalQueue or Workload (kueuectl {verb}): {what}")
        targets = v.add_subparsers(dest="kind", required=True, metavar="{clusterqueue,localqueue,workload}")
        for plural in ("clusterqueues", "localqueues", "workloads"):
            kind = SINGULAR[plural]
            t = targets.add_parser(kind, aliases=[a for a in [plural] + ALIASES[plural] if a != kind],
                                   help=_change_help(verb, kind))
            t.add_argument("name", help=f"the {kind}'s name")
            _common(t, namespaced=kind != "clusterqueue", listing=False)
            if verb == "stop" and kind != "workload":
                t.add_argument("--keep-already-running", action="store_true",
                               help="stopPolicy Hold: what runs keeps running (default: HoldAndDrain evicts it)")
            _dry_run(t)
            t.set_defaults(run=_runner("stop_or_resume", stop=verb == "stop"), kind=kind)

    cr = sub.add_parser("create", help="create a LocalQueue (kueuectl create)")
    objs = cr.add_subparsers(dest="kind", required=True, metavar="{localqueue}")
    lq = objs.add_parser("localqueue", aliases=["localqueues", "lq"], help="create a LocalQueue pointing to a ClusterQueue")
    lq.add_argument("name", help="the LocalQueue's name")
    lq.add_argument("-c", "--clusterqueue", required=True, help="the ClusterQueue it points to")
    lq.add_argument("-i", "--ignore-unknown-cq", action="store_true",
                    help="create it even if the ClusterQueue does not exist (yet)")
    _common(lq, namespaced=True, listing=False)
    _dry_run(lq)
    lq.set_defaults(run=_runner("create_local_queue"), kind="localqueue")


def _change_help(verb: str, kind: str) -> str:
    if kind == "workload":
        return f"set spec.active to {'false' if verb == 'stop' else 'true'}"
    return "set spec.stopPolicy to HoldAndDrain (or Hold)" if verb == "stop" else "set spec.stopPolicy to None"


def _dry_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", choices=("none", "client", "server"), default="none",
                   help="client: only print what would be sent; server: have the API server check it, store nothing")


def _runner(verb: str, **extra) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return asyncio.run(_run(verb, args, extra))

    return run


async def _run(verb: str, args: argparse.Namespace, extra: dict) -> int:
    from gpuqueue.kube.config import api_client, current_namespace
    from gpuqueue.kueuectl import changes, listing
    from gpuqueue.kueuectl.client import Kueue

    if getattr(args, "namespace", "unset") is None:
        args.namespace = current_namespace(args.kubeconfig)
    action: Callable[..., Awaitable[str | None]] = getattr(listing, verb, None) or getattr(changes, verb)
    api = await api_client(args.kubeconfig)
    try:
        said = await action(Kueue(api), args, **extra)
    finally:
        await api.close()
    if said:
        print(said)
    sys.stdout.flush()
    return 0
