"""Validation of a queued workload's CREATE/UPDATE, for every kind (Kueue's jobframework
ValidateJobOnCreate/ValidateJobOnUpdate, through the kind's integration):

- nobody but the controller lifts the hold of a managed object: its suspend flag
  (``Integration.is_suspended``: a Job's ``spec.suspend``, a PyTorchJob's
  ``spec.runPolicy.suspend``, ...) or a pod's scheduling gate ``kueue.x-k8s.io/admission``; an
  object counts as managed if either the stored or the new one is, so dropping the queue label and
  unsuspending in one update is refused;
- nobody but the controller takes a managed object out of gpuqueue's hands (unlike Kueue): the
  queue-name label removed, or a controller of a queued kind added (its owner would be queued
  instead) - else the next update could unsuspend what is no longer managed;
- what Kueue refuses in a managed object of some kinds (kind_validation: a Ray autoscaler, a kept
  cluster);
- the queue-name label is immutable while the object is not held (admitted, running), and must
  name a LocalQueue (a DNS subdomain) when set or changed, as in Kueue.

Pure. ``validate_job(operation, obj, old, username, ...)`` returns the denial message, or None
when the request is allowed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpuqueue import access
from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.jobframework.integration import GATE, Integration, TemplatedJob, dotted
from gpuqueue.jobframework.kinds.pods import MANAGED_LABEL, SCHEDULING_GATE
from gpuqueue.jobframework.managed import ManagedJobsConfig, QueueView, is_managed, job_queue_name, queued_owner
from gpuqueue.jobframework.mutation import BATCH_JOB
from gpuqueue.webhook.fielderrors import aggregate
from gpuqueue.webhook.kind_validation import kind_errors, priority_class_update_errors
from gpuqueue.webhook.kueue_validation import dns_subdomain

# The controller runs in the extender's Deployment, as its ServiceAccount.
DEFAULT_CONTROLLER_USERNAMES = (access.service_account_user(access.CONTROLLER_SERVICE_ACCOUNT),)


def _hold(integration: Integration) -> tuple[str, str]:
    """The field that holds an object of this kind, and what lifting it is called."""
    if isinstance(integration, TemplatedJob):
        return dotted(integration.suspend_path), "set suspend to false on"
    return "spec.schedulingGates", f"remove the scheduling gate {SCHEDULING_GATE} from"


def _managed(obj: Mapping[str, Any], integration: Integration, namespace: str, queues: QueueView,
             config: ManagedJobsConfig, frameworks: Collection[str], stored: bool = False) -> bool:
    if integration.queued_elsewhere(obj) is not None:
        return False
    if stored and integration.hold == GATE:  # a pod the pod webhook gated says so, whatever made it managed
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if isinstance(labels, Mapping) and labels.get(MANAGED_LABEL) == "true":
            return True
    return is_managed(obj, namespace, queues, config, frameworks)


def validate_job(
    operation: str,
    job: Mapping[str, Any],
    old_job: Mapping[str, Any] | None,
    username: str,
    namespace: str,
    queues: QueueView,
    config: ManagedJobsConfig,
    controller_usernames: Collection[str] = DEFAULT_CONTROLLER_USERNAMES,
    integration: Integration = BATCH_JOB,
    frameworks: Collection[str] = (),
) -> str | None:
    kind = integration.kind
    if not isinstance(job, Mapping):
        return "object: must be a JSON object"
    if operation == "UPDATE" and not isinstance(old_job, Mapping):
        return f"oldObject: Required value: an UPDATE review must carry the stored {kind}"
    old = old_job if isinstance(old_job, Mapping) else None
    try:
        held_now = integration.is_suspended(job)
        held_before = old is not None and integration.is_suspended(old)
    except ValueError as exc:
        return f"cannot check this {kind}: {exc}"

    queue_now = job_queue_name(job)
    if queue_now is not None and (old is None or job_queue_name(old) != queue_now):
        errs: list = []
        dns_subdomain(queue_now, f"metadata.labels[{QUEUE_NAME_LABEL}]", errs)
        if errs:
            return aggregate(errs)

    if old is not None and not held_before:
        # Running (admitted) objects keep their queue: the quota was reserved in that queue.
        if job_queue_name(old) != job_queue_name(job):
            return (f"metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: {job_queue_name(job) or ''!r}: "
                    f"field is immutable while the {kind} is admitted (not suspended)")

    privileged = username in controller_usernames
    was_managed = old is not None and _managed(old, integration, namespace, queues, config, frameworks, stored=True)
    managed = _managed(job, integration, namespace, queues, config, frameworks)
    if was_managed and not managed and not privileged:
        elsewhere = integration.queued_elsewhere(job)
        if elsewhere is not None:
            return (f"spec: Forbidden: a {kind} managed by gpuqueue may not be changed so that {elsewhere}; user "
                    f"{username!r} may not take it out of its queue")
        owner = queued_owner(job, frameworks)
        if owner is not None and queued_owner(old, frameworks) is None:
            return (f"metadata.ownerReferences: Forbidden: a {kind} managed by gpuqueue may not be given a controller of "
                    f"a queued kind ({owner}); user {username!r} may not take it out of its queue")
        return (f"metadata.labels[{QUEUE_NAME_LABEL}]: Forbidden: the queue-name label may not be removed from a {kind} "
                f"managed by gpuqueue; user {username!r} may not take it out of its queue (set another LocalQueue to "
                f"move it, or delete the {kind})")

    if managed:
        errs = kind_errors(kind, job)
        if errs:
            return aggregate(errs)
    if old is not None and (managed or was_managed):
        errs = priority_class_update_errors(job, old, held_now)
        if errs:
            return aggregate(errs)

    # Either side managed: dropping the queue label and unsuspending in one update is no way round.
    unsuspends = not held_now and (old is None or held_before)
    if (managed or was_managed) and unsuspends and not privileged:
        field, lifting = _hold(integration)
        queue = job_queue_name(job) or job_queue_name(old or {})
        where = f"LocalQueue {queue}" if queue else "its queue"
        return (f"{field}: Forbidden: only the gpuqueue controller ({', '.join(controller_usernames)}) may {lifting} "
                f"a {kind} managed by gpuqueue; user {username!r} may not. The {kind} waits in {where} "
                f"and starts when it is admitted")
    return None
