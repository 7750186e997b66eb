"""metadata.managedFields as kube-apiserver 1.24 keeps them for Update operations, approximately
(`ApiServer(managed_fields=True)`; docs/apiserver-standin.md).

Every write records, per (manager, subresource), the set of fields that manager set (`fieldsV1`):
on create every field of the object; on an update or patch the fields whose value it changed,
which leave the other managers' sets. The manager is the request's `fieldManager`, else the
User-Agent up to its first "/" (kubernetes_asyncio: `OpenAPI-Generator`), as the apiserver does;
the stand-in's own writers are `kube-controller-manager` (job controller, garbage collector) and
`kubelet`. A body's own managedFields are ignored (a PUT without them keeps the stored ones, as a
real server does: its field manager falls back to the live object's).

The approximation: no schema, so a list of objects is keyed by its `name`, `type` or `uid` field
(`k:{"name":"worker"}`) and any other list is atomic; a map is marked owned (".") where the field is
one of the usual map-valued ones (labels, requests...). The sizes come out as in the recordings
(shared/fixtures/k8s-1.24: about 40% of a Job's bytes), which is what the model is for.
"""
from __future__ import annotations

import contextvars
from typing import Any

import orjson

# The manager of the request being handled (set by the HTTP handler; None: the stand-in itself).
MANAGER: contextvars.ContextVar[str | None] = contextvars.ContextVar("standin_field_manager", default=None)

_SYSTEM_META = frozenset({"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                          "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"})
_LIST_KEYS = ("name", "type", "uid")
_MAPS = frozenset({"labels", "annotations", "requests", "limits", "nodeSelector", "resourceUsage", "flavors",
                   "capacity", "allocatable", "overhead", "nodeLabels", "matchLabels", "data"})
_INTERNAL_MANAGERS = {"job-controller": "kube-controller-manager", "gc": "kube-controller-manager",
                      "kubelet": "kubelet"}

Fields = dict[str, Any]  # a fieldsV1 tree: {"f:spec": {"f:suspend": {}}, ...}


def manager_from(user_agent: str | None, field_manager: str | None) -> str:
    if field_manager:
        return field_manager
    return (user_agent or "unknown").split("/", 1)[0] or "unknown"


def _item_key(item: Any) -> str | None:
    if isinstance(item, dict):
        for k in _LIST_KEYS:
            if isinstance(item.get(k), str):
                return "k:" + orjson.dumps({k: item[k]}).decode()
    return None


def _keyed(items: list) -> dict[str, Any] | None:
    """A list of objects by their key, or None when the list is atomic."""
    out = {}
    for item in items:
        key = _item_key(item)
        if key is None or key in out:
            return None
        out[key] = item
    return out


def _tree(value: Any, name: str) -> Fields:
    """The fields of one value (a leaf is {})."""
    if isinstance(value, dict):
        out: Fields = {".": {}} if name in _MAPS else {}
        for k, v in value.items():
            out["f:" + k] = _tree(v, k)
        return out
    if isinstance(value, list) and value:
        keyed = _keyed(value)
        if keyed is not None:
            return {k: {".": {}, **_tree(v, "")} for k, v in keyed.items()}
    return {}


def _object_fields(obj: dict) -> Fields:
    out: Fields = {}
    for k, v in obj.items():
        if k in ("kind", "apiVersion"):
            continue
        if k == "metadata":
            meta = {mk: mv for mk, mv in v.items() if mk not in _SYSTEM_META}
            if meta:
                out["f:metadata"] = _tree(meta, "metadata")
            continue
        out["f:" + k] = _tree(v, k)
    return out


def _changed(old: Any, new: Any, name: str) -> Fields | None:
    """The fields of `new` that differ from `old` (None: nothing)."""
    if old == new:
        return None
    if isinstance(old, dict) and isinstance(new, dict):
        out: Fields = {}
        for k, v in new.items():
            sub = _changed(old.get(k), v, k) if k in old else _tree(v, k)
            if sub is not None:
                out["f:" + k] = sub
        return out or ({".": {}} if name in _MAPS else None)
    if isinstance(old, list) and isinstance(new, list):
        ko, kn = _keyed(old), _keyed(new)
        if ko is not None and kn is not None:
            out = {}
            for k, v in kn.items():
                sub = _changed(ko[k], v, "") if k in ko else {".": {}, **_tree(v, "")}
                if sub is not None:
                    out[k] = sub
            return out or None
    return _tree(new, name)


def _removed(old: Any, new: Any) -> Fields | None:
    """The fields of `old` that `new` no longer has."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: Fields = {}
        for k, v in old.items():
            if k not in new:
                out["f:" + k] = {}
            else:
                sub = _removed(v, new[k])
                if sub:
                    out["f:" + k] = sub
        return out or None
    if isinstance(old, list) and isinstance(new, list):
        ko, kn = _keyed(old), _keyed(new)
        if ko is not None and kn is not None:
            out = {}
            for k, v in ko.items():
                if k not in kn:
                    out[k] = {}
                else:
                    sub = _removed(v, kn[k])
                    if sub:
                        out[k] = sub
            return out or None
    return None


def _union(a: Fields, b: Fields) -> Fields:
    out = dict(a)
    for k, v in b.items():
        out[k] = _union(out[k], v) if k in out else v
    return out


def _minus(a: Fields, b: Fields) -> Fields:
    """a without the fields b names (a field named whole in b goes with everything under it)."""
    out: Fields = {}
    for k, v in a.items():
        if k not in b:
            out[k] = v
        elif b[k] and v:
            rest = _minus(v, b[k])
            if rest and set(rest) != {"."}:
                out[k] = rest
    return out


def record(old: dict | None, new: dict, verb: str, subresource: str | None, api_version: str, now: str) -> list:
    """new's managedFields after `verb` (create/update/patch/...) wrote it over `old`."""
    internal = _INTERNAL_MANAGERS.get(verb)
    manager = internal or MANAGER.get() or "unknown"
    entries = [dict(e) for e in (old or {}).get("metadata", {}).get("managedFields") or ()]
    strip = ("metadata",) if subresource == "status" else ()
    if old is None:
        changed, removed = _object_fields(new), {}
    else:
        changed = _changed(_content(old, strip), _content(new, strip), "") or {}
        removed = _removed(_content(old, strip), _content(new, strip)) or {}
    if not changed and not removed:
        return entries
    taken = _union(changed, removed)
    kept = []
    mine = None
    for e in entries:
        if e.get("manager") == manager and e.get("subresource") == subresource and e.get("operation") == "Update":
            mine = e
            continue
        rest = _minus(e.get("fieldsV1") or {}, taken)
        if rest:
            kept.append({**e, "fieldsV1": rest})
    own = _union(_minus((mine or {}).get("fieldsV1") or {}, removed), changed)
    if own:
        entry = {"manager": manager, "operation": "Update", "apiVersion": api_version, "time": now,
                 "fieldsType": "FieldsV1", "fieldsV1": own}
        if subresource:
            entry["subresource"] = subresource
        kept.append(entry)
    return kept


def _content(obj: dict, strip: tuple[str, ...]) -> dict:
    out = {k: v for k, v in obj.items() if k not in strip and k not in ("kind", "apiVersion")}
    if "metadata" in out:
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k not in _SYSTEM_META}
    return out
