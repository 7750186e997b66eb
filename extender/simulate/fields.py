"""The field names each document of a scenario may use: the simulator reads strictly, as kubectl's
strict field validation does, because a misspelt name that is silently dropped answers another
question than the one asked (`limit:` for `limits:` is a Job with no GPUs).

The models in gpuqueue.api ignore names they do not know, on purpose: the controller reads objects
from real clusters, where newer API versions add fields. Strictness is the simulator's choice, so
it lives here, as a check of the raw document before the model reads it. Where the names come from:

- Kubernetes kinds (Job, Node, Namespace, PriorityClass) and every object's `metadata`: the
  kubernetes_asyncio models, generated from Kubernetes' OpenAPI, so every field kubectl accepts;
- Kueue's kinds: gpuqueue's models, which follow the CRDs gpuqueue installs (a test checks that
  the two agree), plus the few CRD fields gpuqueue accepts without reading (`ACCEPTED_UNREAD`);
  an older API version's names (v1beta1 `cohort`) only in documents of that version;
- Configuration: gpuqueue's model for what it honours, Kueue's other top-level settings (accepted,
  their contents not checked: the simulator does not read them), and gpuqueue's `enforcement`;
- the other workload kinds (JobSet, PyTorchJob, ... ``simulate/kinds.py``): their published CRDs'
  names and defaults (``crd_fields.json``), pod templates inside them by the kubernetes_asyncio
  model; Deployment, StatefulSet and Pod by the kubernetes_asyncio model.
"""

from __future__ import annotations

import copy
import difflib
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

from pydantic import BaseModel

from gpuqueue.api import base, kueue
from gpuqueue.jobframework.enforcement import SECTION_FIELDS as ENFORCEMENT_FIELDS


@dataclass(frozen=True)
class Obj:
    """A mapping with known names; `None` for a value means any value (not checked further).
    ``defaults``: values the API server fills in for absent names (a CRD's ``default``s)."""

    fields: dict[str, "Shape"]
    defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ListOf:
    item: "Shape"


@dataclass(frozen=True)
class MapOf:
    value: "Shape"


@dataclass(frozen=True)
class KubeObj:
    """A kubernetes_asyncio model by class name, resolved when a document reaches it (the models
    refer to each other; resolving eagerly would walk all of them)."""

    model: str


Shape = Union[Obj, ListOf, MapOf, KubeObj, None]

# Kubernetes kinds the scenario reads: their kubernetes_asyncio model.
KUBERNETES_MODELS = {"Job": "V1Job", "Node": "V1Node", "Namespace": "V1Namespace",
                     "PriorityClass": "V1PriorityClass"}
OBJECT_META = KubeObj("V1ObjectMeta")

# Fields of the CRDs gpuqueue installs that gpuqueue's models do not read: accepted, not used.
ACCEPTED_UNREAD = {
    "ClusterQueue": ("spec.flavorFungibility.preference",),
    "LocalQueue": ("spec.fairSharing.weight",),
    "ResourceFlavor": ("spec.nodeTaints.timeAdded",),
}

# Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) settings gpuqueue does not read.
KUEUE_CONFIGURATION_UNREAD = (
    "namespace", "webhook", "leaderElection", "metrics", "health", "pprofBindAddress", "controller",
    "tls", "internalCertManagement", "waitForPodsReady", "clientConnection",
    "multiKueue", "admissionFairSharing", "resources", "featureGates", "objectRetentionPolicies",
)

_EVENT = Obj({"at": None, "every": None, "count": None, "submit": None, "apply": None, "finish": None,
              "delete": Obj({"kind": None, "name": None, "namespace": None})})
SCENARIO = Obj({"apiVersion": None, "kind": None, "metadata": OBJECT_META, "events": ListOf(_EVENT)})


def document_shape(kind: str, model: type[BaseModel], api_version: str, preferred_version: str) -> Shape:
    """The names a document of `kind` may use; `model` reads it, `api_version` is the document's."""
    if kind in KUBERNETES_MODELS:
        return KubeObj(KUBERNETES_MODELS[kind])
    shape = _from_model(model, older_names=api_version != preferred_version)
    for path in ACCEPTED_UNREAD.get(kind, ()):
        _add(shape, path.split("."))
    if issubclass(model, kueue.Configuration):
        shape.fields.update(dict.fromkeys(KUEUE_CONFIGURATION_UNREAD))
        shape.fields["enforcement"] = Obj(dict.fromkeys(ENFORCEMENT_FIELDS))
    elif "status" not in shape.fields:
        shape.fields["status"] = None  # what `kubectl get -o yaml` shows: accepted, not read
    return shape


