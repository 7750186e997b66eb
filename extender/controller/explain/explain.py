"""`gpuqueue explain NAMESPACE/JOB`: why a Job is pending, from what the API holds: its
ClusterQueue, its place in the queue (as the visibility API, visibility.py, gives it: the same
numbers as `kubectl get --raw .../pendingworkloads`), Kueue's message, which admitted Workloads
would have to finish for it to fit, what it asks of the topology and the domains it was given
(explain_tas.py), and why the extender holds back each of its pods still waiting for a node (the
reason kube-scheduler shows on the pod)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from kubernetes_asyncio import client

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.explain.explain_tas import topology_lines
from gpuqueue.extender.controller.podsready.pods_ready import explain_lines as pods_ready_lines
from gpuqueue.extender.controller.core.owned_workloads import owner_uids
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status
from gpuqueue.extender.controller.clusterview.view import CacheView
from gpuqueue.extender.scheduler.enforce import judge_pod
from gpuqueue.extender.scheduler.view import Admitted, NotAdmitted
from gpuqueue.api.quantity import format_engine_int, parse_engine_int
from gpuqueue.kueuectl.client import pending_workloads, visibility_unavailable
from gpuqueue.jobframework.enforcement import EnforcementConfig, covered_resources
from gpuqueue.jobframework.managed import ManagedJobsConfig, StaticQueueView
from gpuqueue.jobframework.mutation import BATCH_JOB
from gpuqueue.jobframework.registry import IntegrationsConfig
from gpuqueue.jobframework.unqueued import enforced_requests, why_unqueued

_NEEDED = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\S+) more needed")


def pending_pods(job: dict, workloads: list[dict], cluster_queues: dict[str, dict], pods: list[dict],
                 enforcement: EnforcementConfig | None = None) -> list[str]:
    """A line per pod of the Job waiting for a node: what the extender's judge says of it, on a
    cache filled from these lists (its pods bound and not terminated count; the extender's
    in-flight reservations are not in the API)."""
    view = CacheView(enforcement, lambda: cluster_queues.values())
    view.upsert_job(job)
    for wl in workloads:
        view.upsert_workload(wl)
    for pod in pods:
        view.upsert_pod(pod)
    uid, lines = job["metadata"]["uid"], []
    for pod in pods:
        meta = pod["metadata"]
        cached = view.pod(meta.get("uid", ""))
        if cached is None or cached.controller_uid != uid or meta.get("deletionTimestamp") \
                or (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") != "Pending":
            continue
        verdict, violation = judge_pod(view, cached)
        if isinstance(verdict, NotAdmitted):
            why = verdict.message
        elif violation is not None:
            why = f"{violation.message} (enforcement {view.enforcement.mode}: let through)"
        elif isinstance(verdict, Admitted):
            why = f"admitted to flavor {verdict.flavor.name}; waits for kube-scheduler to find a node (kubectl describe pod)"
        else:
            why = "gpuqueue does not hold it back"
        lines.append(f"    {cached.key}: {why}")
    return ["  Pending pods:"] + sorted(lines) if lines else []


@dataclass(frozen=True)
class NotQueuedContext:
    """What `explain` needs to say why a Job without a Workload will never get one."""
    namespace_labels: dict[str, str] | None  # None: unknown (not readable)
    config: ManagedJobsConfig = ManagedJobsConfig()
    frameworks: tuple[str, ...] = IntegrationsConfig().frameworks


def unqueued_line(job: dict, local_queues: dict[str, dict], cluster_queues: dict[str, dict],
                  enforcement: EnforcementConfig, context: NotQueuedContext) -> str | None:
    """The webhook's warning (gpuqueue.jobframework.unqueued) for a Job that has no Workload."""
    ns = job["metadata"]["namespace"]
    queues = StaticQueueView(local_queues={tuple(k.split("/", 1)) for k in local_queues},
                             namespaces={ns: context.namespace_labels} if context.namespace_labels is not None else {})
    found = why_unqueued(job, BATCH_JOB.kind, BATCH_JOB.framework, ns,
                         lambda: enforced_requests(BATCH_JOB, job, ns, enforcement,
                                                   covered_resources(cluster_queues.values())),
                         queues, context.config, context.frameworks)
    return None if found is None else found.message


