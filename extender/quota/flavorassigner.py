"""Choosing a flavor for each requested resource of a workload (Kueue's flavorassigner).

For each resource group the workload touches, the ClusterQueue's flavors are tried in
order; a flavor is judged for every covered resource the workload requests (fit, fit
after preemption, no fit) and `flavorFungibility` says whether to stop at it or try the
next. The reasons a flavor was passed over make Kueue's pending message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from gpuqueue.extender.quota.model import ClusterQueueSpec, FlavorResource, FlavorSpec, PodSetSpec, WorkloadSpec
from gpuqueue.extender.quota.tree import QuotaNode
from gpuqueue.api.scheduling import untolerated_taint
from gpuqueue.api.quantity import format_engine_int

# Assignment modes, worst to best.
NO_FIT = 0
PREEMPT = 1
FIT = 3

# Finer preemption modes inside the assigner, worst to best (Kueue's preemptionMode).
P_NO_FIT = 0
P_NO_CANDIDATES = 1
P_PREEMPT = 2
P_RECLAIM = 3
P_FIT = 4

# SimulatePreemption(cq, workload, fr, value) -> (preemption mode, borrowing level after)
PreemptionOracle = Callable[[str, WorkloadSpec, FlavorResource, int], tuple[int, int]]


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    count: int
    flavors: dict[str, str] = field(default_factory=dict)  # resource -> flavor
    modes: dict[str, int] = field(default_factory=dict)  # resource -> NO_FIT/PREEMPT/FIT
    usage: dict[str, int] = field(default_factory=dict)  # resource -> what its pods take together
    reasons: list[str] = field(default_factory=list)
    failed: bool = False


@dataclass(slots=True)
class Assignment:
    pod_sets: list[PodSetAssignment]
    usage: dict[FlavorResource, int]
    borrow_level: int = 0

    @property
    def mode(self) -> int:
        worst = FIT
        for ps in self.pod_sets:
            if ps.failed:
                return NO_FIT
            if not ps.reasons:
                continue
            for m in ps.modes.values():
                worst = min(worst, m)
        return worst

    @property
    def borrows(self) -> bool:
        return self.borrow_level > 0

    def message(self) -> str:
        parts = []
        for ps in self.pod_sets:
            if ps.reasons or ps.failed:
                parts.append(f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(ps.reasons))}")
        return "; ".join(parts)

    def resources_needing_preemption(self) -> set[FlavorResource]:
        out: set[FlavorResource] = set()
        for ps in self.pod_sets:
            for res, mode in ps.modes.items():
                if mode == PREEMPT:
                    out.add((ps.flavors[res], res))
        return out

    def flavors_by_pod_set(self) -> dict[str, dict[str, str]]:
        return {ps.name: dict(ps.flavors) for ps in self.pod_sets}

    def usage_by_pod_set(self) -> dict[str, dict[str, int]]:
        return {ps.name: dict(ps.usage) for ps in self.pod_sets}


def _preferred(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Is granular mode a = (preemption mode, borrowing level) better than b?
    Kueue's default preference: borrowing over preemption."""
    if a[0] == P_NO_FIT:
        return False
    if b[0] == P_NO_FIT:
        return True
    a_none, b_none = a[0] == P_NO_CANDIDATES, b[0] == P_NO_CANDIDATES
    if a_none != b_none:
        return not a_none
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _to_assignment_mode(p: int) -> int:
    if p == P_NO_FIT:
        return NO_FIT
    if p == P_FIT:
        return FIT
    return PREEMPT


def _should_try_next(mode: tuple[int, int], cq: ClusterQueueSpec) -> bool:
    if mode[0] in (P_NO_FIT, P_NO_CANDIDATES):
        return True
    if mode[0] in (P_PREEMPT, P_RECLAIM) and cq.when_can_preempt == "TryNextFlavor":
        return True
    if mode[1] > 0 and cq.when_can_borrow == "TryNextFlavor":
        return True
    return False


def _node_affinity_matches(ps: PodSetSpec, flavor: FlavorSpec) -> bool:
    """The pod set's nodeSelector and required node affinity against the flavor's labels,
    looking only at label keys the flavor defines (Kueue's flavorSelector)."""
    labels = dict(flavor.node_labels)
    for k, v in ps.node_selector:
        if k in labels and labels[k] != v:
            return False
    if not ps.affinity_terms:
        return True
    terms = []
    for term in ps.affinity_terms:
        kept = tuple(req for req in term if req[0] in labels)
        if not kept:
            return True  # a term with no relevant key matches any flavor
        terms.append(kept)
    return any(all(_requirement_matches(req, labels) for req in term) for term in terms)


def _requirement_matches(req: tuple[str, str, tuple[str, ...]], labels: dict[str, str]) -> bool:
    key, op, values = req
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


