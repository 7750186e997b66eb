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
    full Node objects), else from the cache; usage always comes from the cache.

    With cached node facts and nothing but GPUs to check, the nodes that certainly pass (of
    the flavor, plain, enough GPUs free by the cache's index) are picked with one dict lookup
    each; only the others go through the full per-node judgement, which gives the reason."""
    cache.expire()
    names = names if isinstance(names, list) else list(names)
    out = FilterResult()
    judge = _Judge(pod, cache, nodes)
    if nodes is None and not judge.others:
        free, need = cache.free, pod.gpus
        members = judge.members
        if members is None:
            sure = [n for n in names if free.get(n, -1) >= need]
        else:
            sure = [n for n in names if n in members and free.get(n, -1) >= need]
        if len(sure) == len(names):
            out.passed = sure
            return out
        sure_set = set(sure)
        rest = [n for n in names if n not in sure_set]
    else:
        sure, sure_set, rest = [], set(), names
    extra = judge.all(rest, out)
    out.passed = ([n for n in names if n in sure_set or n in extra] if sure and extra
                  else sure or [n for n in names if n in extra])
    return out


class _Judge:
    """The full check of one node, in the order the module docstring gives."""

    def __init__(self, pod: PodRequest, cache: NodeCache, nodes: Mapping[str, NodeInfo] | None) -> None:
        self.states = cache.states
        self.flavor = flavor = pod.flavor
        self.members = cache.members(flavor) if flavor is not None and nodes is None else None
        self.mismatch = flavor.mismatch_reason if flavor is not None else ""
        self.tolerations = tolerations = pod.all_tolerations
        self.tolerates_cordon = any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations)
        self.own = cache.own_reservation(pod.uid)
        self.own_node = self.own[0] if self.own is not None else None
        self.need = pod.gpus
        self.others = tuple((r, v) for r, v in pod.requests.items() if v > 0)
        if nodes is not None:
            label = cache.topology_label
            self.states = {n: (self.states.get(n) or NodeState(n)).overlay(info, label) for n, info in nodes.items()}

    def all(self, names: list[str], out: FilterResult) -> set[str]:
        """Judge ``names`` into ``out``'s failures; returns the ones that pass."""
        passed: set[str] = set()
        failed, unresolvable = out.failed, out.unresolvable
        for name in names:
            reason = self.one(name)
            if reason is None:
                passed.add(name)
            elif reason[1]:
                unresolvable[name] = reason[0]
            else:
                failed[name] = reason[0]
        return passed

    def one(self, name: str) -> tuple[str, bool] | None:
        """None if the pod may land here, else (reason, unresolvable)."""
        st = self.states.get(name)
        if st is None or st.info is None:
            return NOT_CACHED, False
        if self.members is not None:
            if name not in self.members:
                return self.mismatch, True
        elif self.flavor is not None and not self.flavor.matches(st.info.labels):
            return self.mismatch, True
        if st.unschedulable and not self.tolerates_cordon:
            return CORDONED, True
        if st.hard_taints:
            taint = untolerated_taint(st.hard_taints, self.tolerations)
            if taint is not None:
                return taint_reason(taint), True
        own = self.own if name == self.own_node else None
        free = st.gpus_alloc - st.gpus_used - st.gpus_reserved
        if own is not None:
            free += own[1]
        if free < self.need:
            return gpu_shortage(max(free, 0), self.need), False
        if self.others:
            short = _other_shortage(self.others, st, own)
            if short is not None:
                return short, False
        return None


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
