"""What the mutating webhook does to a Job on CREATE, as a pure function.

``mutate_job`` decides whether a batch/v1 Job is managed by gpuqueue (the rules are in
``managed``) and, if so, returns the RFC 6902 JSONPatch that suspends it and names its
LocalQueue, plus the Job as it looks after the patch. No I/O: the webhook server and the
simulator both call it, with whatever ``QueueView`` they have.

On a managed Job (Kueue's rules):
- ``spec.suspend`` becomes true, whatever it asked (a Job managed without a queue name
  waits, since no LocalQueue is named);
- without a queue-name label, the namespace's LocalQueue named ``default`` (when it exists
  and LocalQueueDefaulting is on) is written into it;
- without ``kueue.x-k8s.io/priority-class``, it gets the default WorkloadPriorityClass,
  when one is marked default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuqueue.jobframework.managed import (DEFAULT_LOCAL_QUEUE, ManagedJobsConfig, QueueView, job_queue_name,
                                           namespace_is_managed)


@dataclass(frozen=True)
class MutationResult:
    managed: bool
    queue_name: str | None  # None: unmanaged, or managed without a queue
    patch: list[dict[str, Any]]  # JSONPatch ops; empty when nothing changes
    job: dict[str, Any]  # the Job after the patch (the input itself when unchanged)
    reason: str  # one line saying why, for logs and the simulator

    @property
    def changed(self) -> bool:
        return bool(self.patch)


def escape_json_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def mutate_job(
    job: Mapping[str, Any],
    queues: QueueView,
    config: ManagedJobsConfig,
    namespace: str | None = None,
) -> MutationResult:
    """Decide the CREATE-time mutation of a Job. ``namespace`` defaults to metadata.namespace.

    Raises ValueError when ``job`` is not shaped like a Job (the caller turns it into a denial).
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
    if namespace is None:
        namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("object.metadata.namespace: Required value")
    labels = labels or {}

    new_labels: dict[str, str] = {}
    queue = job_queue_name(job)
    if queue is not None:
        reason = f"queued in LocalQueue {queue} (label)"
    elif config.local_queue_defaulting and queues.local_queue_exists(namespace, DEFAULT_LOCAL_QUEUE):
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

    patch: list[dict[str, Any]] = []
    out_meta = dict(meta)
    out_spec = dict(spec)
    if spec.get("suspend") is not True:
        patch.append({"op": "add", "path": "/spec/suspend", "value": True})
        out_spec["suspend"] = True
    if new_labels:
        merged = {**labels, **new_labels}
        if labels and "labels" in meta:
            for key, value in new_labels.items():
                patch.append({"op": "add", "path": "/metadata/labels/" + escape_json_pointer(key), "value": value})
        elif isinstance(job.get("metadata"), Mapping):
            # Adding /metadata/labels/<key> to a Job without labels fails in the API server
            # ("doc is missing path"), and so would an empty or null map: send the whole map.
            patch.append({"op": "add", "path": "/metadata/labels", "value": merged})
        else:
            patch.append({"op": "add", "path": "/metadata", "value": {"labels": merged}})
        out_meta["labels"] = merged
    out = dict(job)
    out["metadata"] = out_meta
    out["spec"] = out_spec
    return MutationResult(True, queue, patch, out, reason)
