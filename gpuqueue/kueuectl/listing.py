"""`list workloads|clusterqueues|localqueues`: kueuectl's tables."""

from __future__ import annotations

import argparse
import sys

from gpuqueue.kueuectl import UsageError
from gpuqueue.kueuectl import workloads as W
from gpuqueue.kueuectl.client import (CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, Kueue, pending_workloads,
                                      visibility_unavailable)
from gpuqueue.kueuectl.table import render_table, since, utc_now


def _key(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _print(args: argparse.Namespace, headers: list[str], rows: list[list[str]], namespaced: bool) -> None:
    """The table on stdout, or kubectl's "No resources found" on stderr."""
    if not rows:
        where = "" if args.all_namespaces or not namespaced else f" in {args.namespace} namespace."
        print(f"No resources found{where}", file=sys.stderr)
        return
    if namespaced and args.all_namespaces:
        headers = ["NAMESPACE"] + headers
    sys.stdout.write(render_table(headers, rows))


async def list_workloads(kueue: Kueue, args: argparse.Namespace) -> None:
    ns = None if args.all_namespaces else args.namespace
    shown = await kueue.list(WORKLOADS, ns, args.selector, args.field_selector)
    everyone = shown if not (args.selector or args.field_selector) else await kueue.list(WORKLOADS, ns)
    local_queues = {_key(lq): lq for lq in await kueue.list(LOCAL_QUEUES, ns)}
    statuses = set(args.status or ())
    owner = _owner(args.for_object) if args.for_object else None
    place = await _positions(kueue, everyone, shown)
    now = utc_now()
    rows = []
    for wl in shown:
        if args.localqueue and (wl.get("spec") or {}).get("queueName") != args.localqueue:
            continue
        if args.clusterqueue and W.cluster_queue(wl, local_queues) != args.clusterqueue:
            continue
        if statuses and "all" not in statuses and W.status(wl) not in statuses:
            continue
        if owner and not W.owned_by(wl, *owner):
            continue
        cells = W.row(wl, local_queues, place, now)
        rows.append(([wl["metadata"]["namespace"]] if args.all_namespaces else []) + cells)
    _print(args, W.HEADERS, rows, namespaced=True)


async def _positions(kueue: Kueue, everyone: list[dict], shown: list[dict]) -> dict[str, int]:
    """namespace/name -> POSITION IN QUEUE: positionInLocalQueue from the visibility API (the
    engine's own order), for each LocalQueue with a pending Workload shown, as kueuectl asks it;
    where the API does not answer, computed from the Workloads (W.positions), said on stderr once."""
    place = W.positions(everyone)
    queues = sorted({(wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", ""))
                     for wl in shown if W.status(wl) == W.PENDING})
    warned = False
    for namespace, queue in queues:
        try:
            items = await pending_workloads(kueue.api, namespace, queue)
        except Exception as exc:  # noqa: BLE001 - this queue's positions then come from the Workloads
            if not warned:
                print(f"gpuqueue list: POSITION IN QUEUE from the Workloads' own order ({visibility_unavailable(exc)})",
                      file=sys.stderr)
                warned = True
            continue
        for wl in everyone:  # the API's word replaces the computed one for the whole LocalQueue
            if wl["metadata"]["namespace"] == namespace and (wl.get("spec") or {}).get("queueName", "") == queue:
                place.pop(_key(wl), None)
        for item in items:
            place[f"{namespace}/{item['metadata']['name']}"] = int(item["positionInLocalQueue"])
    return place


def _owner(spec: str) -> tuple[str, str | None, str]:
    """--for job/NAME or job.batch/NAME -> (kind, group or None, name)."""
    kind_group, sep, name = spec.partition("/")
    if not sep or not name or "/" in name or not kind_group:
        raise UsageError(f"--for: must be TYPE[.GROUP]/NAME (e.g. job/my-job), got {spec!r}")
    kind, _, group = kind_group.lower().partition(".")
    return kind, group or None, name


def _active(cq: dict) -> bool:
    return W.is_true(cq, "Active")


async def list_cluster_queues(kueue: Kueue, args: argparse.Namespace) -> None:
    now = utc_now()
    rows = []
    for cq in await kueue.list(CLUSTER_QUEUES, None, args.selector, args.field_selector):
        if args.active is not None and _active(cq) != args.active:
            continue
        status = cq.get("status") or {}
        rows.append([cq["metadata"]["name"], (cq.get("spec") or {}).get("cohortName", ""),
                     str(status.get("pendingWorkloads", 0)), str(status.get("admittedWorkloads", 0)),
                     str(_active(cq)).lower(), since(cq["metadata"].get("creationTimestamp"), now)])
    _print(args, ["NAME", "COHORT", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "ACTIVE", "AGE"], rows,
           namespaced=False)


async def list_local_queues(kueue: Kueue, args: argparse.Namespace) -> None:
    ns = None if args.all_namespaces else args.namespace
    now = utc_now()
    rows = []
    for lq in await kueue.list(LOCAL_QUEUES, ns, args.selector, args.field_selector):
        spec, status = lq.get("spec") or {}, lq.get("status") or {}
        if args.clusterqueue and spec.get("clusterQueue") != args.clusterqueue:
            continue
        rows.append(([lq["metadata"]["namespace"]] if args.all_namespaces else [])
                    + [lq["metadata"]["name"], spec.get("clusterQueue", ""), str(status.get("pendingWorkloads", 0)),
                       str(status.get("admittedWorkloads", 0)), since(lq["metadata"].get("creationTimestamp"), now)])
    _print(args, ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "AGE"], rows, namespaced=True)
