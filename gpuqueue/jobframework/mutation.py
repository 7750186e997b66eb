"""What the mutating webhook does to a workload on CREATE, as a pure function.

``mutate_job`` decides whether an object of any integration's kind is managed by gpuqueue (the
rules are in ``managed``) and, if so, returns the RFC 6902 JSONPatch that holds it and names its
LocalQueue, plus the object as it looks after the patch. No I/O: the webhook server and the
simulator both call it, with whatever ``QueueView`` they have.

On a managed object (Kueue's rules, for every kind):
- it is held as its integration holds it: a suspend flag set to true whatever it asked
  (``Integration.suspend``: a Job's ``spec.suspend``, a PyTorchJob's ``spec.runPolicy.suspend``,
  ...); a pod gated (``pods.gated``); a Deployment's, StatefulSet's or LeaderWorkerSet's pod
  templates marked so that the pod integration queues their pods (``marked``);
- without a queue-name label, the namespace's LocalQueue named ``default`` (when it exists, the
  namespace is within ``managedJobsNamespaceSelector`` and LocalQueueDefaulting is on, as in
  Kueue's ApplyDefaultLocalQueue) is written into it;
- without ``kueue.x-k8s.io/priority-class``, it gets the default WorkloadPriorityClass,
  when one is marked default.

Not managed on its own: an object whose controller is of an enabled integration's kind (a
JobSet's Jobs, a RayJob's RayCluster, a Job's pods: the owner is queued), unless it is a pod its
parent marked (``kueue.x-k8s.io/pod-suspending-parent``), which is queued whatever else it says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuqueue.jobframework.integration import GATE, Integration, dotted, get_path
from gpuqueue.jobframework.kinds.batchjob import BatchJob
from gpuqueue.jobframework.kinds.pods import SUSPENDING_PARENT, PodTemplateOwner, gated
from gpuqueue.jobframework.managed import (DEFAULT_LOCAL_QUEUE, ManagedJobsConfig, QueueView, job_queue_name,
                                           namespace_is_managed, queued_owner)
from gpuqueue.jobframework.patch import json_patch

BATCH_JOB = BatchJob()


@dataclass(frozen=True)
class MutationResult:
    managed: bool
    queue_name: str | None  # None: unmanaged, or managed without a queue
    patch: list[dict[str, Any]]  # JSONPatch ops; empty when nothing changes
    job: dict[str, Any]  # the object after the patch (the input itself when unchanged)
    reason: str  # one line saying why, for logs and the simulator

    @property
    def changed(self) -> bool:
        return bool(self.patch)


def _check_templates(integration: PodTemplateOwner, obj: Mapping[str, Any]) -> None:
    """The pod templates ``marked`` writes into are objects, and so are their labels and annotations."""
    for path in integration.template_paths:
        template = get_path(obj, path, required=False)
        if template is None:
            continue
        where = dotted(path)
        if not isinstance(template, Mapping):
            raise ValueError(f"{where}: must be an object")
        meta = template.get("metadata")
        if meta is not None and not isinstance(meta, Mapping):
            raise ValueError(f"{where}.metadata: must be an object")
        for field in ("labels", "annotations"):
            if (meta or {}).get(field) is not None and not isinstance(meta[field], Mapping):
                raise ValueError(f"{where}.metadata.{field}: must be an object")


def held(integration: Integration, obj: dict[str, Any], queue: str | None) -> dict | None:
    """``obj`` held until admitted, as its integration holds it (None: it already is). Raises
    ValueError naming the field when ``obj`` is not shaped so that it can be held."""
    if integration.hold != GATE:
        return integration.suspend(obj)
    if isinstance(integration, PodTemplateOwner):
        _check_templates(integration, obj)
        return integration.marked(obj, queue)
    return gated(obj)


def suspended_by_parent(obj: Mapping[str, Any]) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations")
    return isinstance(annotations, Mapping) and SUSPENDING_PARENT in annotations


def mutate_job(
    job: Mapping[str, Any],
    queues: QueueView,
    config: ManagedJobsConfig,
    namespace: str | None = None,
    integration: Integration = BATCH_JOB,
    frameworks: tuple[str, ...] = (),
) -> MutationResult:
    """Decide the CREATE-time mutation of an object of ``integration``'s kind (a batch/v1 Job by
    default). ``namespace`` defaults to metadata.namespace; ``frameworks``: the enabled
    integrations, whose kinds queue what they own.

    Raises ValueError when ``job`` is not shaped like such an object (the caller turns it into a
    denial).
    """
    if not isinstance(job, Mapping):
        raise ValueError("object: must be a JSON object")
    meta = job.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise ValueError("object.metadata: must be a JSON object")
    spec = job.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("object.spec: Required value")
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, Mapping):
        raise ValueError("object.metadata.labels: must be a JSON object")
    annotations = meta.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise ValueError("object.metadata.annotations: must be a JSON object")
    if namespace is None:
        namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("object.metadata.namespace: Required value")
    labels = labels or {}

    new_labels: dict[str, str] = {}
    queue = job_queue_name(job)
    owner = queued_owner(job, frameworks)
    elsewhere = integration.queued_elsewhere(job)
    if elsewhere is not None:
        return MutationResult(False, None, [], dict(job), f"unmanaged: {elsewhere}")
    if integration.hold == GATE and suspended_by_parent(job):
        reason = f"queued through its parent ({SUSPENDING_PARENT})"
    elif owner is not None:
        return MutationResult(False, None, [], dict(job), f"unmanaged: its owner {owner} is queued instead")
    elif queue is not None:
        reason = f"queued in LocalQueue {queue} (label)"
    elif config.local_queue_defaulting and queues.local_queue_exists(namespace, DEFAULT_LOCAL_QUEUE) \
            and namespace_is_managed(namespace, queues, config):
        queue = DEFAULT_LOCAL_QUEUE
        new_labels[QUEUE_NAME_LABEL] = queue
        reason = f"queued in LocalQueue {queue} (the namespace's default LocalQueue)"
    elif config.manage_jobs_without_queue_name and namespace_is_managed(namespace, queues, config):
        reason = "managed without a queue name (manageJobsWithoutQueueName)"
    else:
        return MutationResult(False, None, [], dict(job), "unmanaged: no queue-name label and no default LocalQueue")

    priority = labels.get(PRIORITY_CLASS_LABEL)
    if not (isinstance(priority, str) and priority):
        default_class = queues.default_priority_class()
        if default_class:
            new_labels[PRIORITY_CLASS_LABEL] = default_class

    out = dict(job)
    if new_labels:
        out["metadata"] = {**meta, "labels": {**labels, **new_labels}}
    out = held(integration, out, queue) or out
    return MutationResult(True, queue, json_patch(job, out), out, reason)
