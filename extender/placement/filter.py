"""Which candidate nodes a pod may land on, and why each other node may not.

Checks, in order: the node is known, carries the admitted flavor's nodeLabels, is not
cordoned, has no NoSchedule/NoExecute taint the pod does not tolerate, and has the GPUs (and
the other requested resources it declares) free after what bound and in-flight pods take. A flavor, cordon or
taint mismatch is *unresolvable* (preempting pods would not help); a shortage is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from gpuqueue.api.quantity import format_engine_int

from extender.placement.cache import NodeCache, NodeState
from extender.placement.model import UNSCHEDULABLE_TAINT, NodeInfo, PodRequest, untolerated_taint

NOT_CACHED = "node is not in gpuqueue's node cache yet"
CORDONED = "node is cordoned"


@dataclass(slots=True)
class FilterResult:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # FailedNodes: preemption may help
    unresolvable: dict[str, str] = field(default_factory=dict)  # FailedAndUnresolvableNodes

    def reasons(self) -> dict[str, str]:
        return {**self.failed, **self.unresolvable}


def gpu_shortage(free: int, need: int) -> str:
    return f"node has {free} GPU{'' if free == 1 else 's'} free, pod needs {need}"


def resource_shortage(resource: str, free: int, need: int) -> str:
    return (f"node has {format_engine_int(resource, max(free, 0))} {resource} free, "
            f"pod needs {format_engine_int(resource, need)}")


def taint_reason(taint) -> str:
    return f"node has taint {taint} that the pod does not tolerate"


def filter_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache,
                 nodes: Mapping[str, NodeInfo] | None = None) -> FilterResult:
    """Judge each candidate. Node facts come from ``nodes`` when given (kube-scheduler sent
    full Node objects), else from the cache; usage always comes from the cache."""
    cache.expire()
    out = FilterResult()
    passed, failed, unresolvable = out.passed, out.failed, out.unresolvable
    states = cache.states
    flavor = pod.flavor
    members = cache.members(flavor) if flavor is not None and nodes is None else None
    mismatch = flavor.mismatch_reason if flavor is not None else ""
    tolerations = pod.all_tolerations
    tolerates_cordon = any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations)
    own = cache.own_reservation(pod.uid)
    own_node = own[0] if own is not None else None
    need = pod.gpus
    others = tuple((r, v) for r, v in pod.requests.items() if v > 0)
    if nodes is not None:
        label = cache.topology_label
        states = {n: (states.get(n) or NodeState(n)).overlay(info, label) for n, info in nodes.items()}
    for name in names:
        st = states.get(name)
        if st is None or st.info is None:
            failed[name] = NOT_CACHED
            continue
        if members is not None:
            if name not in members:
                unresolvable[name] = mismatch
                continue
        elif flavor is not None and not flavor.matches(st.info.labels):
            unresolvable[name] = mismatch
            continue
        if st.unschedulable and not tolerates_cordon:
            unresolvable[name] = CORDONED
            continue
        if st.hard_taints:
            taint = untolerated_taint(st.hard_taints, tolerations)
            if taint is not None:
                unresolvable[name] = taint_reason(taint)
                continue
        free = st.gpus_alloc - st.gpus_used - st.gpus_reserved
        if name == own_node:
            free += own[1]
        if free < need:
            failed[name] = gpu_shortage(max(free, 0), need)
            continue
        if others:
            short = _other_shortage(others, st, own if name == own_node else None)
            if short is not None:
                failed[name] = short
                continue
        passed.append(name)
    return out


def _other_shortage(others, st: NodeState, own) -> str | None:
    alloc = st.info.allocatable
    for r, need in others:
        # A resource the node does not declare is left to kube-scheduler's own fit check:
        # the cache may not know it, and refusing on a guess would strand the pod.
        if r not in alloc:
            continue
        free = alloc[r] - st.used.get(r, 0) - st.reserved.get(r, 0)
        if own is not None:
            free += own[2].get(r, 0)
        if free < need:
            return resource_shortage(r, free, need)
    return None


def summarize(total: int, reasons: Mapping[str, str]) -> str:
    """The message kube-scheduler builds from per-node reasons: ``0/3 nodes are available:
    1 node is cordoned, 2 node has 0 GPUs free, pod needs 4.``"""
    counts: dict[str, int] = {}
    for r in reasons.values():
        counts[r] = counts.get(r, 0) + 1
    parts = ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))
    return f"0/{total} nodes are available: {parts}." if parts else f"0/{total} nodes are available."
