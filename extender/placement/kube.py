"""From Kubernetes objects (``gpuqueue.api.core``'s models, as kube-scheduler or a scenario sends
them) to placement's model. Quantities become Kueue's integers (``to_engine_int``)."""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import ValidationError

from gpuqueue.api.core import Node, PodSpec
from gpuqueue.api.quantity import to_engine_int

from gpuqueue.extender.placement.model import NodeInfo


class InvalidObject(ValueError):
    """A Kubernetes object placement cannot use; the message names the field."""


def describe(exc: ValidationError, limit: int = 3) -> str:
    """pydantic's errors as ``field.path[0].x: message; ...``, the way a person reads them."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _validate(model, raw: Any, where: str):
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidObject(f"{where}{describe(exc)}") from None


def pod_spec(raw: Any) -> PodSpec:
    """A pod's ``spec`` from JSON; errors name the field (``spec.containers[0]...``)."""
    return _validate(PodSpec, raw if raw is not None else {}, "spec.")


def node_info(node: Node) -> NodeInfo:
    name = node.metadata.name
    if not name:
        raise InvalidObject("Node without metadata.name")
    alloc = {r: to_engine_int(r, q) for r, q in node.status.allocatable.items()}
    return NodeInfo(
        name=name,
        labels=dict(node.metadata.labels),
        taints=tuple(t.to_spec() for t in node.spec.taints),
        unschedulable=bool(node.spec.unschedulable),
        allocatable=alloc,
        ready=node.status.ready(),
    )


def node_info_from_dict(obj: Mapping) -> NodeInfo:
    """A Node's JSON to NodeInfo; errors name the node and the field."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return node_info(_validate(Node, obj, f"Node {name}: " if isinstance(name, str) and name else ""))