def explain(job: dict, wl: dict | None, workloads: list[dict], local_queues: dict[str, dict],
            cluster_queues: dict[str, dict], position: dict | str | None = None, pods: list[dict] | None = None,
            enforcement: EnforcementConfig | None = None, unqueued: NotQueuedContext | None = None) -> tuple[str, int]:
    """The report and an exit code: 0 admitted or finished, 1 pending, 2 no Workload (not managed, or
    not seen yet); `gpuqueue explain` adds 2 for no such Job and 3 when the cluster cannot be asked.
    `position`: the Workload's PendingWorkload item from the visibility API, or why there is none."""
    text, code = _explain(job, wl, workloads, local_queues, cluster_queues, position)
    if wl is None:
        why = unqueued_line(job, local_queues, cluster_queues, enforcement or EnforcementConfig(),
                            unqueued or NotQueuedContext(None))
        if why is not None:
            text = f"{job['metadata']['namespace']}/{job['metadata']['name']}: no Workload: {why}"
    lines = topology_lines(wl) + pods_ready_lines(wl, W.parse_time, _rfc3339) if wl is not None else []
    lines += pending_pods(job, workloads, cluster_queues, pods or [], enforcement)
    return "\n".join([text, *lines]), code


def _explain(job: dict, wl: dict | None, workloads: list[dict], local_queues: dict[str, dict],
             cluster_queues: dict[str, dict], position: dict | str | None) -> tuple[str, int]:
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
    if isinstance(position, dict):
        lines.append(f"  Position:     {position['positionInClusterQueue'] + 1} in ClusterQueue {cq}, "
                     f"{position['positionInLocalQueue'] + 1} in LocalQueue {lq_name}")
    elif position:
        lines.append(f"  Position:     unknown ({position})")
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


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


async def explain_job(api: client.ApiClient, ref: str, enforcement: EnforcementConfig | None = None,
                      config: ManagedJobsConfig | None = None, frameworks: tuple[str, ...] | None = None
                      ) -> tuple[str, int]:
    """``enforcement``, ``config``, ``frameworks``: what the extender runs with (its
    Configuration's; default Strict, Kueue's defaults)."""
    kube = KubeApi(api)
    ns, name = ref.split("/", 1)
    try:
        labels = ((await kube.get(K.NAMESPACES, None, ns))["metadata"].get("labels") or {})
    except Exception as exc:  # noqa: BLE001 - unreadable: the name label is all that is known
        if not is_status(exc, 404, 403):
            raise
        labels = None
    context = NotQueuedContext(labels, config or ManagedJobsConfig(), frameworks or IntegrationsConfig().frameworks)
    try:
        job = await kube.get(K.JOBS, ns, name)
    except Exception as exc:
        if is_status(exc, 404):
            return f"Job {ref} not found", 2
        raise
    workloads = (await kube.request("GET", K.WORKLOADS.path()))["items"]
    # by its owner's UID, not its name: a Workload created under gpuqueue's earlier names keeps it
    uid = job["metadata"]["uid"]
    owned = [w for w in workloads if w["metadata"].get("namespace") == ns and uid in owner_uids(w)]
    wl = next((w for w in owned if w["metadata"]["name"] == W.workload_name(name, uid)), owned[0] if owned else None)
    pending = wl is not None and not W.is_true(wl, "QuotaReserved") and not W.is_true(wl, "Finished")
    position = await _position(kube, wl) if pending else None
    lqs = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o
           for o in (await kube.request("GET", K.LOCAL_QUEUES.path()))["items"]}
    cqs = {o["metadata"]["name"]: o for o in (await kube.request("GET", K.CLUSTER_QUEUES.path()))["items"]}
    pods = (await kube.request("GET", K.PODS.path(ns)))["items"]
    return explain(job, wl, workloads, lqs, cqs, position, pods, enforcement, context)


async def _position(kube: KubeApi, wl: dict) -> dict | str | None:
    """Its item in its LocalQueue's pending workloads (None: not pending there), or why the
    visibility API could not say."""
    try:
        items = await pending_workloads(kube.api, wl["metadata"]["namespace"], wl["spec"].get("queueName", ""))
    except Exception as exc:  # noqa: BLE001
        return visibility_unavailable(exc)
    return next((item for item in items if item["metadata"]["name"] == wl["metadata"]["name"]), None)
