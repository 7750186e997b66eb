"""A GPU workload nothing will ever admit: why, and what to do, in one wording shared by the webhook
(admission warnings at creation), the controller (an Event on the object), `gpuqueue explain` and
the extender (the hint in a refused pod's PodScheduled message).

Kueue lets such a workload run unqueued; under gpuqueue's Strict enforcement its pods would then
wait for a node for ever. Nothing here refuses anything: it only says so, early.

The cases, for an object that requests a resource enforcement checks, outside the exempt
namespaces, with Strict enforcement, not queued through a queued owner:
- its kind's integration is not enabled (``integrations.frameworks``): nothing queues it;
- it names a LocalQueue that does not exist in its namespace (it waits until it does);
- it names no LocalQueue and its namespace is outside ``managedJobsNamespaceSelector``;
- it names no LocalQueue and its namespace has no LocalQueue named ``default``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.jobframework.enforcement import EnforcementConfig
from gpuqueue.jobframework.integration import Integration
from gpuqueue.jobframework.managed import (DEFAULT_LOCAL_QUEUE, ManagedJobsConfig, QueueView, job_queue_name,
                                           namespace_is_managed, queued_owner)

EVENT_REASON = "NotQueued"  # the reason of the Event on the object


@dataclass(frozen=True)
class Unqueued:
    reason: str  # IntegrationDisabled, LocalQueueMissing, NamespaceNotManaged, NoLocalQueue
    message: str  # one line: what, why, what to do


def how_to_queue(namespace: str) -> str:
    """What to do, in any of the cases (the hint of a refused pod, whose cause the extender cannot see)."""
    return (f"to queue it, create it (or its Job) with the label {QUEUE_NAME_LABEL}=<LocalQueue> naming a LocalQueue "
            f"of namespace {namespace} (kubectl get localqueues -n {namespace}), or create a LocalQueue named "
            f"\"{DEFAULT_LOCAL_QUEUE}\" there first")


def why_unqueued(obj: Mapping[str, Any], kind: str, framework: str, namespace: str,
                 enforced: Callable[[], Collection[str]], queues: QueueView, config: ManagedJobsConfig,
                 frameworks: Collection[str]) -> Unqueued | None:
    """Why ``obj`` (of ``kind``, queued by integration ``framework``; as it will be stored, after
    the mutating webhooks) will never be admitted, or None when it will be or need not be.
    ``enforced``: the resources it requests that Strict enforcement checks (empty: none, or its
    namespace is exempt, or enforcement is not Strict: nothing to warn of); asked last, as reading
    the pod sets is what costs."""
    queue = job_queue_name(obj)
    if framework in frameworks and queue is not None and queues.local_queue_exists(namespace, queue):
        return None  # the common case, decided without reading its pod sets
    if queued_owner(obj, frameworks) is not None:
        return None
    requested = enforced()
    if not requested:
        return None
    name = ((obj.get("metadata") or {}).get("name")) or "(generated name)"
    what = f"{kind} {namespace}/{name} requests {', '.join(sorted(requested))} but"
    outcome = "its pods will wait for a node for ever (enforcement Strict)"
    if framework not in frameworks:
        return Unqueued("IntegrationDisabled", f"{what} gpuqueue does not queue {kind}s here (integration "
                        f"{framework!r} is not in integrations.frameworks): {outcome}; run it as a kind gpuqueue "
                        f"queues (a batch/v1 Job with the label {QUEUE_NAME_LABEL}), or ask the administrator "
                        f"to enable {framework!r}")
    if queue is not None:
        if queues.local_queue_exists(namespace, queue):
            return None
        return Unqueued("LocalQueueMissing", f"{what} LocalQueue {queue} doesn't exist in namespace {namespace}: it "
                        f"waits, unadmitted, until it does; create it, or name an existing LocalQueue in its label "
                        f"{QUEUE_NAME_LABEL} (kubectl get localqueues -n {namespace})")
    if not namespace_is_managed(namespace, queues, config):
        return Unqueued("NamespaceNotManaged", f"{what} namespace {namespace} is outside managedJobsNamespaceSelector, "
                        f"so it is not queued: {outcome}; run it in a namespace gpuqueue manages")
    if config.manage_jobs_without_queue_name:
        return None  # managed without a queue: it waits with its own message
    why = (f"it names no LocalQueue (label {QUEUE_NAME_LABEL}) and namespace {namespace} has no LocalQueue named "
           f"\"{DEFAULT_LOCAL_QUEUE}\"" if not queues.local_queue_exists(namespace, DEFAULT_LOCAL_QUEUE) else
           f"it names no LocalQueue and was not given namespace {namespace}'s LocalQueue \"{DEFAULT_LOCAL_QUEUE}\" "
           f"(created before gpuqueue saw that LocalQueue)")
    return Unqueued("NoLocalQueue", f"{what} {why}: {outcome}; {how_to_queue(namespace)}")


def enforced_requests(integration: Integration, obj: Mapping[str, Any], namespace: str, enforcement: EnforcementConfig,
                      covered: Collection[str] | None) -> frozenset[str]:
    """The resources ``obj``'s pods would request that Strict enforcement checks (none: not Strict,
    an exempt namespace, or pod sets that cannot be read here, such as a TrainJob's runtime's)."""
    if not enforcement.refusing:
        return frozenset()
    try:
        requested = {r for ps in integration.pod_sets(obj) for r, q in ps.requests().items() if q.value > 0}
    except (ValueError, ValidationError, LookupError, TypeError, AttributeError, NotImplementedError):
        return frozenset()
    return enforcement.checked_requests(namespace, requested, covered)


def has_controller(obj: Mapping[str, Any]) -> bool:
    """Whether some object controls ``obj`` (a pod of a Job, a ReplicaSet...): then that one is told."""
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    return isinstance(refs, list) and any(isinstance(r, Mapping) and r.get("controller") is True for r in refs)
