"""Choosing a flavor for each requested resource of a workload (Kueue's flavorassigner).

For each resource group the workload touches, the ClusterQueue's flavors are tried in
order; a flavor is judged for every covered resource the workload requests (fit, fit
after preemption, no fit) and `flavorFungibility` says whether to stop at it or try the
next. The reasons a flavor was passed over make Kueue's pending message.

A search may start past the flavors an earlier attempt stopped at (``start``, Kueue's
LastTriedFlavorIdx): the engine does so when the chosen flavors' nodes do not hold the pods
(TAS), as Kueue's next scheduling cycle does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from gpuqueue.extender.quota.model import ClusterQueueSpec, FlavorResource, FlavorSpec, PodSetSpec, WorkloadSpec
from gpuqueue.extender.quota.tas.request import TopologyRequest
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
    # (pod set, resource) -> index in its resource group of the flavor the search stopped at,
    # -1 when that was the group's last (Kueue's LastTriedFlavorIdx)
    tried: dict[tuple[str, str], int] = field(default_factory=dict)

    def pending_flavors(self) -> bool:
        """Are there flavors after those this search stopped at (Kueue's PendingFlavors)?"""
        return any(i != -1 for i in self.tried.values())

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


def tas_mismatch(ps: PodSetSpec, flavor: FlavorSpec, rg_resources: tuple[str, ...], tas_only: bool) -> str | None:
    """Why a pod set and a flavor do not go together for Topology Aware Scheduling (Kueue's
    checkPodSetAndFlavorMatchForTAS): a pod set that asks for a topology needs a TAS flavor with
    the levels it names; one that asks for none is kept off TAS flavors, unless every flavor of the
    ClusterQueue is one (then it is placed as unconstrained)."""
    name = flavor.name
    if ps.topology is None:
        if flavor.topology_name is not None and not tas_only:
            return f'Flavor "{name}" supports only TopologyAwareScheduling'
        return None
    if flavor.topology_name is None:
        if not any(r in ps.per_pod for r in rg_resources):
            return None  # provides only resources the TAS flavor does not
        return f'Flavor "{name}" does not support TopologyAwareScheduling'
    if flavor.topology_levels is None:
        return f'Flavor "{name}" information missing in TAS cache'
    if not _has_levels(ps.topology, flavor.topology_levels):
        return f'Flavor "{name}" does not contain the requested level'
    return None


def _has_levels(req: TopologyRequest, levels: tuple[str, ...]) -> bool:
    asked = [lv for lv in (req.required, req.preferred, req.slice_level) if lv is not None]
    return all(lv in levels for lv in asked)


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
        self._tas_only: bool | None = None  # read when first needed

    def assign(self, wl: WorkloadSpec, start: dict[tuple[str, str], int] | None = None) -> Assignment:
        """``start``: per (pod set, resource), the index of the first flavor of its group to try."""
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
                first = (start or {}).get((ps.name, res), 0)
                chosen, modes, reasons, borrow, failed, tried = self._find_flavor(wl, ps, requests, res,
                                                                                  assignment.usage, first)
                for r in chosen:
                    assignment.tried[(ps.name, r)] = tried
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

    @property
    def tas_only(self) -> bool:
        """Every flavor of the ClusterQueue a TAS flavor: a pod set that asks no topology is placed
        as unconstrained (Kueue's IsTASOnly)."""
        if self._tas_only is None:
            self._tas_only = all(f in self.flavors and self.flavors[f].topology_name is not None
                                 for rg in self.cq.resource_groups for f in rg.flavors)
        return self._tas_only

    def _check_flavor(self, flavor_name: str, ps: PodSetSpec, rg_resources: tuple[str, ...] = ()) -> str | None:
        flavor = self.flavors.get(flavor_name)
        if flavor is None:
            return f"flavor {flavor_name} not found"
        mismatch = tas_mismatch(ps, flavor, rg_resources, flavor.topology_name is not None and self.tas_only)
        if mismatch is not None:
            return mismatch
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
        first: int = 0,
    ) -> tuple[dict[str, str], dict[str, int], list[str], int, bool, int]:
        """(flavors, modes, reasons, borrowing level, failed, the index the search stopped at or -1
        for the group's last) for the resource group of `res`, trying its flavors from `first`."""
        rg = self.cq.group_for(res)
        assert rg is not None
        group_requests = {r: v for r, v in requests.items() if r in rg.covered_resources}
        reasons: list[str] = []
        best: dict[str, str] = {}
        best_modes: dict[str, int] = {}
        best_mode = (P_NO_FIT, 1 << 30)
        attempted = -1
        for idx in range(first, len(rg.flavors)):
            flavor_name = rg.flavors[idx]
            attempted = idx
            problem = self._check_flavor(flavor_name, ps, rg.covered_resources)
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
        tried = -1 if attempted == len(rg.flavors) - 1 else attempted
        if best_mode[0] == P_NO_FIT or not best:
            return {}, {}, reasons, 0, True, tried
        if best_mode[0] == P_FIT:
            return best, best_modes, [], best_mode[1], False, tried
        return best, best_modes, reasons, best_mode[1], False, tried

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
