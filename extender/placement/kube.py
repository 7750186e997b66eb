"""From Kubernetes objects (as kube-scheduler or a scenario sends them) to placement's model.

The pydantic models are partial: only the fields placement reads, everything else ignored.
Quantities become Kueue's integers (``to_engine_int``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Mapping, Union

from pydantic import BaseModel, ConfigDict, Field

from gpuqueue.api.quantity import Quantity, QuantityError, to_engine_int

from extender.placement.model import GPU_RESOURCE, NodeInfo, Taint, Toleration

QuantityValue = Union[str, int, float]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class OwnerReference(_Model):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_Model):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] | None = None
    ownerReferences: list[OwnerReference] | None = None


class KubeToleration(_Model):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    tolerationSeconds: int | None = None


class KubeTaint(_Model):
    key: str
    value: str | None = None
    effect: str


class ResourceRequirements(_Model):
    requests: dict[str, QuantityValue] | None = None
    limits: dict[str, QuantityValue] | None = None


class Container(_Model):
    name: str = ""
    resources: ResourceRequirements | None = None
    restartPolicy: str | None = None  # "Always" on an init container makes it a sidecar


class PodSpec(_Model):
    containers: list[Container] = Field(default_factory=list)
    initContainers: list[Container] | None = None
    overhead: dict[str, QuantityValue] | None = None
    tolerations: list[KubeToleration] | None = None
    nodeName: str | None = None


class Pod(_Model):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class NodeSpec(_Model):
    taints: list[KubeTaint] | None = None
    unschedulable: bool | None = None


class NodeStatus(_Model):
    allocatable: dict[str, QuantityValue] | None = None
    capacity: dict[str, QuantityValue] | None = None


class Node(_Model):
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


class InvalidObject(ValueError):
    """A Kubernetes object placement cannot use; the message names the field."""


@lru_cache(maxsize=4096)
def quantity_int(resource: str, raw: QuantityValue) -> int:
    try:
        return to_engine_int(resource, Quantity.parse(raw))
    except QuantityError as exc:
        raise InvalidObject(f"{resource}: {exc}") from None


def _amounts(where: str, values: Mapping[str, QuantityValue] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for r, raw in (values or {}).items():
        try:
            out[r] = quantity_int(r, raw)
        except InvalidObject as exc:
            raise InvalidObject(f"{where}.{exc}") from None
    return out


def _container_requests(where: str, c: Container) -> dict[str, int]:
    res = c.resources
    if res is None:
        return {}
    req = _amounts(f"{where}.resources.requests", res.requests)
    # A limit stands in for a missing request, as the API server defaults it.
    for r, v in _amounts(f"{where}.resources.limits", res.limits).items():
        req.setdefault(r, v)
    return req


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for r, v in more.items():
        into[r] = into.get(r, 0) + v


def pod_requests(spec: PodSpec) -> dict[str, int]:
    """Effective requests of one pod, as kube-scheduler computes them: the larger of the app
    containers plus sidecars and of each init container with the sidecars started before it,
    plus the pod overhead."""
    total: dict[str, int] = {}
    for i, c in enumerate(spec.containers):
        _add(total, _container_requests(f"spec.containers[{i}]", c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(spec.initContainers or ()):
        req = _container_requests(f"spec.initContainers[{i}]", c)
        if c.restartPolicy == "Always":
            _add(sidecars, req)
            step = dict(sidecars)
        else:
            step = dict(sidecars)
            _add(step, req)
        for r, v in step.items():
            init_peak[r] = max(init_peak.get(r, 0), v)
    _add(total, sidecars)
    for r, v in init_peak.items():
        total[r] = max(total.get(r, 0), v)
    _add(total, _amounts("spec.overhead", spec.overhead))
    return {r: v for r, v in total.items() if v}


def split_gpus(requests: Mapping[str, int]) -> tuple[int, dict[str, int]]:
    return requests.get(GPU_RESOURCE, 0), {r: v for r, v in requests.items() if r != GPU_RESOURCE}


def toleration(t: KubeToleration) -> Toleration:
    return Toleration(t.key or "", t.operator or "", t.value or "", t.effect or "")


def tolerations(items: Iterable[KubeToleration] | None) -> tuple[Toleration, ...]:
    return tuple(toleration(t) for t in items or ())


def node_info(node: Node) -> NodeInfo:
    name = node.metadata.name
    if not name:
        raise InvalidObject("Node without metadata.name")
    try:
        alloc = _amounts("status.allocatable", node.status.allocatable)
    except InvalidObject as exc:
        raise InvalidObject(f"Node {name}: {exc}") from None
    return NodeInfo(
        name=name,
        labels=dict(node.metadata.labels or {}),
        taints=tuple(Taint(t.key, t.value or "", t.effect) for t in node.spec.taints or ()),
        unschedulable=bool(node.spec.unschedulable),
        allocatable=alloc,
    )


def node_info_from_dict(obj: Mapping) -> NodeInfo:
    return node_info(Node.model_validate(obj))


def job_key(meta: ObjectMeta) -> str | None:
    """``namespace/name`` of the Job owning a pod: its controller ownerReference, else the
    ``job-name`` label the Job controller sets."""
    for ref in meta.ownerReferences or ():
        if ref.kind == "Job" and ref.controller:
            return f"{meta.namespace}/{ref.name}"
    name = (meta.labels or {}).get("job-name") or (meta.labels or {}).get("batch.kubernetes.io/job-name")
    return f"{meta.namespace}/{name}" if name else None
