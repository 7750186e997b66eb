"""Kubernetes LabelSelector matching (metav1.LabelSelector), pure.

Used for Kueue's ``managedJobsNamespaceSelector``. Semantics follow apimachinery's
``LabelSelectorAsSelector``: every ``matchLabels`` pair and every
``matchExpressions`` requirement must hold; an empty selector matches everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class LabelSelectorError(ValueError):
    """A selector that Kubernetes would refuse (unknown operator, bad values)."""


def check_label_selector(selector: Any, path: str = "selector") -> None:
    """Raise LabelSelectorError naming the field if ``selector`` is not a valid LabelSelector."""
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        raise LabelSelectorError(f"{path}: must be an object")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in match_labels.items()
    ):
        raise LabelSelectorError(f"{path}.matchLabels: must map label keys to string values")
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise LabelSelectorError(f"{path}.matchExpressions: must be a list")
    for i, expr in enumerate(exprs):
        where = f"{path}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
            raise LabelSelectorError(f"{where}.key: Required value")
        op = expr.get("operator")
        if op not in OPERATORS:
            raise LabelSelectorError(f"{where}.operator: Unsupported value: {op!r}: supported values: {', '.join(OPERATORS)}")
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise LabelSelectorError(f"{where}.values: must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise LabelSelectorError(f"{where}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'")
        if op in ("Exists", "DoesNotExist") and values:
            raise LabelSelectorError(f"{where}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector``. ``None`` selects nothing, ``{}`` everything.

    The selector must already have passed ``check_label_selector``.
    """
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def selector_query(selector: Mapping[str, Any]) -> str:
    """The ``labelSelector`` query parameter selecting what ``selector`` matches (apimachinery's
    ``LabelSelectorAsSelector(...).String()``). The selector must already have passed
    ``check_label_selector``; ``{}`` gives ``""``, which selects everything."""
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], sorted(expr.get("values") or [])
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(values)})")
        else:
            parts.append(key if op == "Exists" else f"!{key}")
    return ",".join(parts)
