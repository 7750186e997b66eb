"""CustomResourceDefinitions as kube-apiserver 1.24 serves them: creating a CRD
(apiextensions.k8s.io/v1) makes its kind servable at once, every served version on one storage;
every write of such an object is pruned, defaulted and validated against the storage version's
`openAPIV3Schema` (structural schema rules: unknown fields dropped unless
`x-kubernetes-preserve-unknown-fields`, `default`s filled in where a field is absent, null dropped
where not `nullable`; then type, required, enum, bounds, lengths, item counts and patterns
checked, with kube-apiserver's 422 messages). CEL rules (`x-kubernetes-validations`) are not
evaluated: 1.24 ignores them, as the design card says.

The CRDs of the workload kinds gpuqueue integrates are read from the projects' published files in
shared/fixtures/crds (`fixture(name)`, tests/shared_fixtures.py); `ApiServer.install_crds(...)`
installs them as `kubectl create -f` would.
"""
from __future__ import annotations

import copy
import functools
import re
from typing import Any

import yaml

from tests import shared_fixtures

from .resources import ResourceType
from .status import FieldError, go_value

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# The published file of each CRD the stand-in serves: the versions Kueue uses. shared/ also holds
# training-operator v1's MPIJob, which defines the same mpijobs.kubeflow.org as mpi-operator's
# v2beta1 (the one Kueue integrates), and TFJob, which gpuqueue does not integrate.
PUBLISHED = {
    "jobsets.jobset.x-k8s.io": "jobset/jobset.x-k8s.io_jobsets.yaml",
    "pytorchjobs.kubeflow.org": "training-operator-v1/kubeflow.org_pytorchjobs.yaml",
    "mpijobs.kubeflow.org": "mpi-operator-v2/kubeflow.org_mpijobs.yaml",
    "trainjobs.trainer.kubeflow.org": "trainer-v2/trainer.kubeflow.org_trainjobs.yaml",
    "trainingruntimes.trainer.kubeflow.org": "trainer-v2/trainer.kubeflow.org_trainingruntimes.yaml",
    "clustertrainingruntimes.trainer.kubeflow.org": "trainer-v2/trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "rayjobs.ray.io": "kuberay/ray.io_rayjobs.yaml",
    "rayclusters.ray.io": "kuberay/ray.io_rayclusters.yaml",
    "leaderworkersets.leaderworkerset.x-k8s.io": "lws/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
}


def fixture_names() -> list[str]:
    """`plural.group` of every CRD the stand-in serves (e.g. `jobsets.jobset.x-k8s.io`)."""
    return sorted(PUBLISHED)


@functools.cache
def _fixture(name: str) -> dict:
    if name not in PUBLISHED:
        raise KeyError(f"no published CRD {name!r} (known: {', '.join(fixture_names())})")
    path = shared_fixtures.fixture("crds", PUBLISHED[name])
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)


def fixture(name: str) -> dict:
    """The published CRD `name` (`plural.group`), parsed; the caller gets its own copy. In a test
    run without shared/ beside the checkout, the test is skipped."""
    return copy.deepcopy(_fixture(name))


def storage_schema(crd: dict) -> dict:
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version["schema"]["openAPIV3Schema"]


def resource_types(crd: dict) -> list[ResourceType]:
    """One ResourceType per served version, all on the storage version's storage and schema (the
    kinds here convert with strategy None: only apiVersion differs between versions)."""
    spec = crd["spec"]
    names, group = spec["names"], spec["group"]
    schema = storage_schema(crd)
    out = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        out.append(ResourceType(group, version["name"], names["plural"], names["kind"], spec["scope"] == "Namespaced",
                                status_subresource="status" in (version.get("subresources") or {}), custom=True,
                                has_generation=True, storage=f"{names['plural']}.{group}", schema=schema))
    return out


# --- pruning and defaulting -------------------------------------------------------------------------

_ROOT_KEPT = ("apiVersion", "kind", "metadata")


def prune_and_default(schema: dict, obj: dict) -> None:
    """In place, as the API server does on every write: unknown fields dropped, absent fields
    that have a default set to it, nulls of non-nullable fields dropped."""
    for key in list(obj):
        if key in _ROOT_KEPT:
            continue
        sub = (schema.get("properties") or {}).get(key)
        if sub is None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            del obj[key]
        elif sub is not None:
            obj[key] = _prune(sub, obj[key])
            if obj[key] is _DROP:
                del obj[key]
    _defaults(schema, obj, root=True)


