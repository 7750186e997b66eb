"""Classical preemption: which admitted workloads to evict so a pending one fits.

Kueue's rules: within a ClusterQueue by priority (`withinClusterQueue`); across the
cohort only from ClusterQueues that borrow (`reclaimWithinCohort`), so a queue within its
guarantee is never a target; borrowing while preempting only with `borrowWithinCohort`.
Candidates are tried in order (other queues first, lowest priority, most recently
admitted) until the workload fits, then the set is shrunk back to a minimal one.
"""

from __future__ import annotations

from dataclasses import dataclass
import heapq
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from gpuqueue.extender.quota import flavorassigner as fa
from gpuqueue.extender.quota.model import FlavorResource, WorkloadSpec

if TYPE_CHECKING:
    from gpuqueue.extender.quota.state import AdmittedWorkload, ClusterState
    from gpuqueue.extender.quota.tas.room import Room
    from gpuqueue.extender.quota.tree import QuotaNode

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


@dataclass(frozen=True, slots=True)
class Target:
    victim: "AdmittedWorkload"
    reason: str


def uses_resources(victim: "AdmittedWorkload", frs: set[FlavorResource]) -> bool:
    return not frs.isdisjoint(victim.admission.usage)


def cq_is_borrowing(node: "QuotaNode", frs: Iterable[FlavorResource]) -> bool:
    return any(node.is_borrowing(fr) for fr in frs)


def queue_under_nominal(node: "QuotaNode", frs: Iterable[FlavorResource]) -> bool:
    return all(node.usage.get(fr, 0) < node.subtree_quota.get(fr, 0) for fr in frs)


def workload_fits(state: "ClusterState", cq: str, request: dict[FlavorResource, int], allow_borrowing: bool) -> bool:
    node = state.cq_nodes[cq]
    for fr, v in request.items():
        if not allow_borrowing and node.borrowing_with(fr, v):
            return False
        if v > node.available(fr):
            return False
    return True


def _recency_key(w: "AdmittedWorkload") -> tuple:
    """Lowest priority first, then most recently admitted first."""
    return (w.spec.priority, -w.admitted_at[0], -w.admitted_at[1])


