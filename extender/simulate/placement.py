"""Where the simulator puts an admitted job's pods: the extender's own filter and score
code (extender.placement) over the scenario's Nodes, holding a pod set admitted with a topology
assignment to its domains as the extender's /filter does (extender.placement.topology). Its node
cache is also what admission for TAS and placement-aware flavors reads (controller.tas_nodes)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.placement.kube import node_info
from gpuqueue.extender.placement.model import GPU_RESOURCE, FlavorSelector, PodRequest, Toleration
from gpuqueue.extender.placement.place import place
from gpuqueue.extender.placement.topology import outside_assignment
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import Admission
from gpuqueue.api import core


@dataclass(frozen=True)
class PlacementResult:
    nodes: dict[str, int] | None
    message: str | None = None


class NodePlacer:
    def __init__(self) -> None:
        # The simulator binds pods at once: nothing is ever in flight long enough to expire.
        self.nodes = NodeCache(clock=lambda: 0.0)
        self.placed: dict[str, list[str]] = {}

    def set_node(self, node: core.Node) -> None:
        self.nodes.upsert_node(node_info(node))

    def remove_node(self, name: str) -> None:
        self.nodes.remove_node(name)

    def place(self, key: str, engine: QuotaEngine, admission: Admission) -> PlacementResult:
        held = engine.state.admitted[key]
        nodes: dict[str, int] = {}
        uids: list[str] = []
        for ps in held.spec.pod_sets:
            flavor_names = sorted(set(admission.flavors_of(ps.name).values()))
            labels: dict[str, str] = {}
            flavor_tolerations: list[Toleration] = []
            for name in flavor_names:
                spec = engine.state.flavors.get(name)
                if spec is not None:
                    labels.update(dict(spec.node_labels))
                    flavor_tolerations.extend(spec.tolerations)
            selector = FlavorSelector.of("+".join(flavor_names), labels, tuple(flavor_tolerations))
            per_pod = dict(ps.per_pod)
            gpus = per_pod.pop(GPU_RESOURCE, 0)
            # counted per pod set, under the key the extender counts a pod set's pods by
            # (NodeCapacities.placed), so admission sees these pods as placed
            job_key = f"{key}/{ps.name}"
            pod = PodRequest(job_key, gpus, per_pod, ps.tolerations, selector, job_key)
            ta = admission.topology.get(ps.name)
            refuse = None if ta is None else (
                lambda uid, names, ta=ta, job_key=job_key, ps=ps:
                outside_assignment(ta, names, self.nodes, job_key, uid, f"pod set {ps.name} of workload {key}"))
            result = place(pod, admission.counts.get(ps.name, ps.count), self.nodes, refuse=refuse)
            if result.unschedulable:
                for uid in uids:
                    self.nodes.release(uid)
                return PlacementResult(None, result.message)
            uids.extend(result.pod_uids)
            for node, n in result.nodes.items():
                nodes[node] = nodes.get(node, 0) + n
        self.placed[key] = uids
        return PlacementResult(dict(sorted(nodes.items())))

    def release(self, key: str) -> None:
        for uid in self.placed.pop(key, []):
            self.nodes.release(uid)
