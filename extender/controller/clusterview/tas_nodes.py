"""The engine's view of the nodes for admission that places pods (TAS, placement-aware flavors):
read from the scheduler extender's node cache, the same one /filter answers from, so admission
and placement count the same pods - bound ones and the ones the extender just pointed at a node."""

from __future__ import annotations

from typing import Mapping, Protocol

from gpuqueue.api.scheduling import UNSCHEDULABLE_TAINT
from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.placement.model import GPU_RESOURCE, FlavorSelector
from gpuqueue.extender.quota.model import FlavorSpec, WorkloadSpec
from gpuqueue.extender.quota.tas.snapshot import PODS, NodeCapacity


class HasNodes(Protocol):
    nodes: NodeCache  # the extender's ClusterView; the simulator's NodePlacer


class NodeCapacities:
    def __init__(self, view: HasNodes) -> None:
        self.view = view

    def nodes(self, flavor: FlavorSpec) -> list[NodeCapacity]:
        cache = self.view.nodes
        cache.expire()
        out = []
        for name in sorted(cache.members(FlavorSelector.of(flavor.name, dict(flavor.node_labels)))):
            st = cache.states[name]
            info = st.info
            if info is None or not info.ready:  # a node that is not Ready is not offered (Kueue's TAS cache)
                continue
            free = dict(info.allocatable)
            free[GPU_RESOURCE] = info.gpus - st.gpus_taken
            for taken in (st.used, st.reserved):
                for res, v in taken.items():
                    if res in free:
                        free[res] -= v
            if PODS in free:
                free[PODS] -= st.pods
            taints = info.hard_taints + ((UNSCHEDULABLE_TAINT,) if info.unschedulable else ())
            out.append(NodeCapacity(name, info.labels, free, taints))
        return out

    def placed(self, wl: WorkloadSpec, pod_set: str) -> Mapping[str, int]:
        """Counted as the extender counts them: a batch/v1 Job's pods under the Job's uid, every other
        kind's under ``<workload namespace/name>/<pod set>`` (scheduler/ownership.py)."""
        cache = self.view.nodes
        return cache.job_nodes(wl.uid) or cache.job_nodes(f"{wl.key}/{pod_set}")
