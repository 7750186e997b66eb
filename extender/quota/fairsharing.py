"""Fair sharing between borrowers (Kueue's fairSharing, on when the Configuration has it).

A node's share is its dominant resource's usage above its own quota over what its parent
cohort can lend, in thousandths, divided by its weight: Kueue's integer weightedShare.
Admission prefers the lowest share after admission, comparing from the top of the cohort
tree down (a tournament); preemption between borrowers follows `preemptionStrategies`.
"""

from __future__ import annotations

import heapq
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from extender.quota.model import FlavorResource, WorkloadSpec
from extender.quota.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    Target,
    cq_is_borrowing,
    workload_fits,
)

if TYPE_CHECKING:
    from extender.quota import flavorassigner as fa
    from extender.quota.preemption import ClassicalPreemptor
    from extender.quota.state import AdmittedWorkload, ClusterState, PendingWorkload
    from extender.quota.tree import QuotaNode

MAX_SHARE = sys.maxsize
LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


def _lendable(cohort: "QuotaNode") -> dict[str, int]:
    out: dict[str, int] = {}
    for fr in cohort.subtree_quota:
        out[fr[1]] = out.get(fr[1], 0) + cohort.potential_available(fr)
    return out


def dominant_resource_share(node: "QuotaNode", extra: dict[FlavorResource, int] | None = None, minus: bool = False) -> int:
    """Kueue's weighted dominant resource share of `node` with `extra` usage added (or
    taken away with minus=True)."""
    if node.parent is None:
        return 0
    if node.weight_milli == 0:
        return MAX_SHARE
    borrowed: dict[str, int] = {}
    frs = set(node.subtree_quota) | set(node.usage) | set(extra or ())
    for fr in frs:
        delta = (extra or {}).get(fr, 0)
        amount = node.usage.get(fr, 0) + (-delta if minus else delta) - node.subtree_quota.get(fr, 0)
        if amount > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + amount
    if not borrowed:
        return 0
    lendable = _lendable(node.parent)
    drs = -1
    for res in sorted(borrowed):
        lr = lendable.get(res, 0)
        if lr > 0:
            drs = max(drs, borrowed[res] * 1000 // lr)
    if drs < 0:
        return 0
    return drs * 1000 // node.weight_milli


def _strategy_holds(name: str, preemptor_new: int, target_old: int, target_new: int) -> bool:
    if name == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return preemptor_new <= target_new
    return preemptor_new < target_old


@dataclass(frozen=True)
class FairSharing:
    strategies: tuple[str, ...] = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)

    # -- admission order ------------------------------------------------------------------
    def entry_order(self, state: "ClusterState", cq: str, assignment: "fa.Assignment", pending: "PendingWorkload") -> tuple:
        node = state.cq_nodes[cq]
        path = [n for n in reversed(node.path_to_root()) if n.parent is not None]
        shares = tuple(dominant_resource_share(n, assignment.usage) for n in path)
        return (shares, -pending.spec.priority, pending.queue_ts)

    def weighted_shares(self, state: "ClusterState") -> dict[str, int]:
        """status.fairSharing.weightedShare of every ClusterQueue and Cohort in a cohort."""
        out: dict[str, int] = {}
        for name, node in list(state.cq_nodes.items()) + list(state.cohort_nodes.items()):
            if node.parent is not None:
                out[name] = dominant_resource_share(node)
        return out

    # -- preemption ----------------------------------------------------------------------
    def targets(
        self,
        state: "ClusterState",
        preemptor: "ClassicalPreemptor",
        wl: WorkloadSpec,
        cq_name: str,
        request: dict[FlavorResource, int],
        frs: set[FlavorResource],
    ) -> list[Target]:
        candidates = preemptor.find_candidates(wl, cq_name, frs)
        if not candidates:
            return []
        spec = state.cq_specs[cq_name]
        below: int | None = None
        if spec.preemption.borrow_within_cohort != "Never":
            below = wl.priority
            mpt = spec.preemption.max_priority_threshold
            if mpt is not None and mpt < below:
                below = mpt + 1
        node = state.cq_nodes[cq_name]
        targets: list[Target] = []
        fits = False
        new_share = dominant_resource_share(node, request)
        heap = _CandidateHeap(state, candidates)
        retry: list["AdmittedWorkload"] = []
        while heap and not fits:
            group = heap.pop()
            if group.node is node:
                victim = group.workloads.pop(0)
                state.remove_usage(victim)
                targets.append(Target(victim, IN_CLUSTER_QUEUE))
                if workload_fits(state, cq_name, request, True):
                    fits = True
                    break
                new_share = dominant_resource_share(node, request)
                if group.workloads:
                    heap.push(group)
                continue
            for i, victim in enumerate(group.workloads):
                below_threshold = below is not None and victim.spec.priority < below
                cand_new = dominant_resource_share(group.node, victim.admission.usage, minus=True)
                if below_threshold or _strategy_holds(self.strategies[0], new_share, group.share, cand_new):
                    state.remove_usage(victim)
                    reason = IN_COHORT_RECLAIM_WHILE_BORROWING if below_threshold else IN_COHORT_FAIR_SHARING
                    targets.append(Target(victim, reason))
                    if workload_fits(state, cq_name, request, True):
                        fits = True
                        break
                    group.workloads = group.workloads[i + 1:]
                    if group.workloads and cq_is_borrowing(group.node, frs):
                        heap.push(group)
                    break
                retry.append(victim)
        if not fits and len(self.strategies) > 1:
            heap = _CandidateHeap(state, retry)
            while heap and not fits:
                group = heap.pop()
                if _strategy_holds(self.strategies[1], new_share, group.share, 0):
                    victim = group.workloads[0]
                    state.remove_usage(victim)
                    targets.append(Target(victim, IN_COHORT_FAIR_SHARING))
                    if workload_fits(state, cq_name, request, True):
                        fits = True
        if not fits:
            for t in targets:
                state.add_usage(t.victim)
            return []
        targets = preemptor._fill_back(cq_name, request, targets, True)
        for t in targets:
            state.add_usage(t.victim)
        return targets


class _Group:
    __slots__ = ("node", "workloads", "share")

    def __init__(self, node: "QuotaNode", workloads: list["AdmittedWorkload"]) -> None:
        self.node = node
        self.workloads = workloads
        self.share = dominant_resource_share(node)


class _CandidateHeap:
    """ClusterQueues holding candidates, highest share first (ties: name)."""

    def __init__(self, state: "ClusterState", candidates: list["AdmittedWorkload"]) -> None:
        groups: dict[str, list[AdmittedWorkload]] = {}
        for c in candidates:
            groups.setdefault(c.admission.cluster_queue, []).append(c)
        self._heap: list[tuple[int, str, _Group]] = []
        for name, wls in groups.items():
            self.push(_Group(state.cq_nodes[name], wls))

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, group: _Group) -> None:
        group.share = dominant_resource_share(group.node)
        heapq.heappush(self._heap, (-group.share, group.node.name, group))

    def pop(self) -> _Group:
        return heapq.heappop(self._heap)[2]
