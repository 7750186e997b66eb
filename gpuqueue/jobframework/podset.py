"""Pod sets, and what an admission puts on their pods (Kueue's pkg/podset): plain data and pure
functions over the pod templates of any workload kind.

- ``PodSet``: a group of identical pods of a workload (name, count, the pod template as the
  object holds it); its per-pod requests are counted as Kubernetes counts them
  (``gpuqueue.api.podrequests``).
- ``PodSetInfo``: the admitted flavor's nodeSelector and tolerations for one pod set.
- ``merged_template`` / ``scheduling`` / ``with_scheduling``: inject a PodSetInfo into a pod
  template, and record and put back the template's own scheduling fields. gpuqueue's rule, as for
  batch/v1 Jobs since the start: the flavor's node labels overwrite the same keys of the
  template's nodeSelector, and each flavor toleration is appended unless the template already
  has it; the injection always starts from the template's own fields, so a re-admission to
  another flavor leaves nothing of the first one behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpuqueue.api.core import PodTemplateSpec
from gpuqueue.api.podrequests import engine_pod_requests, pod_requests
from gpuqueue.api.quantity import Quantity

SCHEDULING_FIELDS = ("nodeSelector", "tolerations")


def json_copy(obj: Any) -> Any:
    """A deep copy of JSON data (several times faster than copy.deepcopy)."""
    return orjson.loads(orjson.dumps(obj))


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    template: Mapping[str, Any]  # a PodTemplateSpec, as JSON

    def model(self) -> PodTemplateSpec:
        """The template validated (pydantic's ValidationError names the bad field)."""
        return PodTemplateSpec.model_validate(self.template)

    def requests(self) -> dict[str, Quantity]:
        """Per pod, as Kubernetes counts them."""
        return pod_requests(self.model().spec)

    def engine_requests(self) -> dict[str, int]:
        """Per pod, in the quota engine's integer units."""
        return engine_pod_requests(self.model().spec)


def toleration_json(t: Any) -> dict[str, Any]:
    """A toleration as a pod spec holds it, from a dict, a pydantic Toleration or the plain
    ``gpuqueue.api.scheduling.Toleration`` (empty fields left out, as Kubernetes' omitempty)."""
    if isinstance(t, Mapping):
        return {k: v for k, v in t.items() if v not in (None, "")}
    if hasattr(t, "to_dict"):
        return t.to_dict()
    out = {k: getattr(t, k, "") for k in ("key", "operator", "value", "effect")}
    seconds = getattr(t, "toleration_seconds", None)
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    return {k: v for k, v in out.items() if v not in (None, "")}


@dataclass(frozen=True)
class PodSetInfo:
    """What admission puts on one pod set's pods: the flavors' node labels and tolerations."""

    name: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_flavors(cls, name: str, flavors: Iterable[Any]) -> "PodSetInfo":
        """From the admitted flavors of the pod set (anything with ``node_labels`` as pairs or a
        mapping, and ``tolerations``: the quota engine's FlavorSpec, ...), in order."""
        selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for f in flavors:
            selector.update(dict(f.node_labels))
            for t in f.tolerations:
                tol = toleration_json(t)
                if tol not in tolerations:
                    tolerations.append(tol)
        return cls(name, selector, tuple(tolerations))


def scheduling(template: Mapping[str, Any]) -> dict[str, Any]:
    """The template's own scheduling fields (those an injection changes), copied."""
    spec = template.get("spec") or {}
    return {k: json_copy(spec[k]) for k in SCHEDULING_FIELDS if k in spec}


def with_scheduling(template: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``template`` whose scheduling fields are exactly ``fields``."""
    out = json_copy(template)
    spec = out.setdefault("spec", {})
    for k in SCHEDULING_FIELDS:
        if k in fields:
            spec[k] = json_copy(fields[k])
        else:
            spec.pop(k, None)
    return out


def merged_template(template: Mapping[str, Any], info: PodSetInfo) -> dict[str, Any]:
    """A copy of ``template`` with ``info`` injected."""
    out = json_copy(template)
    spec = out.setdefault("spec", {})
    if info.node_selector:
        spec.setdefault("nodeSelector", {}).update(info.node_selector)
    for t in info.tolerations:
        tol = dict(t)
        if tol not in spec.setdefault("tolerations", []):
            spec["tolerations"].append(tol)
    return out
