"""`gpuqueue explain NAMESPACE/JOB`: why a Job is pending, from what the API holds: its
ClusterQueue, its place among that queue's pending Workloads, Kueue's message, and which
admitted Workloads would have to finish for it to fit."""

from __future__ import annotations

import re

from kubernetes_asyncio import client

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller.kubeapi import KubeApi, is_status
from gpuqueue.api.quantity import format_engine_int, parse_engine_int

_NEEDED = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\S+) more needed")


def _queue_time(wl: dict) -> str:
    c = W.condition(wl, "Requeued")
    if c and c.get("status") == "True":
        return c.get("lastTransitionTime", "")
    return wl["metadata"].get("creationTimestamp", "")


def explain(job: dict, wl: dict | None, workloads: list[dict], local_queues: dict[str, dict],
            cluster_queues: dict[str, dict]) -> tuple[str, int]:
    """The report and an exit code: 0 admitted or finished, 1 pending, 2 no Workload (not managed, or
    not seen yet); `gpuqueue explain` adds 2 for no such Job and 3 when the cluster cannot be asked."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    if wl is None:
        return f"{ns}/{name}: no Workload: the Job is not managed by gpuqueue (no queue name), or not seen yet", 2
    lq_name = wl["spec"].get("queueName", "")
    lq = local_queues.get(f"{ns}/{lq_name}")
    cq = (lq or {}).get("spec", {}).get("clusterQueue")
    lines = [f"Job {ns}/{name}", f"  Workload:     {wl['metadata']['name']}",
             f"  LocalQueue:   {lq_name}" + ("" if lq else " (does not exist)"),
             f"  ClusterQueue: {cq or '-'}"]
    if W.is_true(wl, "Finished"):
        lines.append("  State:        finished")
        return "\n".join(lines), 0
    if W.is_true(wl, "QuotaReserved"):
        lines.append(f"  State:        admitted ({W.condition(wl, 'QuotaReserved').get('message')})")
        return "\n".join(lines), 0
    message = (W.condition(wl, "QuotaReserved") or {}).get("message") or "not evaluated yet"
    in_cq = []
    for other in workloads:
        olq = local_queues.get(f"{other['metadata']['namespace']}/{other['spec'].get('queueName', '')}")
        if (olq or {}).get("spec", {}).get("clusterQueue") == cq and not W.is_true(other, "QuotaReserved") \
                and not W.is_true(other, "Finished"):
            in_cq.append(other)
    in_cq.sort(key=lambda o: (-(o["spec"].get("priority") or 0), _queue_time(o), o["metadata"]["name"]))
    position = next((i for i, o in enumerate(in_cq) if o["metadata"]["uid"] == wl["metadata"]["uid"]), None)
    if position is not None:
        lines.append(f"  Position:     {position + 1} of {len(in_cq)} pending in {cq}")
    lines.append(f"  Message:      {message}")
    needs = _NEEDED.findall(message)
    if needs and cq in cluster_queues:
        cohort = cluster_queues[cq]["spec"].get("cohortName")
        members = {n for n, o in cluster_queues.items() if n == cq or (cohort and o["spec"].get("cohortName") == cohort)}
        for res, flavor, amount in needs:
            need = parse_engine_int(res, amount)
            holders = []
            for other in workloads:
                adm = (other.get("status") or {}).get("admission")
                if not adm or not W.is_true(other, "QuotaReserved") or W.is_true(other, "Finished") \
                        or adm["clusterQueue"] not in members:
                    continue
                used = W.admission_from_status(adm).usage.get((flavor, res), 0)
                if used:
                    holders.append((used, other))
            holders.sort(key=lambda t: (-t[0], t[1]["metadata"]["name"]))
            freed, chosen = 0, []
            for used, other in holders:
                if freed >= need:
                    break
                freed += used
                chosen.append(f"{other['metadata']['namespace']}/{other['metadata']['name']} "
                              f"({format_engine_int(res, used)} {res}, {other['status']['admission']['clusterQueue']})")
            if freed >= need:
                lines.append(f"  To fit:       {amount} more {res} in flavor {flavor}; it would fit once these finish "
                             f"or are freed: " + "; ".join(chosen))
            else:
                lines.append(f"  To fit:       {amount} more {res} in flavor {flavor}; more than all admitted "
                             f"workloads in reach hold: the quota itself is too small")
    return "\n".join(lines), 1


async def explain_job(api: client.ApiClient, ref: str) -> tuple[str, int]:
    kube = KubeApi(api)
    ns, name = ref.split("/", 1)
    try:
        job = await kube.get(K.JOBS, ns, name)
    except Exception as exc:
        if is_status(exc, 404):
            return f"Job {ref} not found", 2
        raise
    try:
        wl = await kube.get(K.WORKLOADS, ns, W.workload_name(name, job["metadata"]["uid"]))
    except Exception as exc:
        if not is_status(exc, 404):
            raise
        wl = None
    workloads = (await kube.request("GET", K.WORKLOADS.path()))["items"]
    lqs = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o
           for o in (await kube.request("GET", K.LOCAL_QUEUES.path()))["items"]}
    cqs = {o["metadata"]["name"]: o for o in (await kube.request("GET", K.CLUSTER_QUEUES.path()))["items"]}
    return explain(job, wl, workloads, lqs, cqs)
