"""Fair sharing between borrowers (Kueue's fairSharing, on when the Configuration has it).

A node's share is its dominant resource's usage above its own quota over what its parent
cohort can lend, in thousandths, divided by its weight: Kueue's integer weightedShare.
Admission prefers the lowest share after admission, comparing from the top of the cohort
tree down (a tournament); preemption between borrowers follows `preemptionStrategies`.
"""

from __future__ import annotations

import heapq
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuqueue.extender.quota.model import FlavorResource, WorkloadSpec
from gpuqueue.extender.quota.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    Target,
    cq_is_borrowing,
    workload_fits,
)

if TYPE_CHECKING:
    from gpuqueue.extender.quota import flavorassigner as fa
    from gpuqueue.extender.quota.preemption import ClassicalPreemptor
    from gpuqueue.extender.quota.state import AdmittedWorkload, ClusterState, PendingWorkload
    from gpuqueue.extender.quota.tree import QuotaNode

MAX_SHARE = sys.maxsize
LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


def _lendable(cohort: "QuotaNode") -> dict[str, int]:
    out: dict[str, int] = {}
    for fr in cohort.subtree_quota:
        out[fr[1]] = out.get(fr[1], 0) + cohort.potential_available(fr)
    return out


def dominant_resource_share(
    node: "QuotaNode",
    extra: dict[FlavorResource, int] | None = None,
    minus: bool = False,
    history: dict[FlavorResource, int] | None = None,
) -> int:
    """Kueue's weighted dominant resource share of `node` with `extra` usage added (or
    taken away with minus=True). `history` (thousandths of a unit, per flavor and resource)
    is recent borrowing that counts on top of the current one (the usage-history mode)."""
    if node.parent is None:
        return 0
    if node.weight_milli == 0:
        return MAX_SHARE
    borrowed: dict[str, int] = {}  # thousandths of a unit
    frs = set(node.subtree_quota) | set(node.usage) | set(extra or ()) | set(history or ())
    for fr in frs:
        delta = (extra or {}).get(fr, 0)
        amount = 1000 * max(0, node.usage.get(fr, 0) + (-delta if minus else delta) - node.subtree_quota.get(fr, 0))
        amount += (history or {}).get(fr, 0)
        if amount > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + amount
    if not borrowed:
        return 0
    lendable = _lendable(node.parent)
    drs = -1
    for res in sorted(borrowed):
        lr = lendable.get(res, 0)
        if lr > 0:
            drs = max(drs, borrowed[res] // lr)
    if drs < 0:
        return 0
    return drs * 1000 // node.weight_milli


def _strategy_holds(name: str, preemptor_new: int, target_old: int, target_new: int) -> bool:
    if name == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        return preemptor_new <= target_new
    return preemptor_new < target_old


@dataclass
class FairSharing:
    strategies: tuple[str, ...] = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
    # gpuqueue's opt-in extensions (None: off, Kueue's behaviour)
    usage_half_life: float | None = None  # seconds
    minimum_admitted_time: float | None = None  # seconds
    _history: dict[str, dict[FlavorResource, float]] = field(default_factory=dict)
    _history_time: float | None = None
    protection_ends: float | None = None  # set by targets() when a protected borrower was spared

    # -- usage history ---------------------------------------------------------------------
    def advance(self, state: "ClusterState", now: float) -> None:
        """Fold the borrowing held since the last call into each ClusterQueue's decayed history."""
        if self.usage_half_life is None:
            return
        last, self._history_time = self._history_time, now
        if last is None or now <= last:
            return
        keep = 0.5 ** ((now - last) / self.usage_half_life) if self.usage_half_life > 0 else 0.0
        for name, node in state.cq_nodes.items():
            hist = self._history.get(name, {})
            frs = set(hist) | set(node.usage)
            updated = {}
            for fr in frs:
                borrowed = max(0, node.usage.get(fr, 0) - node.subtree_quota.get(fr, 0))
                v = hist.get(fr, 0.0) * keep + borrowed * (1.0 - keep)
                if v >= 0.0005:
                    updated[fr] = v
            self._history[name] = updated

    def history_of(self, node: "QuotaNode") -> dict[FlavorResource, int] | None:
        if self.usage_half_life is None or node.is_cohort:
            return None
        return {fr: round(v * 1000) for fr, v in self._history.get(node.name, {}).items()}

    def share(self, node: "QuotaNode", extra: dict[FlavorResource, int] | None = None, minus: bool = False) -> int:
        return dominant_resource_share(node, extra, minus, self.history_of(node))

    # -- admission order ------------------------------------------------------------------
    def entry_order(self, state: "ClusterState", cq: str, assignment: "fa.Assignment", pending: "PendingWorkload") -> tuple:
        node = state.cq_nodes[cq]
        path = [n for n in reversed(node.path_to_root()) if n.parent is not None]
        shares = tuple(self.share(n, assignment.usage) for n in path)
        return (shares, -pending.spec.priority, pending.queue_ts)

    def weighted_shares(self, state: "ClusterState") -> dict[str, int]:
        """status.fairSharing.weightedShare of every ClusterQueue and Cohort in a cohort."""
        out: dict[str, int] = {}
        for name, node in list(state.cq_nodes.items()) + list(state.cohort_nodes.items()):
            if node.parent is not None:
                out[name] = self.share(node)
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
        now: float = 0.0,
    ) -> list[Target]:
        self.protection_ends = None
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
        new_share = self.share(node, request)
        heap = _CandidateHeap(self, state, candidates)
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
                new_share = self.share(node, request)
                if group.workloads:
                    heap.push(group)
                continue
            for i, victim in enumerate(group.workloads):
                below_threshold = below is not None and victim.spec.priority < below
                if not below_threshold and self._protected(victim, now):
                    continue
                cand_new = self.share(group.node, victim.admission.usage, minus=True)
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
            heap = _CandidateHeap(self, state, retry)
            while heap and not fits:
                group = heap.pop()
                group.workloads = [w for w in group.workloads if not self._protected(w, now)]
                if group.workloads and _strategy_holds(self.strategies[1], new_share, group.share, 0):
                    victim = group.workloads[0]
                    state.remove_usage(victim)
                    targets.append(Target(victim, IN_COHORT_FAIR_SHARING))
                    if workload_fits(state, cq_name, request, True):
                        fits = True
        return preemptor.conclude(cq_name, request, targets, fits, True)


    def _protected(self, victim: "AdmittedWorkload", now: float) -> bool:
        """A borrower admitted less than minimumAdmittedTime ago is left alone; the engine
        looks again when the earliest such protection ends (`protection_ends`)."""
        t = self.minimum_admitted_time
        if t is None or now - victim.admitted_at[0] >= t:
            return False
        ends = victim.admitted_at[0] + t
        if self.protection_ends is None or ends < self.protection_ends:
            self.protection_ends = ends
        return True


class _Group:
    __slots__ = ("node", "workloads", "share")

    def __init__(self, node: "QuotaNode", workloads: list["AdmittedWorkload"]) -> None:
        self.node = node
        self.workloads = workloads
        self.share = 0


class _CandidateHeap:
    """ClusterQueues holding candidates, highest share first (ties: name)."""

    def __init__(self, fair: FairSharing, state: "ClusterState", candidates: list["AdmittedWorkload"]) -> None:
        self._fair = fair
        groups: dict[str, list[AdmittedWorkload]] = {}
        for c in candidates:
            groups.setdefault(c.admission.cluster_queue, []).append(c)
        self._heap: list[tuple[int, str, _Group]] = []
        for name, wls in groups.items():
            self.push(_Group(state.cq_nodes[name], wls))

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, group: _Group) -> None:
        group.share = self._fair.share(group.node)
        heapq.heappush(self._heap, (-group.share, group.node.name, group))

    def pop(self) -> _Group:
        return heapq.heappop(self._heap)[2]
