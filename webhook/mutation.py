"""What the mutating webhook does to a Job on CREATE, as a pure function.

``mutate_job`` decides whether a batch/v1 Job is managed by gpuqueue and, if so,
returns the RFC 6902 JSONPatch that suspends it and names its LocalQueue, plus the
Job as it looks after the patch. No I/O: the webhook server and the simulator both
call it, with whatever ``QueueView`` they have.

Rules (Kueue's):
- the queue is the ``kueue.x-k8s.io/queue-name`` label; without it, the namespace's
  LocalQueue named ``default`` if one exists (LocalQueueDefaulting);
- a Job with a queue is managed: ``spec.suspend`` becomes true, whatever it asked;
- a Job without a queue is left alone, unless ``manageJobsWithoutQueueName`` is on
  and its namespace matches ``managedJobsNamespaceSelector``: then it is suspended
  (and waits, since no LocalQueue is named);
- a managed Job without ``kueue.x-k8s.io/priority-class`` gets the default
  WorkloadPriorityClass, when one is marked default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuqueue.api.labelselector import LabelSelectorError, check_label_selector, selector_matches

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
DEFAULT_LOCAL_QUEUE = "default"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# A WorkloadPriorityClass carrying this annotation with value "true" is the default one
# (Kueue has no such marker; PriorityClass's globalDefault is the model).
DEFAULT_PRIORITY_CLASS_ANNOTATION = "gpuqueue.io/default-priority-class"

# Kueue's default managedJobsNamespaceSelector keeps system namespaces out.
DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR: dict[str, Any] = {
    "matchExpressions": [
        {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "gpuqueue-system"]}
    ]
}


class QueueView(Protocol):
    """What the mutation needs to know about the cluster."""

    def local_queue_exists(self, namespace: str, name: str) -> bool: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """Labels of the namespace, or None when the namespace is unknown."""

    def default_priority_class(self) -> str | None: ...


@dataclass
class StaticQueueView:
    """A QueueView over plain data (tests, simulator, a webhook with no cluster)."""

    local_queues: set[tuple[str, str]] = field(default_factory=set)  # (namespace, name)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    default_priority_class_name: str | None = None

    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.local_queues

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.namespaces.get(namespace)

    def default_priority_class(self) -> str | None:
        return self.default_priority_class_name


@dataclass(frozen=True)
class ManagedJobsConfig:
    """The parts of Kueue's Configuration (config.kueue.x-k8s.io) the Job webhook honours."""

    manage_jobs_without_queue_name: bool = False
    managed_jobs_namespace_selector: Mapping[str, Any] | None = field(
        default_factory=lambda: DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR
    )
    local_queue_defaulting: bool = True

    def __post_init__(self) -> None:
        check_label_selector(self.managed_jobs_namespace_selector, "managedJobsNamespaceSelector")

    @classmethod
    def from_kueue_configuration(cls, doc: Mapping[str, Any] | None) -> "ManagedJobsConfig":
        """Read a Kueue Configuration document; raises ValueError naming a bad field."""
        doc = doc or {}
        if not isinstance(doc, Mapping):
            raise ValueError("Configuration: must be a mapping")
        manage = doc.get("manageJobsWithoutQueueName", False)
        if not isinstance(manage, bool):
            raise ValueError(f"manageJobsWithoutQueueName: must be true or false, got {manage!r}")
        selector = doc.get("managedJobsNamespaceSelector", DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR)
        try:
            return cls(manage_jobs_without_queue_name=manage, managed_jobs_namespace_selector=selector)
        except LabelSelectorError as exc:
            raise ValueError(str(exc)) from exc


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


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def job_queue_name(job: Mapping[str, Any]) -> str | None:
    """The queue-name label's value, or None when absent or empty (Kueue ignores "")."""
    value = _labels(job).get(QUEUE_NAME_LABEL)
    return value if isinstance(value, str) and value else None


def namespace_is_managed(namespace: str, queues: QueueView, config: ManagedJobsConfig) -> bool:
    labels = queues.namespace_labels(namespace)
    if labels is None:
        # Every namespace carries its own name as a label; that much is known without a cluster.
        labels = {NAMESPACE_NAME_LABEL: namespace}
    return selector_matches(config.managed_jobs_namespace_selector, labels)


def is_managed(job: Mapping[str, Any], namespace: str, queues: QueueView, config: ManagedJobsConfig) -> bool:
    """Whether a Job (as stored, after mutation) is one gpuqueue queues."""
    if job_queue_name(job) is not None:
        return True
    return config.manage_jobs_without_queue_name and namespace_is_managed(namespace, queues, config)


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
