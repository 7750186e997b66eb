"""The quota engine's own data: small immutable specs and the workloads it schedules.

Amounts are integers in Kueue's units (milli-cpu, whole units of everything else);
see gpuqueue.api.quantity.to_engine_int.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from gpuqueue.api.scheduling import Taint, Toleration

FlavorResource = tuple[str, str]  # (flavor, resource)

PreemptionPolicy = Literal["Never", "LowerPriority", "Any", "LowerOrNewerEqualPriority"]


@dataclass(frozen=True, slots=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class ResourceGroupSpec:
    covered_resources: tuple[str, ...]
    flavors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FlavorSpec:
    name: str
    node_labels: tuple[tuple[str, str], ...] = ()
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # Topology Aware Scheduling: the flavor's Topology and its levels (None: the Topology is not
    # known yet); placement_aware: gpuqueue's own check that the flavor's nodes hold the pods now
    topology_name: str | None = None
    topology_levels: tuple[str, ...] | None = None
    placement_aware: bool = False

    @property
    def needs_placement(self) -> bool:
        return self.topology_name is not None or self.placement_aware


@dataclass(frozen=True, slots=True)
class PreemptionSpec:
    reclaim_within_cohort: str = "Never"
    within_cluster_queue: str = "Never"
    borrow_within_cohort: str = "Never"
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterQueueSpec:
    name: str
    cohort: str | None = None
    resource_groups: tuple[ResourceGroupSpec, ...] = ()
    quotas: dict[FlavorResource, Quota] = field(default_factory=dict)
    namespace_selector: Mapping[str, Any] | None = None  # a LabelSelector; None selects nothing
    queueing_strategy: str = "BestEffortFIFO"
    preemption: PreemptionSpec = PreemptionSpec()
    when_can_borrow: str = "MayStopSearch"
    when_can_preempt: str = "TryNextFlavor"
    fair_weight_milli: int = 1000
    stop_policy: str = "None"

    def group_for(self, resource: str) -> ResourceGroupSpec | None:
        for rg in self.resource_groups:
            if resource in rg.covered_resources:
                return rg
        return None


@dataclass(frozen=True, slots=True)
class CohortSpec:
    name: str
    parent: str | None = None
    quotas: dict[FlavorResource, Quota] = field(default_factory=dict)
    fair_weight_milli: int = 1000


@dataclass(frozen=True, slots=True)
class LocalQueueSpec:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: str = "None"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodSetSpec:
    name: str
    count: int
    per_pod: dict[str, int]  # per-pod requests, engine units
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    # required node affinity: OR of terms, each an AND of (key, operator, values)
    affinity_terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    topology: Any = None  # a tas.request.TopologyRequest, from the template's annotations; None: none asked

    def total(self) -> dict[str, int]:
        return {r: v * self.count for r, v in self.per_pod.items()}

    def fingerprint(self) -> tuple:
        """Everything about the pod set that the engine's decisions depend on, hashable."""
        return (
            self.name,
            self.count,
            tuple(sorted(self.per_pod.items())),
            tuple((t.key, t.operator, t.value, t.effect) for t in self.tolerations),
            self.node_selector,
            self.affinity_terms,
            self.topology,
        )


@dataclass(slots=True)
class WorkloadSpec:
    """What the engine needs to know of a Workload (one per Job)."""

    key: str  # namespace/name of the Job
    namespace: str
    queue_name: str  # the LocalQueue
    pod_sets: tuple[PodSetSpec, ...]
    priority: int = 0
    created: float = 0.0  # creation time (seconds); FIFO order
    seq: int = 0  # tie-break for equal creation times: submission order
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Admission:
    cluster_queue: str
    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    usage: dict[FlavorResource, int]  # every pod set together
    counts: dict[str, int]
    borrowing: bool
    # pod set -> resource -> what its pods take together (Kueue's podSetAssignments[].resourceUsage);
    # empty when not known (an admission read back from a status written without it)
    pod_set_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    # pod set -> where its pods go (gpuqueue.api.topology.TopologyAssignment), for TAS flavors
    topology: dict[str, Any] = field(default_factory=dict)

    def flavors_of(self, pod_set: str = "main") -> dict[str, str]:
        return self.flavors.get(pod_set, {})

    def usage_of(self, pod_set: str) -> dict[str, int]:
        """What one pod set's pods take, by resource. Without a per-pod-set record, the usage of
        the flavors it was given (exact for a single pod set)."""
        if pod_set in self.pod_set_usage:
            return dict(self.pod_set_usage[pod_set])
        flavors = self.flavors_of(pod_set)
        return {res: v for (flavor, res), v in self.usage.items() if flavors.get(res) == flavor}
