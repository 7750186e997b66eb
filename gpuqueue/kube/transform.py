"""Cache transforms: what an Informer drops from each object before it is stored (as
controller-runtime's `cache.Options.DefaultTransform` / `TransformStripManagedFields` do).

A transform drops fields by name, never keeps by name: a field some future reader needs is kept
unless it is listed here, so a new reader fails safe. Which fields a component may drop is that
component's decision (for the controller: extender/controller/client/cached_fields.py).

Paths are dotted field names; `[]` steps into every element of a list:
`spec.containers[].env` drops `env` of every container.
"""
from __future__ import annotations

from typing import Callable, Iterable

Transform = Callable[[dict], dict]


def strip_managed_fields(obj: dict) -> dict:
    """metadata.managedFields: a third to a half of a typical object, read by no controller. A
    PUT of the object without them keeps the server's (kube-apiserver's field manager falls back
    to the stored object's when a request carries none)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _compile(path: str) -> list[tuple[str, bool]]:
    """`spec.containers[].env` -> [("spec", False), ("containers", True), ("env", False)]."""
    steps = []
    for part in path.split("."):
        if not part:
            raise ValueError(f"transform path {path!r}: an empty field name")
        each = part.endswith("[]")
        steps.append((part[:-2] if each else part, each))
    if steps[-1][1]:
        raise ValueError(f"transform path {path!r}: must end in a field, not a list step")
    return steps


def _drop(node, steps: list[tuple[str, bool]]) -> None:
    if not isinstance(node, dict):
        return
    name, each = steps[0]
    if len(steps) == 1:
        node.pop(name, None)
        return
    child = node.get(name)
    if each:
        if isinstance(child, list):
            for item in child:
                _drop(item, steps[1:])
    else:
        _drop(child, steps[1:])


def dropping(paths: Iterable[str]) -> Transform:
    """A transform that removes these fields (and managedFields) wherever they are present."""
    compiled = [_compile(p) for p in paths]

    def transform(obj: dict) -> dict:
        strip_managed_fields(obj)
        for steps in compiled:
            _drop(obj, steps)
        return obj

    return transform
