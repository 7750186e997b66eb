"""k8s.io/kube-scheduler/extender/v1, as JSON: Go field names as keys, unused fields null.

Requests are validated with partial pydantic models (unknown fields ignored); responses are
plain dicts built here so every key is spelled once."""

from __future__ import annotations

import re
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuqueue.api.base import ObjectMeta

from extender.placement.kube import describe


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Pod(_Wire):
    """A pod as the extender reads it: metadata always; ``spec`` stays JSON until the pod turns
    out to be an admitted Workload's (``extender.placement.kube.pod_spec``), so a pod gpuqueue
    does not manage is never refused for a field the extender has no business reading."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] | None = None


class NodeList(_Wire):
    items: list[dict[str, Any]] | None = None


class ExtenderArgs(_Wire):
    Pod: Pod
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class MetaPod(_Wire):
    UID: str


class MetaVictims(_Wire):
    Pods: list[MetaPod] | None = None
    NumPDBViolations: int = 0


class Victims(_Wire):
    Pods: list[Pod] | None = None
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Wire):
    Pod: Pod
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class BadRequest(ValueError):
    """A request the extender cannot read; the message says what is wrong."""


def decode(body: bytes, model: type[_Wire]) -> Any:
    if not body.strip():
        raise BadRequest(f"empty request body, expected {model.__name__} JSON")
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise BadRequest(f"{model.__name__} must be a JSON object, got {_json_type(raw)}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise BadRequest(f"invalid {model.__name__}: {describe(exc)}") from None


def _json_type(v: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", type(None): "null"}.get(type(v), type(v).__name__)


def filter_result(*, node_names: list[str] | None = None, node_items: list[dict] | None = None,
                  failed: dict[str, str] | None = None, unresolvable: dict[str, str] | None = None) -> dict:
    return {
        "Nodes": {"metadata": {}, "items": node_items} if node_items is not None else None,
        "NodeNames": node_names,
        "FailedNodes": failed if failed is not None else {},
        "FailedAndUnresolvableNodes": unresolvable if unresolvable is not None else {},
        "Error": "",
    }


def filter_error(message: str) -> dict:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": None, "FailedAndUnresolvableNodes": None,
            "Error": message}


def host_priorities(scores: list[tuple[str, int]]) -> list[dict]:
    return [{"Host": h, "Score": s} for h, s in scores]


_JSON_SAFE_NAMES = re.compile(r"[a-z0-9.\-]*")  # node names are DNS subdomains: nothing to escape


def encode_host_priorities(by_score: list[list[str]]) -> bytes:
    """HostPriorityList bytes from host names grouped by score (index = score); host order is
    not significant to kube-scheduler. One join per score instead of a dict per host: this is
    the largest answer the extender gives, once per pod."""
    if not all(_JSON_SAFE_NAMES.fullmatch("".join(hosts)) for hosts in by_score):
        return orjson.dumps([{"Host": h, "Score": s} for s, hosts in enumerate(by_score) for h in hosts])
    parts = []
    for score, hosts in enumerate(by_score):
        if hosts:
            tail = '","Score":%d}' % score
            parts.append('{"Host":"' + (tail + ',{"Host":"').join(hosts) + tail)
    return ("[" + ",".join(parts) + "]").encode()


def preemption_result(victims: dict[str, tuple[list[str], int]], error: str | None = None) -> dict:
    out: dict[str, Any] = {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb}
        for node, (uids, pdb) in victims.items()
    }}
    if error:
        # Not a field of ExtenderPreemptionResult: Go ignores it, a person reading the body does not.
        out["Error"] = error
    return out
