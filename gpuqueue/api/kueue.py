"""Kueue's quota objects (kueue.x-k8s.io/v1beta2; v1beta1 read where the fields agree)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gpuqueue.api.duration import parse_duration
from gpuqueue.api.quantity import Quantity
from gpuqueue.api.base import KubeModel, LabelSelector, ObjectMeta, QuantityField, Taint, Toleration

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# What Kueue puts on the Workloads it makes (and on quota objects): off once it is done with them.
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"


def _renamed(data: Any, older_names: dict[str, str]) -> Any:
    """An older API version's field names read as the v1beta2 ones."""
    for old, new in older_names.items():
        if isinstance(data, dict) and old in data and new not in data:
            data = dict(data)
            data[new] = data.pop(old)
    return data


class ResourceFlavorSpec(KubeModel):
    node_labels: dict[str, str] = Field(default_factory=dict)
    node_taints: list[Taint] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    topology_name: str | None = None


class ResourceFlavor(KubeModel):
    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: Literal["ResourceFlavor"] = "ResourceFlavor"
    metadata: ObjectMeta
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)


class TopologyLevel(KubeModel):
    node_label: str


class TopologySpec(KubeModel):
    levels: list[TopologyLevel] = Field(default_factory=list)


class Topology(KubeModel):
    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: Literal["Topology"] = "Topology"
    metadata: ObjectMeta
    spec: TopologySpec = Field(default_factory=TopologySpec)

    def level_keys(self) -> tuple[str, ...]:
        return tuple(level.node_label for level in self.spec.levels)


class ResourceQuota(KubeModel):
    name: str
    nominal_quota: QuantityField
    borrowing_limit: QuantityField | None = None
    lending_limit: QuantityField | None = None

    @field_validator("nominal_quota", "borrowing_limit", "lending_limit")
    @classmethod
    def _not_negative(cls, q: Quantity | None) -> Quantity | None:
        if q is not None and q.value < 0:
            raise ValueError(f"must be greater than or equal to 0, got {q}")
        return q


class FlavorQuotas(KubeModel):
    name: str
    resources: list[ResourceQuota]


class ResourceGroup(KubeModel):
    covered_resources: list[str]
    flavors: list[FlavorQuotas]


class BorrowWithinCohort(KubeModel):
    policy: Literal["Never", "LowerPriority"] = "Never"
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(KubeModel):
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    borrow_within_cohort: BorrowWithinCohort | None = None


FungibilityBorrow = Literal["MayStopSearch", "TryNextFlavor"]
FungibilityPreempt = Literal["MayStopSearch", "TryNextFlavor"]


class FlavorFungibility(KubeModel):
    # v1beta2 defaults; v1beta1's Borrow / Preempt are read as MayStopSearch.
    when_can_borrow: FungibilityBorrow = "MayStopSearch"
    when_can_preempt: FungibilityPreempt = "TryNextFlavor"

    @model_validator(mode="before")
    @classmethod
    def _v1beta1_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key, old in (("whenCanBorrow", "Borrow"), ("whenCanPreempt", "Preempt")):
                if data.get(key) == old:
                    data[key] = "MayStopSearch"
        return data


class FairSharing(KubeModel):
    weight: QuantityField | None = None


class ClusterQueueSpec(KubeModel):
    resource_groups: list[ResourceGroup] = Field(default_factory=list)
    cohort_name: str | None = None
    namespace_selector: LabelSelector | None = None
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    preemption: ClusterQueuePreemption = Field(default_factory=ClusterQueuePreemption)
    flavor_fungibility: FlavorFungibility = Field(default_factory=FlavorFungibility)
    fair_sharing: FairSharing | None = None
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = "None"
    older_names: ClassVar[dict[str, str]] = {"cohort": "cohortName"}  # v1beta1

    @model_validator(mode="before")
    @classmethod
    def _v1beta1_cohort(cls, data: Any) -> Any:
        return _renamed(data, cls.older_names)


class ClusterQueue(KubeModel):
    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: Literal["ClusterQueue"] = "ClusterQueue"
    metadata: ObjectMeta
    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)


class CohortSpec(KubeModel):
    parent_name: str | None = None
    resource_groups: list[ResourceGroup] = Field(default_factory=list)
    fair_sharing: FairSharing | None = None
    older_names: ClassVar[dict[str, str]] = {"parent": "parentName"}  # v1alpha1

    @model_validator(mode="before")
    @classmethod
    def _v1alpha1_parent(cls, data: Any) -> Any:
        return _renamed(data, cls.older_names)


class Cohort(KubeModel):
    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: Literal["Cohort"] = "Cohort"
    metadata: ObjectMeta
    spec: CohortSpec = Field(default_factory=CohortSpec)


class LocalQueueSpec(KubeModel):
    cluster_queue: str
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = "None"


class LocalQueue(KubeModel):
    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: Literal["LocalQueue"] = "LocalQueue"
    metadata: ObjectMeta
    spec: LocalQueueSpec


class WorkloadPriorityClass(KubeModel):
    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: Literal["WorkloadPriorityClass"] = "WorkloadPriorityClass"
    metadata: ObjectMeta
    value: int
    description: str | None = None


class FairSharingConfig(KubeModel):
    preemption_strategies: list[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]] = Field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    )
    # gpuqueue extensions, off unless set (Kueue-compatible behaviour is the default):
    # a ClusterQueue's share also counts its recent borrowing, decayed with this half-life;
    usage_half_life_time: str | None = None
    # a borrower admitted less than this long ago is not preempted to even out shares.
    minimum_admitted_time: str | None = None

    @field_validator("usage_half_life_time", "minimum_admitted_time")
    @classmethod
    def _duration(cls, v: str | None) -> str | None:
        if v is not None:
            seconds = parse_duration(v)
            if seconds < 0:
                raise ValueError(f"must not be negative, got {v!r}")
        return v


class Configuration(KubeModel):
    """config.kueue.x-k8s.io/v1beta2 Configuration: the fields gpuqueue honours."""

    api_version: str = "config.kueue.x-k8s.io/v1beta2"
    kind: Literal["Configuration"] = "Configuration"
    fair_sharing: FairSharingConfig | None = None
    manage_jobs_without_queue_name: bool = False
    managed_jobs_namespace_selector: LabelSelector | None = None
    # which workload kinds are queued: read by gpuqueue.jobframework.registry.IntegrationsConfig
    integrations: dict[str, Any] | None = None
    # Kueue's waitForPodsReady: read by gpuqueue.extender.controller.podsready.pods_ready
    wait_for_pods_ready: dict[str, Any] | None = None
