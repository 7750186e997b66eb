"""Common pieces of the Kubernetes object models: camelCase aliases, metadata, selectors."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from gpuqueue.api.quantity import Quantity


def _parse_quantity(raw: Any) -> Quantity:
    return Quantity.parse(raw)


QuantityField = Annotated[Quantity, BeforeValidator(_parse_quantity), PlainSerializer(str, return_type=str)]


class KubeModel(BaseModel):
    """Kubernetes JSON: camelCase keys, unknown fields kept out of the way (not rejected)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=False)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class OwnerReference(KubeModel):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(KubeModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list)

    def __init__(self, **data: Any) -> None:
        # `labels: null` is valid YAML/JSON and means no labels.
        for key in ("labels", "annotations", "ownerReferences", "owner_references"):
            if key in data and data[key] is None:
                data.pop(key)
        super().__init__(**data)


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(KubeModel):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class Taint(KubeModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    def __str__(self) -> str:
        # apimachinery's Taint.ToString: key=value:effect, or key:effect without a value
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


class Toleration(KubeModel):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """core/v1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        op = self.operator or "Equal"
        if op == "Exists":
            return True
        if not self.key:  # an empty key is only valid with Exists
            return False
        return (self.value or "") == (taint.value or "")


def untolerated_taint(taints: list[Taint], tolerations: list[Toleration]) -> Taint | None:
    """First NoSchedule/NoExecute taint no toleration covers (kube's FindMatchingUntoleratedTaint)."""
    for taint in taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None
