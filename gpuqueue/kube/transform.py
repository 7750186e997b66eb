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


# A compiled set of paths: field name -> what to do there. None: drop the field; (each, tree):
# walk into it (into every element when ``each``, the path's ``[]``) and apply ``tree``.
_Tree = dict[str, "tuple[bool, _Tree] | None"]


def _compile(paths: Iterable[str]) -> _Tree:
    """`spec.volumes`, `spec.containers[].env` -> {"spec": (False, {"volumes": None,
    "containers": (True, {"env": None})})}: every object is walked once, whatever the number of
    paths. A field dropped whole makes any deeper path under it moot."""
    tree: _Tree = {}
    for path in paths:
        parts = path.split(".")
        if not all(parts):
            raise ValueError(f"transform path {path!r}: an empty field name")
        if parts[-1].endswith("[]"):
            raise ValueError(f"transform path {path!r}: must end in a field, not a list step")
        node = tree
        for i, part in enumerate(parts):
            each = part.endswith("[]")
            name = part[:-2] if each else part
            if i == len(parts) - 1:
                node[name] = None
                break
            step = node.get(name, (each, {}))
            if step is None:
                break  # the field is dropped whole already
            if step[0] != each:
                raise ValueError(f"transform path {path!r}: {name} is a list in one path and not in another")
            node[name] = step
            node = step[1]
    return tree


def _drop(node, tree: _Tree) -> None:
    if not isinstance(node, dict):
        return
    for name, step in tree.items():
        if step is None:
            node.pop(name, None)
            continue
        child = node.get(name)
        if child is None:
            continue
        each, sub = step
        if not each:
            _drop(child, sub)
        elif isinstance(child, list):
            for item in child:
                _drop(item, sub)


def dropping(paths: Iterable[str]) -> Transform:
    """A transform that removes these fields (and managedFields) wherever they are present."""
    tree = _compile(paths)

    def transform(obj: dict) -> dict:
        strip_managed_fields(obj)
        _drop(obj, tree)
        return obj

    return transform
