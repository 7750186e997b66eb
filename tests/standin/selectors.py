"""labelSelector / fieldSelector parsing and matching, as the list and watch endpoints take them."""
from __future__ import annotations

import re
from typing import Callable

from .status import bad_request

Predicate = Callable[[dict], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def parse_label_selector(expr: str | None) -> Predicate:
    if not expr:
        return lambda labels: True
    tests: list[Predicate] = []
    for part in _split_top(expr):
        m = _EQ_RE.match(part)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                tests.append(lambda l, k=key, v=value: l.get(k) != v)
            else:
                tests.append(lambda l, k=key, v=value: l.get(k) == v)
            continue
        m = _SET_RE.match(part)
        if not m:
            raise bad_request(f"unable to parse requirement: found '{part.strip()}', expected: valid label selector")
        neg, key, op, values = m.groups()
        if op:
            if neg:
                raise bad_request(f"unable to parse requirement: found '{part.strip()}'")
            vals = {v.strip() for v in values.split(",") if v.strip()}
            if op == "in":
                tests.append(lambda l, k=key, vs=vals: l.get(k) in vs)
            else:
                tests.append(lambda l, k=key, vs=vals: l.get(k) not in vs)
        elif neg:
            tests.append(lambda l, k=key: k not in l)
        else:
            tests.append(lambda l, k=key: k in l)
    return lambda labels: all(t(labels) for t in tests)


# Field labels each kind supports (1.24 registry GetAttrs / field label conversion funcs).
_COMMON = ("metadata.name", "metadata.namespace")
FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "pods": _COMMON + ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                       "status.phase", "status.podIP", "status.nominatedNodeName"),
    "events": _COMMON + ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                         "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                         "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"),
    "jobs.batch": _COMMON + ("status.successful",),
    "namespaces": _COMMON + ("status.phase",),
    "nodes": _COMMON + ("spec.unschedulable",),
}


def _field_value(obj: dict, label: str) -> str:
    if label == "source":
        return (obj.get("source") or {}).get("component", "")
    cur = obj
    for part in label.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(expr: str | None, storage_key: str, kind: str, api_version: str) -> Predicate:
    if not expr:
        return lambda obj: True
    supported = FIELD_LABELS.get(storage_key, _COMMON)
    tests: list[Predicate] = []
    for part in _split_top(expr):
        m = _EQ_RE.match(part) or re.match(r"^\s*([A-Za-z0-9._-]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f'invalid selector: \'{expr}\'; can\'t understand \'{part.strip()}\'')
        label, op, value = m.groups()
        if label not in supported:
            raise bad_request(f'field label not supported: {label}')
        if op == "!=":
            tests.append(lambda o, f=label, v=value: _field_value(o, f) != v)
        else:
            tests.append(lambda o, f=label, v=value: _field_value(o, f) == v)
    return lambda obj: all(t(obj) for t in tests)
