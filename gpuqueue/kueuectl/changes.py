"""`stop|resume clusterqueue|localqueue|workload NAME` and `create localqueue NAME -c CQ`: the
writes kueuectl makes, as JSON merge patches of the field it sets."""

from __future__ import annotations

import argparse

from gpuqueue.kueuectl.client import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, Kueue, Resource

KINDS = {"clusterqueue": CLUSTER_QUEUES, "localqueue": LOCAL_QUEUES, "workload": WORKLOADS}


def _change(args: argparse.Namespace, stop: bool) -> tuple[Resource, dict, str]:
    res = KINDS[args.kind]
    if res is WORKLOADS:  # out of admission (evicted if admitted) until resumed
        return res, {"spec": {"active": not stop}}, "stopped" if stop else "resumed"
    policy = ("Hold" if args.keep_already_running else "HoldAndDrain") if stop else "None"
    return res, {"spec": {"stopPolicy": policy}}, "stopped" if stop else "resumed"


async def stop_or_resume(kueue: Kueue, args: argparse.Namespace, stop: bool) -> str:
    res, patch, done = _change(args, stop)
    namespace = args.namespace if res.namespaced else None
    dry_run = args.dry_run == "server"
    if args.dry_run != "client":
        await kueue.patch(res, namespace, args.name, patch, dry_run=dry_run)
    return f"{res.qualified}/{args.name} {done}{_dry_run_note(args.dry_run)}"


async def create_local_queue(kueue: Kueue, args: argparse.Namespace) -> str:
    if not args.ignore_unknown_cq:
        await kueue.get(CLUSTER_QUEUES, None, args.clusterqueue)  # 404 names the ClusterQueue
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": args.name, "namespace": args.namespace},
            "spec": {"clusterQueue": args.clusterqueue}}
    if args.dry_run != "client":
        await kueue.create(LOCAL_QUEUES, args.namespace, body, dry_run=args.dry_run == "server")
    return f"{LOCAL_QUEUES.qualified}/{args.name} created{_dry_run_note(args.dry_run)}"


def _dry_run_note(mode: str) -> str:
    return {"none": "", "client": " (dry run)", "server": " (server dry run)"}[mode]