_DROP = object()


def _prune(schema: dict, value: Any) -> Any:
    if value is None:
        return None if schema.get("nullable") else _DROP
    if isinstance(value, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields")
        for key in list(value):
            sub = props.get(key) if props else None
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                if not keep_unknown:
                    del value[key]
                continue
            value[key] = _prune(sub, value[key])
            if value[key] is _DROP:
                del value[key]
        _defaults(schema, value)
    elif isinstance(value, list) and schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        kept = [_prune(schema["items"], item) for item in value]
        value[:] = [item for item in kept if item is not _DROP]
    return value


def _defaults(schema: dict, value: dict, root: bool = False) -> None:
    for key, sub in (schema.get("properties") or {}).items():
        if key not in value and "default" in sub and not (root and key in _ROOT_KEPT):
            value[key] = _prune(sub, copy.deepcopy(sub["default"]))


# --- validation ---------------------------------------------------------------------------------------

_JSON_TYPE = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def validation_errors(schema: dict, obj: dict) -> list[FieldError]:
    """kube-apiserver's structural checks of a (pruned, defaulted) custom object, in its words."""
    errs: list[FieldError] = []
    for key, sub in (schema.get("properties") or {}).items():
        if key in _ROOT_KEPT:
            continue
        if key in obj:
            _validate(sub, obj[key], key, errs)
    for key in schema.get("required") or ():
        if key not in obj:
            errs.append(FieldError.required(key))
    return errs


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return _JSON_TYPE.get(type(value), type(value).__name__)


def _type_ok(schema: dict, value: Any) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)
    want = schema.get("type")
    if want is None:
        return True
    if want == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if want == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return _type_name(value) == want


def _validate(schema: dict, value: Any, path: str, errs: list[FieldError]) -> None:
    if value is None:
        if not schema.get("nullable"):
            errs.append(FieldError.invalid(path, '"null"', f'{path} in body must be of type {schema.get("type")}: "null"'))
        return
    if not _type_ok(schema, value):
        got = _type_name(value)
        want = "integer,string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
        errs.append(FieldError.invalid(path, f'"{got}"', f'{path} in body must be of type {want}: "{got}"'))
        return
    if "enum" in schema and value not in schema["enum"]:
        errs.append(FieldError.unsupported(path, value, [str(v) for v in schema["enum"]]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _bounds(schema, value, path, errs)
    if isinstance(value, str):
        _string(schema, value, path, errs)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub is not None:
                _validate(sub, item, f"{path}.{key}" if key in props else f"{path}[{key}]", errs)
        for key in schema.get("required") or ():
            if key not in value:
                errs.append(FieldError.required(f"{path}.{key}"))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errs.append(FieldError.invalid(path, str(len(value)),
                                           f"{path} in body should have at least {schema['minProperties']} properties"))
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(FieldError("FieldValueTooMany", path,
                                   f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(FieldError.invalid(path, str(len(value)),
                                           f"{path} in body should have at least {schema['minItems']} items"))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _validate(items, item, f"{path}[{i}]", errs)


def _bounds(schema: dict, value: float, path: str, errs: list[FieldError]) -> None:
    if "minimum" in schema:
        low, strict = schema["minimum"], schema.get("exclusiveMinimum", False)
        if value < low or (strict and value == low):
            word = "greater than" if strict else "greater than or equal to"
            errs.append(FieldError.invalid(path, go_value(value), f"{path} in body should be {word} {low}"))
    if "maximum" in schema:
        high, strict = schema["maximum"], schema.get("exclusiveMaximum", False)
        if value > high or (strict and value == high):
            word = "less than" if strict else "less than or equal to"
            errs.append(FieldError.invalid(path, go_value(value), f"{path} in body should be {word} {high}"))


def _string(schema: dict, value: str, path: str, errs: list[FieldError]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errs.append(FieldError("FieldValueTooLong", path,
                               f"Too long: may not be longer than {schema['maxLength']}"))
    if "minLength" in schema and len(value) < schema["minLength"]:
        errs.append(FieldError.invalid(path, go_value(value),
                                       f"{path} in body should be at least {schema['minLength']} chars long"))
    if "pattern" in schema and _pattern(schema["pattern"]).search(value) is None:
        errs.append(FieldError.invalid(path, go_value(value), f"{path} in body should match '{schema['pattern']}'"))


@functools.cache
def _pattern(expr: str) -> re.Pattern:
    return re.compile(expr)
