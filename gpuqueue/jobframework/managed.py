"""Whether gpuqueue manages a batch/v1 Job: Kueue's rules, as pure functions over a ``QueueView``.

- the queue is the ``kueue.x-k8s.io/queue-name`` label; without it, the namespace's
  LocalQueue named ``default`` if one exists (LocalQueueDefaulting);
- a Job with a queue is managed;
- a Job without a queue is left alone, unless ``manageJobsWithoutQueueName`` is on
  and its namespace matches ``managedJobsNamespaceSelector``;
- and, unlike Kueue, a Job that holds or waits for quota (it has a Workload that is not finished)
  stays managed until that Workload finishes, whatever its labels say: removing the label does not
  take it out of its queue (``stays_managed``, ``queue_name_of``).

The webhook (on CREATE, through ``mutation.mutate_job``), the controller and the simulator
all decide with these.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.jobframework.registry import BY_GVK
from gpuqueue.api.labelselector import LabelSelectorError, check_label_selector, selector_matches

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
    """What the decisions need to know about the cluster."""

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


def queued_owner(obj: Mapping[str, Any], frameworks: Collection[str]) -> str | None:
    """The controller of ``obj`` when it is of an enabled integration's kind ("JobSet train"), which
    is queued instead of ``obj`` (Kueue's IsOwnerManagedByKueue). A pod's ReplicaSet stands for its
    Deployment when "deployment" is enabled (Kueue reads the ReplicaSet to find it; gpuqueue does
    not: a bare ReplicaSet's pods are then left alone, and the extender refuses the GPU ones a node)."""
    if not frameworks:
        return None
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        gvk = (ref.get("apiVersion"), ref.get("kind"))
        owner = BY_GVK.get(gvk)
        framework = owner.framework if owner is not None else ("deployment" if gvk == ("apps/v1", "ReplicaSet") else None)
        if framework in frameworks:
            return f"{ref.get('kind')} {ref.get('name')}"
    return None


def is_managed(job: Mapping[str, Any], namespace: str, queues: QueueView, config: ManagedJobsConfig,
               frameworks: Collection[str] = ()) -> bool:
    """Whether an object (as stored, after mutation) is one gpuqueue queues; ``frameworks``: the
    enabled integrations (an object they own is queued through its owner)."""
    if queued_owner(job, frameworks) is not None:
        return False
    if job_queue_name(job) is not None:
        return True
    return config.manage_jobs_without_queue_name and namespace_is_managed(namespace, queues, config)


def stays_managed(job: Mapping[str, Any], namespace: str, queues: QueueView, config: ManagedJobsConfig,
                  has_open_workload: bool) -> bool:
    """Whether gpuqueue keeps (or takes) a Job: a Job with a Workload that is not finished is
    held to it - Kueue lets such a Job go as soon as its label goes, and its pods then run
    uncounted while its Workload lingers - else ``is_managed``."""
    return has_open_workload or is_managed(job, namespace, queues, config)


def queue_name_of(job: Mapping[str, Any], current: str | None) -> str:
    """The LocalQueue a managed Job waits in: the one its label names, so a new label moves it (as
    in Kueue); with the label removed, the one it was in (``current``, its Workload's queue)."""
    return job_queue_name(job) or current or ""
