"""Admission against the nodes: does a workload the quota admits also fit where its flavor's nodes
have room now? For TAS flavors (a ResourceFlavor with a topologyName) the answer is Kueue's
topology assignment; for gpuqueue's placement-aware flavors, that every pod fits on some node.

What the nodes have free comes from the caller (``NodeSource``: allocatable less what bound pods and
pods the extender pointed at a node take). On top of that, every admitted workload of the flavor
still holds what its pods that have no node yet will take: where its topology assignment put them,
or, without one, wherever they fit best. So two workloads admitted one after the other never count
on the same free GPUs, whether or not their pods exist yet.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol, Sequence

from gpuqueue.api.topology import HOSTNAME_LABEL, TopologyAssignment
from gpuqueue.extender.quota.model import Admission, FlavorSpec, PodSetSpec, WorkloadSpec
from gpuqueue.extender.quota.tas.request import IMPLIED
from gpuqueue.extender.quota.tas.snapshot import NodeCapacity, Placed, PodSetToPlace, TopologySnapshot, fits, PODS


class NodeSource(Protocol):
    def nodes(self, flavor: FlavorSpec) -> Sequence[NodeCapacity]:
        """The flavor's schedulable, ready nodes (its nodeLabels), with what they have free."""

    def placed(self, wl: WorkloadSpec, pod_set: str) -> Mapping[str, int]:
        """Node -> pods of this pod set bound or being bound there."""


class _Free:
    """The flavor's nodes' free capacity, taken from as admitted workloads are accounted."""

    def __init__(self, nodes: Sequence[NodeCapacity]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.free = {n.name: dict(n.free) for n in nodes}
        self._domains: dict[tuple[str, ...], dict[tuple, list[str]]] = {}  # levels -> values -> node names

    def take(self, node: str, per_pod: Mapping[str, int], pods: int) -> None:
        free = self.free.get(node)
        if free is None:
            return
        for res, v in {**per_pod, PODS: 1}.items():
            if res in free:
                free[res] -= v * pods

    def best_fit(self, names: Iterable[str], per_pod: Mapping[str, int], pods: int) -> None:
        """Pods with no node yet and no assignment: where they fit with the least room to spare."""
        for _ in range(pods):
            options = [(fits({**per_pod, PODS: 1}, self.free[n])[0], n) for n in names if n in self.free]
            options = [o for o in options if o[0] > 0]
            if not options:
                return
            self.take(min(options)[1], per_pod, 1)

    def capacities(self) -> list[NodeCapacity]:
        return [NodeCapacity(n.name, n.labels, self.free[n.name], n.taints) for n in self.nodes.values()]

    def in_domain(self, levels: tuple[str, ...], values: tuple[str, ...]) -> list[str]:
        index = self._domains.get(levels)
        if index is None:  # once per set of levels: asked once per admitted workload's domain
            index = self._domains[levels] = {}
            for n, node in self.nodes.items():
                key = ((node.labels.get(HOSTNAME_LABEL, n),) if levels == (HOSTNAME_LABEL,)
                       else tuple(node.labels.get(k) for k in levels))
                index.setdefault(key, []).append(n)
        return index.get(tuple(values), [])


def _account(free: _Free, flavor: str, admitted: Iterable[tuple[WorkloadSpec, Admission]], source: NodeSource,
             released: Iterable[tuple[WorkloadSpec, Admission]]) -> None:
    for wl, admission in released:  # preemption victims: what their pods hold on the nodes is counted free
        for ps in _on_flavor(wl, admission, flavor):
            for node, n in source.placed(wl, ps.name).items():
                free.take(node, ps.per_pod, -n)
    for wl, admission in admitted:
        for ps in _on_flavor(wl, admission, flavor):
            placed = source.placed(wl, ps.name)
            ta: TopologyAssignment | None = admission.topology.get(ps.name)
            if ta is None:
                waiting = admission.counts.get(ps.name, ps.count) - sum(placed.values())
                free.best_fit(sorted(free.nodes), ps.per_pod, waiting)
                continue
            for values, count in ta.domains:
                names = free.in_domain(ta.levels, values)
                waiting = count - sum(placed.get(n, 0) for n in names)
                free.best_fit(names, ps.per_pod, waiting)


def _on_flavor(wl: WorkloadSpec, admission: Admission, flavor: str) -> list[PodSetSpec]:
    return [ps for ps in wl.pod_sets if flavor in admission.flavors_of(ps.name).values()]


def place(wl: WorkloadSpec, flavors_by_pod_set: Mapping[str, Mapping[str, str]], flavor_specs: Mapping[str, FlavorSpec],
          admitted: Iterable[tuple[WorkloadSpec, Admission]], source: NodeSource,
          released: Sequence[tuple[WorkloadSpec, Admission]] = (),
          used: set[str] | None = None) -> tuple[dict[str, TopologyAssignment], str | None]:
    """The topology assignments of ``wl``'s pod sets on TAS flavors, or the first pod set that
    does not fit and why (a message as Kueue's: ``couldn't assign flavors to pod set ...``).
    ``released``: admitted workloads to count as gone (preemption victims being tried), pods and
    all; ``admitted`` must not hold them. ``used``: given, gets the nodes the pods would take."""
    admitted = list(admitted)
    frees: dict[str, _Free] = {}
    out: dict[str, TopologyAssignment] = {}
    for ps in wl.pod_sets:
        names = sorted(set(flavors_by_pod_set.get(ps.name, {}).values()))
        # (a pod set that asks for a topology was given a TAS flavor: flavorassigner.tas_mismatch)
        placing = [flavor_specs[f] for f in names if f in flavor_specs and flavor_specs[f].needs_placement]
        for spec in placing:
            free = frees.get(spec.name)
            if free is None:
                free = frees[spec.name] = _Free(source.nodes(spec))
                _account(free, spec.name, admitted, source, released)
            result = _place_pod_set(ps, spec, free)
            if isinstance(result, str):
                return {}, f"couldn't assign flavors to pod set {ps.name}: {result}"
            for node, n in result.per_node.items():
                free.take(node, ps.per_pod, n)
            if used is not None:
                used.update(result.per_node)
            if spec.topology_name is not None:
                out[ps.name] = result.assignment
    return out, None


def _place_pod_set(ps: PodSetSpec, spec: FlavorSpec, free: _Free) -> Placed | str:
    if spec.topology_name is None:
        snap = TopologySnapshot(spec.name, (HOSTNAME_LABEL,), _with_hostname(free.capacities()), flavor=spec.name)
    elif spec.topology_levels is None:
        return f'topology "{spec.topology_name}" doesn\'t exist'
    else:
        snap = TopologySnapshot(spec.topology_name, spec.topology_levels, free.capacities())
    request = ps.topology if ps.topology is not None and spec.topology_name is not None else IMPLIED
    return snap.place(PodSetToPlace(ps.name, ps.count, ps.per_pod, request, ps.tolerations, ps.node_selector),
                      spec.tolerations)


def _with_hostname(nodes: list[NodeCapacity]) -> list[NodeCapacity]:
    """A node whose hostname label is missing is still a node: named by its name."""
    return [n if HOSTNAME_LABEL in n.labels else NodeCapacity(n.name, {**n.labels, HOSTNAME_LABEL: n.name}, n.free, n.taints)
            for n in nodes]
