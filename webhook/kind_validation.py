"""What Kueue's webhook refuses in a managed object of one kind, besides the rules every kind shares
(job_validation): the Ray kinds, whose autoscaler or kept cluster would use more than was admitted.
Pure: ``kind_errors(obj)`` lists the field errors, with Kueue's paths and messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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
