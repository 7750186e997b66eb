"""Names Kueue gives: a Workload's name from its owner (jobframework's
GetWorkloadNameForOwnerWithGVK) and a pod's role hash in a pod group (the pod integration's
getRoleHash), so that a Kueue user's tooling finds the same names.

``workload_name``: ``<lower-case kind>-<owner name>``, cut to 247 characters, then ``-`` and the
first 5 hex digits of sha1("<Kind>\\n<group>\\n<owner name>\\n<owner uid>"): stable for one
owner, different for a recreated one (another uid). E.g. ``jobset-train-1a2b3``,
``pytorchjob-bert-...``, ``pod-notebook-...``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from gpuqueue.api.quantity import Quantity

HASH_LENGTH = 5
MAX_NAME_LENGTH = 253
MAX_PREFIX_LENGTH = MAX_NAME_LENGTH - 1 - HASH_LENGTH


def workload_name(kind: str, group: str, owner_name: str, owner_uid: str) -> str:
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode()).hexdigest()
    return f"{kind.lower()}-{owner_name}"[:MAX_PREFIX_LENGTH] + "-" + digest[:HASH_LENGTH]


def _quantities(resources: Any) -> dict[str, str] | None:
    if resources is None:
        return None
    return {name: str(Quantity.parse(q)) for name, q in sorted(resources.items())}


def _struct(value: Any, fields: tuple[str, ...], always: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Go struct as encoding/json writes it: fields in declaration order, omitempty ones left
    out when empty."""
    return {f: value.get(f) for f in fields if f in always or value.get(f) not in (None, "", 0, False)}


_PORT_FIELDS = ("name", "hostPort", "containerPort", "protocol", "hostIP")
_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")


def _containers(containers: Any) -> list[dict[str, Any]] | None:
    if not containers:
        return None  # Go appends to a nil slice: no containers is null
    out = []
    for c in containers:
        ports = c.get("ports")
        out.append({"ports": None if ports is None else [_struct(p, _PORT_FIELDS, ("containerPort",)) for p in ports],
                    "resources": {"requests": _quantities(_defaulted_requests(c.get("resources") or {}))}})
    return out


def _defaulted_requests(resources: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Requests as the API server stores them (a limit stands in for a missing request), which is
    what the pod webhook sees."""
    requests, limits = resources.get("requests"), resources.get("limits")
    if not limits:
        return requests
    return {**limits, **(requests or {})}


def _sorted_deep(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))


def role_hash(pod_spec: Mapping[str, Any]) -> str:
    """8 hex digits naming the role of a pod in a group: pods with the same requests, ports,
    scheduling constraints and priority share it, and so share a pod set. Kueue hashes Go's JSON
    of these fields; this encodes them as encoding/json does for the common shapes (map keys
    sorted, struct fields in Go's order, empty omitempty fields left out, quantities canonical,
    requests as the API server defaults them from limits). Not checked against a hash Kueue
    computed, and for affinity, topologySpreadConstraints and resourceClaims Go's field order is
    not reproduced: the value may differ from Kueue's. It is stable within gpuqueue, which writes
    it in the ``kueue.x-k8s.io/role-hash`` annotation on CREATE (as Kueue's webhook does) and reads
    the annotation from then on."""
    tolerations = pod_spec.get("tolerations")
    node_selector = pod_spec.get("nodeSelector")
    shape = {
        "affinity": _sorted_deep(pod_spec.get("affinity")),
        "containers": _containers(pod_spec.get("containers")),
        "initContainers": _containers(pod_spec.get("initContainers")),
        "nodeSelector": None if node_selector is None else dict(sorted(node_selector.items())),
        "overhead": _quantities(pod_spec.get("overhead")),
        "priority": pod_spec.get("priority"),
        "resourceClaims": _sorted_deep(pod_spec.get("resourceClaims")),
        "runtimeClassName": pod_spec.get("runtimeClassName"),
        "tolerations": None if tolerations is None else [_struct(t, _TOLERATION_FIELDS) for t in tolerations],
        "topologySpreadConstraints": _sorted_deep(pod_spec.get("topologySpreadConstraints")),
    }
    return hashlib.sha256(orjson.dumps({"spec": shape})).hexdigest()[:8]
