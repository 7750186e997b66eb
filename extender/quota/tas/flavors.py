"""Which Topology each TAS ResourceFlavor stands on: a flavor's spec carries its Topology's levels,
so a Topology that comes, changes or goes changes the specs of the flavors that name it. Kept by
whoever feeds the engine the quota objects (the controller, the simulator)."""

from __future__ import annotations

from gpuqueue.api import kueue
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota.model import FlavorSpec


class TopologyFlavors:
    def __init__(self) -> None:
        self.topologies: dict[str, tuple[str, ...]] = {}  # Topology name -> its levels' node labels
        self._flavors: dict[str, kueue.ResourceFlavor] = {}  # the flavors that name a Topology

    def flavor(self, obj: kueue.ResourceFlavor) -> FlavorSpec:
        """The engine's spec of a ResourceFlavor that is created or changed."""
        name = obj.metadata.name or ""
        if obj.spec.topology_name:
            self._flavors[name] = obj
        else:
            self._flavors.pop(name, None)
        return convert.flavor_spec(obj, self.topologies)

    def remove_flavor(self, name: str) -> None:
        self._flavors.pop(name, None)

    def topology(self, name: str, levels: tuple[str, ...] | None) -> list[FlavorSpec]:
        """A Topology set (``levels``) or deleted (None): the specs of the flavors naming it, anew."""
        if levels is None:
            self.topologies.pop(name, None)
        else:
            self.topologies[name] = levels
        return [convert.flavor_spec(f, self.topologies) for f in self._flavors.values() if f.spec.topology_name == name]
