"""Preemption for room on the nodes: the nodes asked, for each set of victims a preemption search
tries, whether the preemptor's pods fit once those victims are gone (Kueue's preemption with TAS).

A search asks many times over the same nodes: what they hold is read once per search
(``CachedNodes``), and the search is told which victims are away from the room it found
(``Room.outside``), so it can give those back together instead of one placement each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from gpuqueue.api.topology import HOSTNAME_LABEL
from gpuqueue.extender.quota.model import Admission, FlavorSpec, WorkloadSpec
from gpuqueue.extender.quota.tas.capacity import NodeSource
from gpuqueue.extender.quota.tas.snapshot import NodeCapacity

if TYPE_CHECKING:
    from gpuqueue.extender.quota.state import AdmittedWorkload

# victims -> (where the preemptor's pods would go, or None when they do not fit)
Place = Callable[[Sequence["AdmittedWorkload"]], "set[str] | None"]


class CachedNodes:
    """A NodeSource read once: nothing changes on the nodes while one engine pass searches."""

    def __init__(self, source: NodeSource) -> None:
        self.source = source
        self._nodes: dict[str, Sequence[NodeCapacity]] = {}
        self._placed: dict[tuple[str, str], Mapping[str, int]] = {}
        self._domains: dict[tuple[str, tuple[str, ...]], dict[tuple, list[str]]] = {}

    def nodes(self, flavor: FlavorSpec) -> Sequence[NodeCapacity]:
        got = self._nodes.get(flavor.name)
        if got is None:
            got = self._nodes[flavor.name] = self.source.nodes(flavor)
        return got

    def placed(self, wl: WorkloadSpec, pod_set: str) -> Mapping[str, int]:
        got = self._placed.get((wl.key, pod_set))
        if got is None:
            got = self._placed[(wl.key, pod_set)] = self.source.placed(wl, pod_set)
        return got

    def held(self, wl: WorkloadSpec, admission: Admission, flavor: FlavorSpec) -> set[str]:
        """The flavor's nodes an admitted workload's pods are on, or will go to (its assignment)."""
        out: set[str] = set()
        for ps in wl.pod_sets:
            if flavor.name not in admission.flavors_of(ps.name).values():
                continue
            out.update(self.placed(wl, ps.name))
            ta = admission.topology.get(ps.name)
            if ta is not None:
                index = self._domain_index(flavor, ta.levels)
                for values, _count in ta.domains:
                    out.update(index.get(tuple(values), ()))
        return out

    def _domain_index(self, flavor: FlavorSpec, levels: tuple[str, ...]) -> dict[tuple, list[str]]:
        key = (flavor.name, levels)
        index = self._domains.get(key)
        if index is None:
            index = self._domains[key] = {}
            for node in self.nodes(flavor):
                values = tuple(node.labels.get(k, node.name if k == HOSTNAME_LABEL else None) for k in levels)
                index.setdefault(values, []).append(node.name)
        return index


class Room:
    """`place(victims)`: the nodes the preemptor's pods would take with those victims gone (None:
    they do not fit); `touches(victim)`: the nodes a victim's pods hold or will take."""

    def __init__(self, place: Place, touches: Callable[["AdmittedWorkload"], set[str]]) -> None:
        self._place = place
        self._touches = touches
        self._found: set[str] | None = None  # the nodes of the last placement that fitted

    def fits(self, victims: Sequence["AdmittedWorkload"]) -> bool:
        used = self._place(victims)
        if used is not None:
            self._found = used
        return used is not None

    def outside(self, victims: Sequence["AdmittedWorkload"]) -> set[str]:
        """The keys of the victims whose pods are nowhere on the room last found."""
        if self._found is None:
            return set()
        return {v.spec.key for v in victims if self._touches(v).isdisjoint(self._found)}
