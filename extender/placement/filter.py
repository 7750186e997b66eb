"""Which candidate nodes a pod may land on, and why each other node may not.

Checks, in order: the node is known, carries the admitted flavor's nodeLabels, is not
cordoned, has no NoSchedule/NoExecute taint the pod does not tolerate, and has the GPUs (and
the other requested resources it declares) free after what bound and in-flight pods take. A flavor, cordon or
taint mismatch is *unresolvable* (preempting pods would not help); a shortage is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_
from typing import Iterable, Mapping

from gpuqueue.api.quantity import format_engine_int

from gpuqueue.extender.placement.cache import NodeCache, NodeState, ScoreCode
from gpuqueue.extender.placement.model import NodeInfo, PodRequest
from gpuqueue.extender.placement.rules import (CORDONED, NOT_CACHED, gpu_shortage, judge, taint_reason,  # noqa: F401
                                      tolerates_cordon)


_UNKNOWN = (NOT_CACHED, False)  # the verdict for a name the cache does not know


@dataclass(slots=True)
class FilterResult:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # FailedNodes: preemption may help
    unresolvable: dict[str, str] = field(default_factory=dict)  # FailedAndUnresolvableNodes
    # The cache's score code of each passed node as of ``epoch`` (cache.epoch), for a
    # following extender_scores of the same pod and names; None when not read from the cache.
    codes: list[ScoreCode] | None = None
    epoch: int = 0

    def reasons(self) -> dict[str, str]:
        return {**self.failed, **self.unresolvable}


def resource_shortage(resource: str, free: int, need: int) -> str:
    return (f"node has {format_engine_int(resource, max(free, 0))} {resource} free, "
            f"pod needs {format_engine_int(resource, need)}")


def filter_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache,
                 nodes: Mapping[str, NodeInfo] | None = None) -> FilterResult:
    """Judge each candidate. Node facts come from ``nodes`` when given (kube-scheduler sent
    full Node objects), else from the cache; usage always comes from the cache."""
    cache.expire()
    names = names if isinstance(names, list) else list(names)
    if nodes is not None:
        out = _filter_each(pod, names, cache, nodes)
    else:
        out = _filter_by_profile(pod, names, cache)
    others = tuple((r, v) for r, v in pod.requests.items() if v > 0)
    if others and out.passed:
        _check_other_resources(pod, others, out, cache, nodes)
    return out


def _filter_by_profile(pod: PodRequest, names: list[str], cache: NodeCache) -> FilterResult:
    """The cache's FitProfile verdict for every candidate, one lookup each (which also reads
    each passing node's score code); only the node holding the pod's own reservation is judged
    on its own (its GPUs do not count against it)."""
    prof = cache.fit_profile(pod.flavor, pod.gpus, pod.all_tolerations)
    got = list(map(prof.fits.get, names))
    out = FilterResult(list(compress(names, got)), codes=list(filter(None, got)), epoch=cache.epoch)
    if len(out.passed) == len(names):
        return out
    # Few candidates fail (other flavors, full nodes): one step each, none for the rest.
    failed, unresolvable, refusal = out.failed, out.unresolvable, prof.refusals.get
    for name in compress(names, map(is_, got, repeat(None))):
        reason, hard = refusal(name, _UNKNOWN)
        if hard:
            unresolvable[name] = reason
        else:
            failed[name] = reason
    own = cache.own_reservation(pod.uid)
    if own is not None and own[0] in prof.members and (own[0] in failed or own[0] in unresolvable):
        node = own[0]
        failed.pop(node, None)
        unresolvable.pop(node, None)
        verdict = judge(cache.states[node], prof.need, prof.tolerations, prof.cordon_ok, own[1])
        if verdict is None:
            keep = [code is not None or name == node for name, code in zip(names, got)]
            own_code = prof.score.codes[node]
            out.passed = list(compress(names, keep))
            out.codes = [own_code if code is None else code for code in compress(got, keep)]
        elif verdict[1]:
            unresolvable[node] = verdict[0]
        else:
            failed[node] = verdict[0]
    return out


def _filter_each(pod: PodRequest, names: list[str], cache: NodeCache, nodes: Mapping[str, NodeInfo]) -> FilterResult:
    """Node facts from the request: every candidate judged on its own."""
    out = FilterResult()
    passed, failed, unresolvable = out.passed, out.failed, out.unresolvable
    label = cache.topology_label
    flavor = pod.flavor
    tolerations = pod.all_tolerations
    cordon_ok = tolerates_cordon(tolerations)
    own = cache.own_reservation(pod.uid)
    own_node = own[0] if own is not None else None
    for name in names:
        info = nodes.get(name)
        if info is None:
            failed[name] = NOT_CACHED
            continue
        if flavor is not None and not flavor.matches(info.labels):
            unresolvable[name] = flavor.mismatch_reason
            continue
        st = (cache.states.get(name) or NodeState(name)).overlay(info, label)
        verdict = judge(st, pod.gpus, tolerations, cordon_ok, own[1] if name == own_node else 0)
        if verdict is None:
            passed.append(name)
        elif verdict[1]:
            unresolvable[name] = verdict[0]
        else:
            failed[name] = verdict[0]
    return out


def _check_other_resources(pod: PodRequest, others, out: FilterResult, cache: NodeCache,
                           nodes: Mapping[str, NodeInfo] | None) -> None:
    """Requests other than GPUs (the simulator declares them; the extender leaves them to
    kube-scheduler), for the nodes that passed on GPUs."""
    own = cache.own_reservation(pod.uid)
    keep = []
    for name in out.passed:
        st = cache.states.get(name) or NodeState(name)
        info = nodes[name] if nodes is not None else st.info
        short = _other_shortage(others, info.allocatable, st, own if own is not None and own[0] == name else None)
        keep.append(short is None)
        if short is not None:
            out.failed[name] = short
    out.passed = list(compress(out.passed, keep))
    if out.codes is not None:
        out.codes = list(compress(out.codes, keep))


def _other_shortage(others, alloc: Mapping[str, int], st: NodeState, own) -> str | None:
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
