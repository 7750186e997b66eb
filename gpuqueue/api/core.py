"""The parts of core/v1, batch/v1 and scheduling.k8s.io/v1 objects that gpuqueue reads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from gpuqueue.api.base import KubeModel, LabelSelector, ObjectMeta, QuantityField, Taint, Toleration
from gpuqueue.api.quantity import Quantity


class ResourceRequirements(KubeModel):
    requests: dict[str, QuantityField] = Field(default_factory=dict)
    limits: dict[str, QuantityField] = Field(default_factory=dict)

    @field_validator("requests", "limits", mode="before")
    @classmethod
    def _null_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v


class Container(KubeModel):
    name: str = ""
    image: str | None = None
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    restart_policy: str | None = None  # "Always" marks a sidecar init container

    def effective_requests(self) -> dict[str, Quantity]:
        """A limit stands in for a missing request (API server defaulting)."""
        out = dict(self.resources.limits)
        out.update(self.resources.requests)
        return out


class NodeSelectorRequirement(KubeModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(KubeModel):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)


class NodeSelector(KubeModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)


class NodeAffinity(KubeModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(KubeModel):
    node_affinity: NodeAffinity | None = None


class PodSpec(KubeModel):
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list)
    overhead: dict[str, QuantityField] = Field(default_factory=dict)
    priority_class_name: str | None = None
    priority: int | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: Affinity | None = None
    node_name: str | None = None

    @field_validator("init_containers", "tolerations", "overhead", "node_selector", mode="before")
    @classmethod
    def _null_is_empty(cls, v: Any, info: Any) -> Any:
        if v is None:
            return {} if info.field_name in ("overhead", "node_selector") else []
        return v


class PodTemplateSpec(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class JobSpec(KubeModel):
    parallelism: int | None = Field(default=None, ge=0)
    completions: int | None = Field(default=None, ge=0)
    suspend: bool | None = None
    template: PodTemplateSpec


class JobCondition(KubeModel):
    type: str
    status: str


class JobStatus(KubeModel):
    conditions: list[JobCondition] = Field(default_factory=list)
    start_time: str | None = None
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None


class Job(KubeModel):
    api_version: str = "batch/v1"
    kind: Literal["Job"] = "Job"
    metadata: ObjectMeta
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)

    def pod_count(self) -> int:
        """parallelism (default 1), or completions when smaller: Kueue's pod set count for a Job."""
        count = 1 if self.spec.parallelism is None else self.spec.parallelism
        if self.spec.completions is not None:
            count = min(count, self.spec.completions)
        return count


class Namespace(KubeModel):
    api_version: str = "v1"
    kind: Literal["Namespace"] = "Namespace"
    metadata: ObjectMeta


class NodeSpec(KubeModel):
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False


class NodeCondition(KubeModel):
    type: str = ""
    status: str = ""


class NodeStatus(KubeModel):
    allocatable: dict[str, QuantityField] = Field(default_factory=dict)
    capacity: dict[str, QuantityField] = Field(default_factory=dict)
    conditions: list[NodeCondition] = Field(default_factory=list)

    def ready(self) -> bool:
        """Its Ready condition is True; a node that reports no Ready condition at all counts as ready."""
        return all(c.status == "True" for c in self.conditions if c.type == "Ready")


class Node(KubeModel):
    api_version: str = "v1"
    kind: Literal["Node"] = "Node"
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


class PodStatus(KubeModel):
    phase: str | None = None
    nominated_node_name: str | None = None


class Pod(KubeModel):
    api_version: str = "v1"
    kind: Literal["Pod"] = "Pod"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class PriorityClass(KubeModel):
    api_version: str = "scheduling.k8s.io/v1"
    kind: Literal["PriorityClass"] = "PriorityClass"
    metadata: ObjectMeta
    value: int
    global_default: bool = False


__all__ = [
    "Affinity",
    "Container",
    "Job",
    "LabelSelector",
    "Namespace",
    "Node",
    "Pod",
    "PodSpec",
    "PodStatus",
    "PodTemplateSpec",
    "PriorityClass",
]
