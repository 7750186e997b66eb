"""What Kueue's webhook refuses in a managed object of one kind, besides the rules every kind shares
(job_validation): the Ray kinds, whose autoscaler or kept cluster would use more than was admitted
(``kind_errors``), and updates of the kinds queued through their pods (``parent_update_errors``).
Pure functions listing field errors, with Kueue's paths and messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuqueue.jobframework.kinds.pods import GROUP_NAME_LABEL
from gpuqueue.webhook.fielderrors import FieldError, forbidden, invalid, required, too_many

HEAD = "head"
MAX_WORKER_GROUPS = 7  # Kueue's 8 pod sets, less the head's


def _ray_cluster_spec(spec: Mapping[str, Any], path: str) -> list[FieldError]:
    errs = []
    if spec.get("enableInTreeAutoscaling") is True:
        errs.append(invalid(f"{path}.enableInTreeAutoscaling", True, "a kueue managed job should not use autoscaling"))
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        return errs
    if len(groups) > MAX_WORKER_GROUPS:
        errs.append(too_many(f"{path}.workerGroupSpecs", len(groups), MAX_WORKER_GROUPS))
    for i, group in enumerate(groups):
        if isinstance(group, Mapping) and group.get("groupName") == HEAD:
            errs.append(forbidden(f"{path}.workerGroupSpecs[{i}].groupName", f'"{HEAD}" is reserved for the head group'))
    return errs


def ray_cluster_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    spec = obj.get("spec")
    return _ray_cluster_spec(spec, "spec") if isinstance(spec, Mapping) else []


def ray_job_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    selector, cluster = spec.get("clusterSelector"), spec.get("rayClusterSpec")
    if selector and cluster is not None:
        return [invalid("spec.clusterSelector", selector, "a kueue managed job should not use an existing cluster")]
    if not selector and cluster is None:
        return [required("spec.rayClusterSpec",
                         "rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector")]
    if selector:
        return []  # it runs on a cluster queued on its own: see uses_existing_cluster
    errs = []
    if spec.get("shutdownAfterJobFinishes") is not True:
        errs.append(invalid("spec.shutdownAfterJobFinishes", bool(spec.get("shutdownAfterJobFinishes")),
                            "a kueue managed job should delete the cluster after finishing"))
    if isinstance(cluster, Mapping):
        errs += _ray_cluster_spec(cluster, "spec.rayClusterSpec")
    return errs


KIND_CHECKS: dict[str, Callable[[Mapping[str, Any]], list[FieldError]]] = {
    "RayCluster": ray_cluster_errors,
    "RayJob": ray_job_errors,
}


def kind_errors(kind: str, obj: Mapping[str, Any]) -> list[FieldError]:
    check = KIND_CHECKS.get(kind)
    return check(obj) if check is not None else []


def priority_class_update_errors(obj: Mapping[str, Any], old: Mapping[str, Any], held: bool) -> list[FieldError]:
    """Kueue's ValidateUpdateForWorkloadPriorityClassName: the WorkloadPriorityClass label may name
    another class at any time (the controller moves the Workload to it), but may not be added to a
    running object (its pods were admitted at the priority it had) nor removed from any."""
    path = f"metadata.labels[{PRIORITY_CLASS_LABEL}]"
    new_class, old_class = _labels(obj, "metadata").get(PRIORITY_CLASS_LABEL), _labels(old, "metadata").get(
        PRIORITY_CLASS_LABEL)
    if not held and not old_class and new_class:
        return [invalid(path, new_class, "WorkloadPriorityClass cannot be added to a non-suspended workload")]
    if old_class and not new_class:
        return [invalid(path, "", "WorkloadPriorityClass cannot be removed from a workload")]
    return []


# -- the kinds queued through their pods: what Kueue refuses when one of them is updated ----------------

def _labels(obj: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    labels = (obj or {}).get("labels") if isinstance(obj, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _immutable(errs: list[FieldError], path: str, new: Any, old: Any) -> None:
    if new != old:
        errs.append(invalid(path, new if new is not None else "", "field is immutable"))


def _replicas(obj: Mapping[str, Any]) -> Any:
    spec = obj.get("spec")
    value = spec.get("replicas") if isinstance(spec, Mapping) else None
    return 1 if value is None else value


def _ready(obj: Mapping[str, Any], field: str) -> Any:
    status = obj.get("status")
    value = status.get(field) if isinstance(status, Mapping) else None
    return value if isinstance(value, int) else 0


def parent_update_errors(kind: str, obj: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """Kueue's ValidateUpdate of a Deployment, StatefulSet or LeaderWorkerSet: its queue is fixed once
    pods run from it (they were queued there), and a StatefulSet's size is that of its pod group
    (written into its pod template at creation): it may only go to zero and back."""
    errs: list[FieldError] = []
    queue_path = f"metadata.labels[{QUEUE_NAME_LABEL}]"
    new_queue, old_queue = _labels(obj, "metadata").get(QUEUE_NAME_LABEL), _labels(old, "metadata").get(QUEUE_NAME_LABEL)
    if kind == "Deployment":
        if _ready(old, "readyReplicas") > 0 or not new_queue:
            _immutable(errs, queue_path, new_queue, old_queue)
        return errs
    _immutable(errs, queue_path, new_queue, old_queue)
    if kind != "StatefulSet":
        return errs
    _immutable(errs, f"spec.template.metadata.labels[{QUEUE_NAME_LABEL}]",
               _labels(obj, "spec", "template", "metadata").get(QUEUE_NAME_LABEL),
               _labels(old, "spec", "template", "metadata").get(QUEUE_NAME_LABEL))
    _immutable(errs, f"metadata.labels[{GROUP_NAME_LABEL}]", _labels(obj, "metadata").get(GROUP_NAME_LABEL),
               _labels(old, "metadata").get(GROUP_NAME_LABEL))
    new_replicas, old_replicas = _replicas(obj), _replicas(old)
    if new_replicas != 0 and old_replicas != 0:
        _immutable(errs, "spec.replicas", new_replicas, old_replicas)
    if old_replicas == 0 and new_replicas != 0 and _ready(obj, "replicas") > 0:
        errs.append(forbidden("spec.replicas", "scaling down is still in progress"))
    return errs
