"""Workload records are the controller's: who may create and change kueue.x-k8s.io Workloads.

The quota engine's state of record is the Workloads' ``status.admission``; a restarted
controller rebuilds its usage from it. So nobody but the controller may:

- change a Workload's status (admission, conditions, ...), through ``workloads/status`` or
  otherwise;
- change its spec, except ``spec.active``: what Kueue's own users change
  (``kueuectl stop workload`` / ``resume workload`` merge-patch ``spec.active``);
- create a Workload. gpuqueue makes one for each Job it manages and admits nothing else, so a
  Workload made by hand could only squat the name of a Job's Workload or pretend to hold quota.
  (Kueue lets anyone its RBAC allows create Workloads; gpuqueue deliberately does not.)

Metadata (labels, annotations, owner references, finalizers) is left to RBAC; deleting a Workload
is allowed (the controller queues its Job again, as Kueue does).

Pure: ``validate_workload`` returns the denial message, or None.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpuqueue.webhook.fielderrors import FieldError, aggregate, forbidden

USER_EDITABLE_SPEC = frozenset({"active"})


def _section(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}


def _changed(old: Mapping[str, Any], new: Mapping[str, Any], skip: frozenset[str] = frozenset()) -> list[str]:
    return sorted(k for k in set(old) | set(new) if k not in skip and old.get(k) != new.get(k))


def validate_workload(operation: str, workload: Any, old: Any, username: str,
                      controller_usernames: Collection[str]) -> str | None:
    if username in controller_usernames or operation not in ("CREATE", "UPDATE"):
        return None
    controller = f"only the gpuqueue controller ({', '.join(controller_usernames)})"
    if not isinstance(workload, Mapping):
        return "object: must be a JSON object"
    name = _section(workload, "metadata").get("name") or _section(workload, "metadata").get("generateName") or ""
    if operation == "CREATE":
        return (f'Workload.kueue.x-k8s.io "{name}" is forbidden: {controller} creates Workloads, one for each Job it '
                f"manages; user {username!r} may not (create a Job with a kueue.x-k8s.io/queue-name label instead)")
    if not isinstance(old, Mapping):
        return "oldObject: Required value: an UPDATE review must carry the stored Workload"
    errors: list[FieldError] = []
    for field in _changed(_section(old, "spec"), _section(workload, "spec"), USER_EDITABLE_SPEC):
        errors.append(forbidden(f"spec.{field}", f"{controller} may change it; user {username!r} may only change "
                                                 f"spec.active (kueuectl stop/resume workload) and metadata"))
    for field in _changed(_section(old, "status"), _section(workload, "status")):
        errors.append(forbidden(f"status.{field}", f"{controller} may change a Workload's status; "
                                                   f"user {username!r} may not"))
    if not errors:
        return None
    return f'Workload.kueue.x-k8s.io "{name}" is invalid: {aggregate(errors)}'
