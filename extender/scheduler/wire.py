"""k8s.io/kube-scheduler/extender/v1, as JSON: Go field names as keys, unused fields null.

Requests are validated with partial pydantic models (unknown fields ignored); responses are
plain dicts built here so every key is spelled once."""

from __future__ import annotations

import re
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuqueue.api.base import ObjectMeta

from gpuqueue.extender.placement.kube import describe


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


# Go's int: a JSON number within int64. A string, a bool or an integer past 64 bits is refused
# when decoding (orjson cannot write such an integer back: an answer echoing it would fail).
Int64 = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1)]


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
    NumPDBViolations: Int64 = 0


class Victims(_Wire):
    Pods: list[Pod] | None = None
    NumPDBViolations: Int64 = 0


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


# kube-scheduler's body with nodeCacheCapable: Go's encoder writes the fields of ExtenderArgs
# in order, compact, and ends with a newline: {"Pod":{...},"Nodes":null,"NodeNames":[...]}
_POD_HEAD = b'{"Pod":'
_NAMES_HEAD = b',"Nodes":null,"NodeNames":'
_SPACE = b" \t\r\n"


def split_names_request(body: bytes) -> tuple[bytes, bytes] | None:
    """(the pod's JSON, the NodeNames array's JSON) of a body laid out as kube-scheduler
    writes it with nodeCacheCapable, else None. The pattern searched for from the end cannot
    occur inside an array of strings, so the last occurrence is the one after the pod. Only the
    layout is checked: both parts still have to decode (``decode_pod``, ``decode_names``)."""
    if not body.startswith(_POD_HEAD):
        return None
    i = body.rfind(_NAMES_HEAD)
    if i < 0:
        return None
    end = len(body)
    while end and body[end - 1] in _SPACE:
        end -= 1
    if body[end - 1:end] != b"}":
        return None
    return body[len(_POD_HEAD):i], body[i + len(_NAMES_HEAD):end - 1]


def decode_pod(raw: bytes) -> Pod | None:
    """The pod's JSON as ExtenderArgs.Pod would read it, or None when it does not read
    cleanly (the caller then decodes the whole body, which words the error)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    try:
        return Pod.model_validate(obj)
    except ValidationError:
        return None


# The start of a pod as Go's encoder writes it (ObjectMeta's fields in struct order, compact):
# name, generateName, namespace, selfLink, uid, resourceVersion. Values with a quote or a
# backslash (never in a valid name or uid) do not match, nor does any other layout.
_POD_META_START = re.compile(rb'\{"metadata":\{"name":"([^"\\]*)",(?:"generateName":"[^"\\]*",)?"namespace":"([^"\\]*)",'
                             rb'(?:"selfLink":"[^"\\]*",)?"uid":"([^"\\]+)","resourceVersion":"([0-9]+)"')


def pod_head(raw: bytes) -> tuple[str, str, str, str] | None:
    """(name, namespace, uid, resourceVersion) read off the start of a pod's JSON laid out as
    kube-scheduler writes it, without decoding the rest; None for any other layout (the caller
    then decodes the whole)."""
    m = _POD_META_START.match(raw)
    if m is None:
        return None
    try:
        name, namespace, uid, version = (g.decode() for g in m.groups())
    except UnicodeDecodeError:
        return None
    return name, namespace, uid, version


def decode_names(raw: bytes) -> list[str] | None:
    """A JSON array of strings, or None when it is anything else."""
    try:
        names = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(names) is not list:
        return None
    try:
        "".join(names)  # the quick way to check every item is a string
    except TypeError:
        return None
    return names


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


def encode_filter_result(node_names: bytes, failed: dict[str, str], unresolvable: dict[str, str]) -> bytes:
    """``filter_result(node_names=...)`` as bytes, with the NodeNames array already encoded."""
    return b"".join((b'{"Nodes":null,"NodeNames":', node_names, b',"FailedNodes":', orjson.dumps(failed),
                     b',"FailedAndUnresolvableNodes":', orjson.dumps(unresolvable), b',"Error":""}'))


def filter_error(message: str) -> dict:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": None, "FailedAndUnresolvableNodes": None,
            "Error": message}


def host_priorities(scores: list[tuple[str, int]]) -> list[dict]:
    return [{"Host": h, "Score": s} for h, s in scores]


_JSON_PLAIN = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')  # printable ASCII but " and \\
_SCORE_TAILS = ['","Score":%d},{"Host":"' % s for s in range(11)]
_LAST_TAILS = ['","Score":%d}]' % s for s in range(11)]


def encode_host_priorities(hosts: list[str], scores: list[int], plain: bool = False) -> bytes:
    """HostPriorityList bytes, one entry per host in order; scores are 0..10. The largest answer
    the extender gives, once per pod: built by one join of the names with per-score separators
    instead of a dict per host (node names are DNS subdomains: nothing to escape; any name that
    would need escaping sends the whole answer through orjson). ``plain``: the caller knows no
    host needs escaping (they were JSON-encoded before without a backslash), so no check."""
    if not hosts:
        return b"[]"
    if not plain:
        joined = "".join(hosts)
        if not joined.isascii() or joined.encode().translate(None, _JSON_PLAIN):
            return orjson.dumps([{"Host": h, "Score": s} for h, s in zip(hosts, scores)])
    parts: list = [None] * (2 * len(hosts) + 1)
    parts[0] = '[{"Host":"'
    parts[1::2] = hosts
    parts[2::2] = map(_SCORE_TAILS.__getitem__, scores)
    parts[-1] = _LAST_TAILS[scores[-1]]
    return "".join(parts).encode()


def preemption_result(victims: dict[str, tuple[list[str], int]], error: str | None = None) -> dict:
    out: dict[str, Any] = {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb}
        for node, (uids, pdb) in victims.items()
    }}
    if error:
        # Not a field of ExtenderPreemptionResult: Go ignores it, a person reading the body does not.
        out["Error"] = error
    return out