class FlavorAssigner:
    def __init__(
        self,
        cq: ClusterQueueSpec,
        node: QuotaNode,
        flavors: dict[str, FlavorSpec],
        oracle: PreemptionOracle,
        fair_sharing: bool = False,
    ) -> None:
        self.cq = cq
        self.node = node
        self.flavors = flavors
        self.oracle = oracle
        self.fair_sharing = fair_sharing

    def assign(self, wl: WorkloadSpec) -> Assignment:
        assignment = Assignment(pod_sets=[], usage={})
        for ps in wl.pod_sets:
            psa = PodSetAssignment(name=ps.name, count=ps.count)
            assignment.pod_sets.append(psa)
            requests = {r: v for r, v in ps.total().items() if v > 0 or self.cq.group_for(r) is not None}
            if self.cq.group_for("pods") is not None:
                requests["pods"] = ps.count
            for res in sorted(requests):
                if res in psa.flavors:
                    continue
                if self.cq.group_for(res) is None:
                    if requests[res] == 0:
                        continue
                    psa.reasons = [f"resource {res} unavailable in ClusterQueue"]
                    psa.failed = True
                    psa.flavors.clear()
                    psa.modes.clear()
                    break
                chosen, modes, reasons, borrow, failed = self._find_flavor(wl, ps, requests, res, assignment.usage)
                if failed:
                    psa.reasons = reasons
                    psa.failed = True
                    psa.flavors.clear()
                    psa.modes.clear()
                    break
                psa.flavors.update(chosen)
                psa.modes.update(modes)
                psa.reasons.extend(reasons)
                assignment.borrow_level = max(assignment.borrow_level, borrow)
            if psa.failed:
                return assignment
            for res, flavor in psa.flavors.items():
                fr = (flavor, res)
                assignment.usage[fr] = assignment.usage.get(fr, 0) + requests[res]
                psa.usage[res] = requests[res]
        return assignment

    def _check_flavor(self, flavor_name: str, ps: PodSetSpec) -> str | None:
        flavor = self.flavors.get(flavor_name)
        if flavor is None:
            return f"flavor {flavor_name} not found"
        taint = untolerated_taint(list(flavor.node_taints), list(ps.tolerations) + list(flavor.tolerations))
        if taint is not None:
            return f"untolerated taint {taint} in flavor {flavor_name}"
        if not _node_affinity_matches(ps, flavor):
            return f"flavor {flavor_name} doesn't match node affinity"
        return None

    def _find_flavor(
        self,
        wl: WorkloadSpec,
        ps: PodSetSpec,
        requests: dict[str, int],
        res: str,
        assumed: dict[FlavorResource, int],
    ) -> tuple[dict[str, str], dict[str, int], list[str], int, bool]:
        """(flavors, modes, reasons, borrowing level, failed) for the resource group of `res`."""
        rg = self.cq.group_for(res)
        assert rg is not None
        group_requests = {r: v for r, v in requests.items() if r in rg.covered_resources}
        reasons: list[str] = []
        best: dict[str, str] = {}
        best_modes: dict[str, int] = {}
        best_mode = (P_NO_FIT, 1 << 30)
        for flavor_name in rg.flavors:
            problem = self._check_flavor(flavor_name, ps)
            if problem is not None:
                reasons.append(problem)
                continue
            chosen: dict[str, str] = {}
            modes: dict[str, int] = {}
            representative = (P_FIT, 0)
            for r in sorted(group_requests):
                fr = (flavor_name, r)
                pmode, borrow, why = self._fits_quota(wl, fr, assumed.get(fr, 0), group_requests[r])
                reasons.extend(why)
                mode = (pmode, borrow)
                if _preferred(representative, mode):
                    representative = mode
                if representative[0] == P_NO_FIT:
                    continue
                chosen[r] = flavor_name
                modes[r] = _to_assignment_mode(pmode)
            if not _should_try_next(representative, self.cq):
                best, best_modes, best_mode = chosen, modes, representative
                break
            if _preferred(representative, best_mode):
                best, best_modes, best_mode = chosen, modes, representative
        if best_mode[0] == P_NO_FIT or not best:
            return {}, {}, reasons, 0, True
        if best_mode[0] == P_FIT:
            return best, best_modes, [], best_mode[1], False
        return best, best_modes, reasons, best_mode[1], False

    def _fits_quota(self, wl: WorkloadSpec, fr: FlavorResource, assumed: int, request: int) -> tuple[int, int, list[str]]:
        node = self.node
        flavor, res = fr
        val = assumed + request
        if val == 0:
            return P_FIT, 0, []  # asks for none of it: no quota, used up or not, stands in the way
        max_capacity = node.potential_available(fr)
        if val > max_capacity:
            return P_NO_FIT, 0, [
                f"insufficient quota for {res} in flavor {flavor}, previously considered podsets requests "
                f"({format_engine_int(res, assumed)}) + current podset request ({format_engine_int(res, request)}) "
                f"> maximum capacity ({format_engine_int(res, max_capacity)})"
            ]
        borrow, may_reclaim = node.height_of_lowest_subtree_that_fits(fr, val)
        available = node.available(fr)
        if val <= available:
            return P_FIT, borrow, []
        needed = val - node.available_with_deficits(fr)
        why = [f"insufficient unused quota for {res} in flavor {flavor}, {format_engine_int(res, needed)} more needed"]
        if node.nominal(fr) >= val or may_reclaim or self._can_preempt_within_cluster_queue() or self._can_preempt_while_borrowing():
            pmode, borrow_after = self.oracle(self.cq.name, wl, fr, val)
            return pmode, borrow_after, why
        return P_NO_FIT, borrow, why

    def _can_preempt_within_cluster_queue(self) -> bool:
        return self.cq.preemption.within_cluster_queue != "Never"

    def _can_preempt_while_borrowing(self) -> bool:
        p = self.cq.preemption
        return p.borrow_within_cohort != "Never" or (self.fair_sharing and p.reclaim_within_cohort != "Never")
