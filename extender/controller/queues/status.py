"""ClusterQueue and LocalQueue status as Kueue writes it, computed from the engine (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import Admission
from gpuqueue.extender.controller.core.workload import format_engine_int


@dataclass
class Counts:
    pending: int = 0
    inadmissible: int = 0  # of the pending: Kueue's "inadmissible" (QuotaEngine.inadmissible_keys)
    reserving: int = 0
    usage: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass
class QueueCounts:
    cq: dict[str, Counts]
    lq: dict[str, Counts]  # namespace/name


def queue_counts(engine: QuotaEngine, evicting: Mapping[str, Admission] | None = None) -> QueueCounts:
    """Per ClusterQueue and LocalQueue: pending and reserving workloads and the quota they use.
    `evicting`: victims whose pods are not gone yet; the engine has requeued them, but their
    reservation still stands in the API, so they count as reserving (as in Kueue)."""
    evicting = evicting or {}
    inadmissible = engine.inadmissible_keys()
    cqs: dict[str, Counts] = {}
    lqs: dict[str, Counts] = {}
    for p in engine.pending.values():
        if p.spec.key in evicting:
            a = evicting[p.spec.key]
            for target in (cqs.setdefault(a.cluster_queue, Counts()),
                           lqs.setdefault(f"{p.spec.namespace}/{p.spec.queue_name}", Counts())):
                target.reserving += 1
                for fr, v in a.usage.items():
                    target.usage[fr] = target.usage.get(fr, 0) + v
            continue
        lq_key = f"{p.spec.namespace}/{p.spec.queue_name}"
        held = p.spec.key in inadmissible
        lq_counts = lqs.setdefault(lq_key, Counts())
        lq_counts.pending += 1
        lq_counts.inadmissible += held
        lq = engine.state.local_queues.get(lq_key)
        cq = p.cluster_queue or (lq.cluster_queue if lq else None)
        if cq:
            cq_counts = cqs.setdefault(cq, Counts())
            cq_counts.pending += 1
            cq_counts.inadmissible += held
    for w in engine.state.admitted.values():
        for target in (cqs.setdefault(w.admission.cluster_queue, Counts()),
                       lqs.setdefault(f"{w.spec.namespace}/{w.spec.queue_name}", Counts())):
            target.reserving += 1
            for fr, v in w.admission.usage.items():
                target.usage[fr] = target.usage.get(fr, 0) + v
    return QueueCounts(cqs, lqs)


def _flavor_list(flavor_resources: list[tuple[str, list[str]]], usage: dict[tuple[str, str], int],
                 nominal: dict[tuple[str, str], int] | None) -> list[dict]:
    out = []
    for flavor, resources in flavor_resources:
        items = []
        for res in resources:
            used = usage.get((flavor, res), 0)
            item = {"name": res, "total": format_engine_int(res, used)}
            if nominal is not None:
                item["borrowed"] = format_engine_int(res, max(0, used - nominal.get((flavor, res), 0)))
            items.append(item)
        out.append({"name": flavor, "resources": items})
    return out


def _cq_flavor_resources(engine: QuotaEngine, cq: str) -> list[tuple[str, list[str]]]:
    spec = engine.state.cq_specs.get(cq)
    if spec is None:
        return []
    out: list[tuple[str, list[str]]] = []
    for rg in spec.resource_groups:
        for flavor in rg.flavors:
            out.append((flavor, [r for r in rg.covered_resources if (flavor, r) in spec.quotas]))
    return out


def _active(old: dict, status: str, reason: str, message: str, generation: int | None) -> list[dict]:
    conds = [c for c in old.get("conditions") or () if c.get("type") == "Active"]
    return W.set_condition(conds, "Active", status, reason, message, W.now_rfc3339(), generation)


def cluster_queue_active(engine: QuotaEngine, cq: str) -> tuple[str, str, str]:
    reason = engine.inactive_reason(cq)
    if reason is None:
        return "True", "Ready", "Can admit new workloads"
    if reason == "FlavorNotFound":
        spec = engine.state.cq_specs[cq]
        missing = sorted({f for rg in spec.resource_groups for f in rg.flavors if f not in engine.state.flavors})
        return "False", reason, f"Can't admit new workloads: references missing ResourceFlavor(s): [{' '.join(missing)}]."
    if reason == "Stopped":
        return "False", reason, "Can't admit new workloads: is stopped."
    return "False", reason, "Can't admit new workloads: is in a cohort cycle."


def cluster_queue_status(engine: QuotaEngine, cq: str, counts: Counts | None, old: dict,
                         generation: int | None = None) -> dict:
    counts = counts or Counts()
    spec = engine.state.cq_specs.get(cq)
    flavor_resources = _cq_flavor_resources(engine, cq)
    nominal = {fr: q.nominal for fr, q in spec.quotas.items()} if spec else {}
    usage = _flavor_list(flavor_resources, counts.usage, nominal)
    if spec is None:
        active = ("False", "Unknown", "Can't admit new workloads.")
    else:
        active = cluster_queue_active(engine, cq)
    status = {
        "pendingWorkloads": counts.pending,
        "reservingWorkloads": counts.reserving,
        "admittedWorkloads": counts.reserving,
        "flavorsReservation": usage,
        "flavorsUsage": usage,
        "conditions": _active(old, *active, generation),
    }
    node = engine.state.cq_nodes.get(cq)
    if engine.fair_sharing is not None and node is not None and node.parent is not None:
        status["fairSharing"] = {"weightedShare": engine.fair_sharing.share(node)}
    return status


def local_queue_active(engine: QuotaEngine, cq: str) -> tuple[str, str, str]:
    """A LocalQueue's Active condition (status, reason, message), from its ClusterQueue."""
    if cq not in engine.state.cq_specs:
        return "False", "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue"
    if engine.inactive_reason(cq) is not None:
        return "False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue"
    return "True", "Ready", "Can submit new workloads to localQueue"


def local_queue_status(engine: QuotaEngine, lq: dict, counts: Counts | None, old: dict) -> dict:
    counts = counts or Counts()
    cq = (lq.get("spec") or {}).get("clusterQueue", "")
    usage = _flavor_list(_cq_flavor_resources(engine, cq), counts.usage, None)
    active = local_queue_active(engine, cq)
    return {
        "pendingWorkloads": counts.pending,
        "reservingWorkloads": counts.reserving,
        "admittedWorkloads": counts.reserving,
        "flavorsReservation": usage,
        "flavorsUsage": usage,
        "conditions": _active(old, *active, lq["metadata"].get("generation")),
    }


def _without_times(status: dict) -> dict:
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                         for c in status.get("conditions") or ()]
    return out


def same_status(a: dict, b: dict) -> bool:
    return _without_times(a) == _without_times(b)