class ClassicalPreemptor:
    """Kueue's preemptor; with fair sharing on, target search goes to `fair.targets`."""

    def __init__(self, state: "ClusterState", fair=None) -> None:
        self.state = state
        self.fair = fair
        self.now = 0.0
        self.spared: set[str] = set()  # workloads not to be chosen again (preempted once already now)
        self.room: "Room | None" = None  # during a search for room on the nodes (targets_for_placement)

    # -- candidates -------------------------------------------------------------
    def _own_candidates(self, wl: WorkloadSpec, cq_name: str, frs: set[FlavorResource]) -> Iterator["AdmittedWorkload"]:
        """withinClusterQueue: lower priority (or, for LowerOrNewerEqualPriority, equal and
        newer), in order."""
        policy = self.state.cq_specs[cq_name].preemption.within_cluster_queue
        if policy == "Never":
            return
        same = wl.priority if policy == "LowerOrNewerEqualPriority" else None
        for cand in self.state.most_recent_first(cq_name, below=wl.priority, at=same):
            if cand.spec.priority == wl.priority and not wl_before(wl, cand):
                continue
            if uses_resources(cand, frs) and cand.spec.key not in self.spared:
                yield cand

    def _cohort_candidates(self, wl: WorkloadSpec, cq_name: str, frs: set[FlavorResource]) -> Iterator["AdmittedWorkload"]:
        """reclaimWithinCohort: workloads of the other ClusterQueues of the cohort tree that
        borrow, merged in order (lowest priority, most recently admitted first)."""
        state = self.state
        node = state.cq_nodes[cq_name]
        policy = state.cq_specs[cq_name].preemption.reclaim_within_cohort
        if node.parent is None or policy == "Never":
            return
        below = wl.priority if policy != "Any" else None
        streams = []
        for other in node.root().cluster_queues():
            if other is node or not cq_is_borrowing(other, frs):
                continue
            if below is None:
                stream = state.most_recent_first(other.name)
            else:
                stream = state.most_recent_first(other.name, below=below)
            streams.append(c for c in stream if uses_resources(c, frs) and c.spec.key not in self.spared)
        if len(streams) == 1:
            yield from streams[0]
        else:
            yield from heapq.merge(*streams, key=_recency_key)

    def candidates(self, wl: WorkloadSpec, cq_name: str, frs: set[FlavorResource]) -> Iterator["AdmittedWorkload"]:
        """All candidates in Kueue's order: other ClusterQueues first, then the preemptor's own."""
        yield from self._cohort_candidates(wl, cq_name, frs)
        yield from self._own_candidates(wl, cq_name, frs)

    def find_candidates(self, wl: WorkloadSpec, cq_name: str, frs: set[FlavorResource]) -> list["AdmittedWorkload"]:
        return list(self.candidates(wl, cq_name, frs))

    # -- targets --------------------------------------------------------------------
    def targets_for_placement(
        self, wl: WorkloadSpec, cq_name: str, request: dict[FlavorResource, int], frs: set[FlavorResource],
        room: "Room",
    ) -> list[Target]:
        """As get_targets, for a workload the quota would take but whose pods the nodes do not hold
        now (TAS, as Kueue's preemption re-runs the topology assignment for each set of victims
        tried): the fewest victims, in Kueue's order, after whose going both the quota and
        the nodes (`room`) say it fits."""
        self.room = room
        try:
            return self.get_targets(wl, cq_name, request, frs)
        finally:
            self.room = None

    def _fits(self, cq_name: str, request: dict[FlavorResource, int], allow_borrowing: bool,
              removed: Callable[[], list["AdmittedWorkload"]]) -> bool:
        if not workload_fits(self.state, cq_name, request, allow_borrowing):
            return False
        return self.room is None or self.room.fits(removed())

    def get_targets(
        self, wl: WorkloadSpec, cq_name: str, request: dict[FlavorResource, int], frs: set[FlavorResource]
    ) -> list[Target]:
        if self.fair is not None:
            return self.fair.targets(self.state, self, wl, cq_name, request, frs, self.now)
        cohort = self._cohort_candidates(wl, cq_name, frs)
        first = next(cohort, None)
        if first is None:
            # only the preemptor's own queue has candidates: borrowing is allowed
            return self.minimal_preemptions(cq_name, request, frs, self._own_candidates(wl, cq_name, frs), True, None)
        node = self.state.cq_nodes[cq_name]
        spec = self.state.cq_specs[cq_name]

        def everything():
            yield first
            yield from cohort
            yield from self._own_candidates(wl, cq_name, frs)

        if spec.preemption.borrow_within_cohort != "Never":
            threshold = wl.priority
            mpt = spec.preemption.max_priority_threshold
            if mpt is not None and mpt < threshold:
                threshold = mpt + 1
            cands = everything()
            if not queue_under_nominal(node, frs):
                cands = (c for c in cands if c.admission.cluster_queue == cq_name or c.spec.priority < threshold)
            return self.minimal_preemptions(cq_name, request, frs, cands, True, threshold)
        if queue_under_nominal(node, frs):
            targets = self.minimal_preemptions(cq_name, request, frs, everything(), False, None)
            if targets:
                return targets
        return self.minimal_preemptions(cq_name, request, frs, self._own_candidates(wl, cq_name, frs), True, None)

    def minimal_preemptions(
        self,
        cq_name: str,
        request: dict[FlavorResource, int],
        frs: set[FlavorResource],
        candidates: Iterable["AdmittedWorkload"],
        allow_borrowing: bool,
        borrow_below_priority: int | None,
    ) -> list[Target]:
        state = self.state
        targets: list[Target] = []
        fits = False
        quota_fits: list[tuple[int, bool]] = []  # with nodes to ask: (victims, allow_borrowing) where the quota fits
        for cand in candidates:
            cand_cq = cand.admission.cluster_queue
            same = cand_cq == cq_name
            reason = IN_CLUSTER_QUEUE if same else IN_COHORT_RECLAMATION
            if not same and not cq_is_borrowing(state.cq_nodes[cand_cq], frs):
                continue
            if not same and borrow_below_priority is not None:
                if cand.spec.priority >= borrow_below_priority:
                    allow_borrowing = False
                else:
                    reason = IN_COHORT_RECLAIM_WHILE_BORROWING
            state.remove_usage(cand)
            targets.append(Target(cand, reason))
            if self.room is not None:
                if workload_fits(state, cq_name, request, allow_borrowing):
                    quota_fits.append((len(targets), allow_borrowing))
            elif workload_fits(state, cq_name, request, allow_borrowing):
                fits = True
                break
        if self.room is not None:
            fits, allow_borrowing = self._first_placed(targets, quota_fits, allow_borrowing)
        return self.conclude(cq_name, request, targets, fits, allow_borrowing)

    def _first_placed(self, targets: list[Target], quota_fits: list[tuple[int, bool]],
                      allow_borrowing: bool) -> tuple[bool, bool]:
        """Where the loop above, asking the nodes at each step, would have stopped: the first of the
        steps at which the quota fits where the placement does too, found by bisection (each victim
        more only frees room: asking the nodes once per victim costs a whole placement each).
        The victims after it are given back."""
        assert self.room is not None
        lo, hi, found = 0, len(quota_fits) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            if self.room.fits([t.victim for t in targets[:quota_fits[mid][0]]]):
                found, hi = mid, mid - 1
            else:
                lo = mid + 1
        if found is None:
            return False, allow_borrowing
        taken, allow_borrowing = quota_fits[found]
        for t in targets[taken:]:
            self.state.add_usage(t.victim)
        del targets[taken:]
        return True, allow_borrowing

    def conclude(
        self, cq_name: str, request: dict[FlavorResource, int], targets: list[Target], fits: bool, allow_borrowing: bool
    ) -> list[Target]:
        """End a search whose targets' usage is still removed from the tree: give it back, and
        return the minimal set (or nothing when the workload did not fit)."""
        if fits:
            targets = self.fill_back(cq_name, request, targets, allow_borrowing)
        else:
            targets, undo = [], targets
            for t in undo:
                self.state.add_usage(t.victim)
        for t in targets:
            self.state.add_usage(t.victim)
        return targets

    def fill_back(
        self, cq_name: str, request: dict[FlavorResource, int], targets: list[Target], allow_borrowing: bool
    ) -> list[Target]:
        """Give back, latest first (but never the last one taken), every victim the workload
        still fits without."""
        state = self.state
        kept = list(targets)
        if self.room is not None:
            given = self._give_back(cq_name, request, kept, allow_borrowing)
        for i in range(len(kept) - 2, -1, -1):
            if self.room is not None:
                back = i in given
            else:
                state.add_usage(kept[i].victim)
                back = workload_fits(state, cq_name, request, allow_borrowing)
                if not back:
                    state.remove_usage(kept[i].victim)
            if back:
                kept[i] = kept[-1]
                kept.pop()
        return kept

    def _give_back(self, cq_name: str, request: dict[FlavorResource, int], kept: list[Target],
                   allow_borrowing: bool) -> set[int]:
        """fill_back's choice when the nodes are asked too: the indices it gives back, a run of them
        at a time - when the workload still fits with a whole run given back, it fits with each of
        them given back in turn - and a run that does not, in halves. The victims away from the room
        found are tried first, as one run; then the others in fill_back's order."""
        state = self.state
        given: set[int] = set()

        def kept_victims() -> list["AdmittedWorkload"]:
            return [t.victim for j, t in enumerate(kept) if j not in given]

        def give(run: list[int]) -> None:
            for i in run:
                state.add_usage(kept[i].victim)
                given.add(i)
            if self._fits(cq_name, request, allow_borrowing, kept_victims):
                return
            for i in run:
                state.remove_usage(kept[i].victim)
                given.discard(i)
            if len(run) > 1:
                give(run[:len(run) // 2])
                give(run[len(run) // 2:])

        assert self.room is not None
        order = list(range(len(kept) - 2, -1, -1))
        away = self.room.outside([kept[i].victim for i in order])
        first = [i for i in order if kept[i].victim.spec.key in away]
        for run in (first, [i for i in order if kept[i].victim.spec.key not in away]):
            if run:
                give(run)
        return given

    # -- the flavor assigner's oracle ---------------------------------------------------
    def simulate(self, cq_name: str, wl: WorkloadSpec, fr: FlavorResource, val: int) -> tuple[int, int]:
        targets = self.get_targets(wl, cq_name, {fr: val}, {fr})
        if not targets:
            return fa.P_NO_CANDIDATES, 0
        state = self.state
        for t in targets:
            state.remove_usage(t.victim)
        borrow, _ = state.cq_nodes[cq_name].height_of_lowest_subtree_that_fits(fr, val)
        for t in targets:
            state.add_usage(t.victim)
        if any(t.victim.admission.cluster_queue == cq_name for t in targets):
            return fa.P_PREEMPT, borrow
        return fa.P_RECLAIM, borrow


def wl_before(a: WorkloadSpec, b: "AdmittedWorkload") -> bool:
    """Was `a` created before the admitted `b`? (Kueue compares creation here, also for a
    workload requeued after preemption; a cascade within one pass is prevented by `spared`.)"""
    return (a.created, a.seq) < (b.spec.created, b.spec.seq)
