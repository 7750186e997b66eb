"""Common pieces of the Kubernetes object models: camelCase aliases, metadata, selectors."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, field_validator
from pydantic.alias_generators import to_camel

from gpuqueue.api import scheduling
from gpuqueue.api.quantity import Quantity


@lru_cache(maxsize=4096, typed=True)  # typed: True must not come back as the quantity 1
def _parse_cached(raw: str | int) -> Quantity:
    return Quantity.parse(raw)


def _parse_quantity(raw: Any) -> Quantity:
    # Requests repeat the same few strings ("1", "4Gi"); Fraction arithmetic is the slow part.
    # Only short ones are remembered: a hostile body must not fill the cache with megabytes.
    if (type(raw) is str and len(raw) <= 32) or (type(raw) in (int, bool) and -(10**18) < raw < 10**18):
        return _parse_cached(raw)
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

    @field_validator("labels", "annotations", "owner_references", mode="before")
    @classmethod
    def _null_is_empty(cls, v: Any, info: Any) -> Any:
        # `labels: null` is valid YAML/JSON and means no labels.
        if v is None:
            return [] if info.field_name == "owner_references" else {}
        return v


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

    def to_spec(self) -> scheduling.Taint:
        return scheduling.Taint(self.key, self.value or "", self.effect)

    def __str__(self) -> str:
        return str(self.to_spec())


class Toleration(KubeModel):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def to_spec(self) -> scheduling.Toleration:
        """The matching rules live in ``gpuqueue.api.scheduling``."""
        return scheduling.Toleration(self.key or "", self.operator or "", self.value or "", self.effect or "")