def _from_model(model: type[BaseModel], older_names: bool) -> Obj:
    fields: dict[str, Shape] = {}
    for name, info in model.model_fields.items():
        fields[info.alias or name] = _from_annotation(info.annotation, older_names)
    if older_names:
        fields.update(dict.fromkeys(getattr(model, "older_names", {})))
    return Obj(fields)


def _from_annotation(annotation: Any, older_names: bool) -> Shape:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _from_annotation(args[0], older_names)
    if origin in (Union, types.UnionType):
        shapes = [_from_annotation(a, older_names) for a in args if a is not type(None)]
        return next((s for s in shapes if s is not None), None)
    if origin is list:
        return ListOf(_from_annotation(args[0], older_names))
    if origin is dict:
        return MapOf(_from_annotation(args[1], older_names))
    if annotation is base.ObjectMeta:
        return OBJECT_META  # every name Kubernetes' ObjectMeta has, not only those gpuqueue reads
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _from_model(annotation, older_names)
    return None


def _add(shape: Shape, path: list[str]) -> None:
    while isinstance(shape, (ListOf, MapOf)):
        shape = shape.item if isinstance(shape, ListOf) else shape.value
    assert isinstance(shape, Obj), path
    if len(path) == 1:
        shape.fields[path[0]] = None
    else:
        if shape.fields.get(path[0]) is None:
            shape.fields[path[0]] = Obj({})
        _add(shape.fields[path[0]], path[1:])


def from_json(node: Any) -> Shape:
    """A shape from crd_fields.json's compact form (``o``: object, ``d``: its defaults, ``l``: list,
    ``m``: map, ``k``: a kubernetes_asyncio model, null: anything)."""
    if node is None:
        return None
    if "o" in node:
        return Obj({name: from_json(sub) for name, sub in node["o"].items()}, dict(node.get("d") or {}))
    if "l" in node:
        return ListOf(from_json(node["l"]))
    if "m" in node:
        return MapOf(from_json(node["m"]))
    return KubeObj(node["k"])


def apply_defaults(value: Any, shape: Shape) -> None:
    """In place: the shape's defaults for absent names, at every level the value has."""
    if isinstance(shape, Obj) and isinstance(value, dict):
        for name, default in shape.defaults.items():
            if name not in value:
                value[name] = copy.deepcopy(default)
        for name, item in value.items():
            if name in shape.fields:
                apply_defaults(item, shape.fields[name])
    elif isinstance(shape, ListOf) and isinstance(value, list):
        for item in value:
            apply_defaults(item, shape.item)
    elif isinstance(shape, MapOf) and isinstance(value, dict):
        for item in value.values():
            apply_defaults(item, shape.value)


@functools.cache
def _kube_fields(model: str) -> dict[str, Shape]:
    from kubernetes_asyncio.client import models

    cls = getattr(models, model)
    return {cls.attribute_map[attr]: _kube_type(t) for attr, t in cls.openapi_types.items()}


def _kube_type(name: str) -> Shape:
    if name.startswith("list[") and name.endswith("]"):
        return ListOf(_kube_type(name[5:-1]))
    if name.startswith("dict(") and name.endswith(")"):
        return MapOf(_kube_type(name[5:-1].split(",", 1)[1].strip()))
    if name[:1] == "V" and name[1:2].isdigit():
        return KubeObj(name)
    return None  # str, int, bool, datetime, object (int-or-string, raw extensions)


@dataclass(frozen=True)
class UnknownField:
    path: str  # e.g. spec.template.spec.containers[0].resources.limit
    name: str
    known: tuple[str, ...]

    def __str__(self) -> str:
        close = difflib.get_close_matches(self.name, self.known, n=1, cutoff=0.6)
        if close:
            return f"{self.path}: unknown field (did you mean {close[0]}?)"
        names = sorted(self.known)
        listed = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        return f"{self.path}: unknown field (known: {listed})"


def unknown_field(value: Any, shape: Shape, path: str = "") -> UnknownField | None:
    """The first name in `value` (in document order, depth first) that `shape` does not know.
    Values of the wrong type are left to the models, which say what they expected."""
    if shape is None:
        return None
    if isinstance(shape, ListOf):
        if isinstance(value, list):
            for i, item in enumerate(value):
                found = unknown_field(item, shape.item, f"{path}[{i}]")
                if found:
                    return found
        return None
    if isinstance(shape, MapOf):
        if isinstance(value, dict):
            for key, item in value.items():
                found = unknown_field(item, shape.value, f"{path}[{key}]")
                if found:
                    return found
        return None
    fields = _kube_fields(shape.model) if isinstance(shape, KubeObj) else shape.fields
    if not isinstance(value, dict):
        return None
    for key, item in value.items():
        here = f"{path}.{key}" if path else str(key)
        if key not in fields:
            return UnknownField(here, str(key), tuple(fields))
        found = unknown_field(item, fields[key], here)
        if found:
            return found
    return None
