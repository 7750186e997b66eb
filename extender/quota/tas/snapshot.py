"""Where a pod set's pods can go: Kueue's TAS assignment algorithm (pkg/cache/scheduler/
tas_flavor_snapshot.go, BestFit profile) over the nodes as they are.

Phase 1 counts, for every node, how many of the pod set's pods fit in what it has free, and rolls
the counts up the topology's domains (slices too: at the slice level a domain holds count // size
slices). Phase 2 picks the domain at the requested level that holds them all with the least room to
spare (required: that level only, else the pod set waits; preferred: the level, then the levels
above, then spread over the highest level's domains), and walks down level by level, filling the
domains with the most room first and choosing the tightest fit for the last.

One thing differs from Kueue on purpose: the lowest domains are always the nodes themselves (a
Topology whose lowest level is not kubernetes.io/hostname gets the nodes below it here), so a domain
never counts a pod that fits only in the sum of two nodes' free GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gpuqueue.api.scheduling import Taint, Toleration, untolerated_taint
from gpuqueue.api.topology import HOSTNAME_LABEL, TopologyAssignment
from gpuqueue.extender.quota.tas.request import TopologyRequest

PODS = "pods"
UNLIMITED = 1 << 30  # a pod that asks for nothing a node counts


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """A node of the flavor as admission sees it: what it has free now, engine units (``pods``
    only when its allocatable lists pods), and its hard taints (a cordoned node carries
    node.kubernetes.io/unschedulable:NoSchedule, as the node controller puts it)."""

    name: str
    labels: Mapping[str, str]
    free: Mapping[str, int]
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class PodSetToPlace:
    name: str
    count: int
    per_pod: Mapping[str, int]
    request: TopologyRequest
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Placed:
    assignment: TopologyAssignment
    per_node: Mapping[str, int]  # node name -> pods placed there


@dataclass(slots=True)
class _Domain:
    values: tuple[str, ...]
    children: list["_Domain"] = field(default_factory=list)
    node: str | None = None  # set on the nodes (the lowest domains)
    state: int = 0  # pods that fit, then pods assigned
    slice_state: int = 0

    def order(self) -> tuple:
        # BestFit: most slices first, then the fewest pods, then by name
        return (-self.slice_state, self.state, self.values)


@dataclass(slots=True)
class _Exclusions:
    total: int = 0
    node_selector: int = 0
    taints: dict[str, int] = field(default_factory=dict)
    resources: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        reasons = []
        if self.node_selector:
            reasons.append(f"nodeSelector: {self.node_selector}")
        reasons += [f'taint "{t}": {n}' for t, n in self.taints.items()]
        reasons += [f'resource "{r}": {n}' for r, n in self.resources.items()]
        if not reasons:
            return ""
        return f". Total nodes: {self.total}; excluded: {', '.join(sorted(reasons))}"


def fits(per_pod: Mapping[str, int], free: Mapping[str, int]) -> tuple[int, str | None]:
    """How many such pods fit in ``free``, and the resource that limits it (Kueue's CountIn)."""
    best, limiting = None, None
    for res in sorted(per_pod):
        need = per_pod[res]
        if need <= 0 or (res == PODS and PODS not in free):
            continue
        n = max(free.get(res, 0), 0) // need
        if best is None or n < best:
            best, limiting = n, res
    return (best if best is not None else UNLIMITED), limiting


class TopologySnapshot:
    """One flavor's Topology over its nodes, for one pod set at a time."""

    def __init__(self, name: str, levels: tuple[str, ...], nodes: Sequence[NodeCapacity],
                 flavor: str | None = None) -> None:
        """``flavor``: a placement-aware flavor without a Topology (gpuqueue's own; its messages
        name the flavor): ``levels`` is then the hostname alone."""
        self.name = name
        self.flavor = flavor
        self.levels = levels
        self.by_hostname = levels[-1] == HOSTNAME_LABEL
        # the nodes are the lowest domains: a hostname level of the Topology is theirs, else one is added
        self.tree_levels = levels if self.by_hostname else levels + (HOSTNAME_LABEL,)
        self.nodes = [n for n in nodes if all(k in n.labels for k in levels)]
        self._per_level: list[dict[tuple[str, ...], _Domain]] = [{} for _ in self.tree_levels]
        self._leaves: list[tuple[_Domain, NodeCapacity]] = []
        for n in sorted(self.nodes, key=lambda n: n.name):
            values = tuple(n.labels[k] for k in levels) + (() if self.by_hostname else (n.name,))
            leaf = _Domain(values, node=n.name)
            self._per_level[-1][values] = leaf
            self._leaves.append((leaf, n))
            child = leaf
            for depth in range(len(values) - 1, 0, -1):
                parent = self._per_level[depth - 1].get(values[:depth])
                if parent is None:
                    parent = self._per_level[depth - 1][values[:depth]] = _Domain(values[:depth])
                    parent.children.append(child)
                    child = parent
                else:
                    parent.children.append(child)
                    break

    # -- the algorithm -------------------------------------------------------------------------
    def place(self, ps: PodSetToPlace, flavor_tolerations: tuple[Toleration, ...] = ()) -> Placed | str:
        """Where ``ps``'s pods go, or why they cannot (Kueue's words)."""
        req = ps.request
        level = req.level(self.levels)
        if level is None:
            return "topology level not specified"
        if level not in self.levels:
            return f"no requested topology level: {level}"
        slice_size = 1
        slice_level = self.levels[-1]
        if req.slice_level is not None:
            if req.slice_size is None:
                return "slice topology requested, but slice size not provided"
            slice_size, slice_level = max(req.slice_size, 1), req.slice_level
            if slice_level not in self.levels:
                return f"no requested topology level for slices: {slice_level}"
        level_idx, slice_idx = self.levels.index(level), self.levels.index(slice_level)
        if level_idx > slice_idx:
            return f"podset slice topology {slice_level} is above the podset topology {level}"
        stats = self._fill(ps, flavor_tolerations + ps.tolerations, slice_size, slice_idx)
        slices = ps.count // slice_size
        found = self._fit_level(level_idx, req.required is not None, req.is_unconstrained, slices, slice_size, stats)
        if isinstance(found, str):
            return found
        fit_idx, chosen = found
        chosen = _take_slices(chosen, slices, slice_size)
        for idx in range(fit_idx, len(self.tree_levels) - 1):
            if idx < slice_idx:
                lower = sorted((c for d in chosen for c in d.children), key=_Domain.order)
                chosen = _take_slices(lower, slices, slice_size)
            else:
                chosen = [c for d in chosen for c in _take_pods(sorted(d.children, key=_Domain.order), d.state)]
        per_node = {d.node: d.state for d in chosen if d.state > 0 and d.node is not None}
        return Placed(self._assignment(per_node), per_node)

    def _fill(self, ps: PodSetToPlace, tolerations: tuple[Toleration, ...], slice_size: int,
              slice_idx: int) -> _Exclusions:
        stats = _Exclusions()
        per_pod = {**ps.per_pod, PODS: 1}
        for level in self._per_level:
            for d in level.values():
                d.state = d.slice_state = 0
        for leaf, node in self._leaves:
            stats.total += 1
            taint = untolerated_taint(node.taints, tolerations)
            if taint is not None:
                stats.taints[str(taint)] = stats.taints.get(str(taint), 0) + 1
                continue
            if any(node.labels.get(k) != v for k, v in ps.node_selector):
                stats.node_selector += 1
                continue
            leaf.state, limiting = fits(per_pod, node.free)
            if leaf.state == 0 and limiting is not None:
                stats.resources[limiting] = stats.resources.get(limiting, 0) + 1
        for depth in range(len(self.tree_levels) - 1, -1, -1):
            for d in self._per_level[depth].values():
                if d.children:
                    d.state = sum(c.state for c in d.children)
                if depth == slice_idx:
                    d.slice_state = d.state // slice_size
                elif depth < slice_idx:
                    d.slice_state = sum(c.slice_state for c in d.children)
        return stats

    def _fit_level(self, idx: int, required: bool, unconstrained: bool, slices: int, slice_size: int,
                   stats: _Exclusions) -> tuple[int, list[_Domain]] | str:
        domains = sorted(self._per_level[idx].values(), key=_Domain.order)
        if not domains:
            return f"no topology domains at level: {self.levels[idx]}"
        top = domains[0]
        if top.slice_state >= slices:
            return idx, [_best_fit(domains, slices, slice_state=True)]
        if required:
            return self._no_fit(top.slice_state, slices, slice_size, stats)
        if idx > 0 and not unconstrained:
            return self._fit_level(idx - 1, required, unconstrained, slices, slice_size, stats)
        chosen, remaining = [], slices
        for i, d in enumerate(domains):
            if remaining <= 0 or d.slice_state <= 0:
                break
            if d.slice_state >= remaining:
                d = _best_fit(domains[i:], remaining, slice_state=True)
            chosen.append(d)
            remaining -= d.slice_state
        if remaining > 0:
            return self._no_fit(slices - remaining, slices, slice_size, stats)
        return idx, chosen

    def _no_fit(self, fit: int, total: int, slice_size: int, stats: _Exclusions) -> str:
        unit = "pod" if slice_size == 1 else "slice"
        if self.flavor is not None:
            head = (f'the free capacity of flavor "{self.flavor}" holds only {fit} out of {total} {unit}(s) now'
                    if fit else f'the free capacity of flavor "{self.flavor}" doesn\'t hold any of {total} {unit}(s) now')
            return head + stats.text()
        head = (f'topology "{self.name}" allows to fit only {fit} out of {total} {unit}(s)' if fit
                else f'topology "{self.name}" doesn\'t allow to fit any of {total} {unit}(s)')
        return head + stats.text()

    def _assignment(self, per_node: Mapping[str, int]) -> TopologyAssignment:
        """Kueue's: by hostname alone when the Topology's lowest level is the hostname, else by the
        values of every level, domains in the order of their values."""
        by_values: dict[tuple[str, ...], int] = {}
        for leaf, node in self._leaves:
            n = per_node.get(leaf.node or "", 0)
            if n:
                values = tuple(node.labels[k] for k in self.levels)
                by_values[values] = by_values.get(values, 0) + n
        if self.by_hostname:
            return TopologyAssignment((HOSTNAME_LABEL,), tuple(((v[-1],), c) for v, c in sorted(by_values.items())))
        return TopologyAssignment(self.levels, tuple(sorted(by_values.items())))


def _best_fit(domains: list[_Domain], needed: int, slice_state: bool) -> _Domain:
    """The first domain with the least room that still holds ``needed`` (else the first)."""
    best = domains[0]
    value = (lambda d: d.slice_state) if slice_state else (lambda d: d.state)
    for d in domains:
        if needed <= value(d) < value(best):
            best = d
    return best


def _take_slices(domains: list[_Domain], slices: int, slice_size: int) -> list[_Domain]:
    out, remaining = [], slices
    for i, d in enumerate(domains):
        if d.slice_state >= remaining:
            d = _best_fit(domains[i:], remaining, slice_state=True)
            d.state, d.slice_state = remaining * slice_size, remaining
            out.append(d)
            return out
        d.state = d.slice_state * slice_size
        remaining -= d.slice_state
        out.append(d)
    return out


def _take_pods(domains: list[_Domain], count: int) -> list[_Domain]:
    out, remaining = [], count
    for i, d in enumerate(domains):
        if d.state >= remaining:
            d = _best_fit(domains[i:], remaining, slice_state=False)
            d.state = remaining
            out.append(d)
            return out
        remaining -= d.state
        out.append(d)
    return out
