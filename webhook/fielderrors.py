"""Field errors worded as apimachinery's field.Error, so denials read like Kueue's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def _show(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, default=str)[:200]


@dataclass(frozen=True)
class FieldError:
    path: str
    kind: str  # Invalid value | Duplicate value | Required value | Unsupported value | Too many | Forbidden
    detail: str = ""
    value: Any = None
    has_value: bool = False

    def __str__(self) -> str:
        text = f"{self.path}: {self.kind}"
        if self.has_value:
            text += f": {_show(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "Invalid value", detail, value, True)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(path, "Duplicate value", "", value, True)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "Required value", detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, "Forbidden", detail)


def unsupported(path: str, value: Any, allowed: tuple[str, ...]) -> FieldError:
    return FieldError(path, "Unsupported value", "supported values: " + ", ".join(f'"{a}"' for a in allowed), value, True)


def too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError(path, "Too many", f"must have at most {limit} items", count, True)


def aggregate(errors: list[FieldError]) -> str:
    """One message for several errors, as utilerrors.NewAggregate prints it."""
    if len(errors) == 1:
        return str(errors[0])
    return "[" + ", ".join(str(e) for e in errors) + "]"
