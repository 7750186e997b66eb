"""Validation of Job CREATE/UPDATE: nobody but the controller lifts a managed Job's suspend.

Pure. ``validate_job(operation, job, old_job, username, ...)`` returns the denial
message, or None when the request is allowed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpuqueue import access
from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.jobframework.managed import ManagedJobsConfig, QueueView, is_managed, job_queue_name

# The controller runs in the extender's Deployment, as its ServiceAccount.
DEFAULT_CONTROLLER_USERNAMES = (access.service_account_user(access.CONTROLLER_SERVICE_ACCOUNT),)


def _suspended(job: Mapping[str, Any]) -> bool:
    spec = job.get("spec")
    return isinstance(spec, Mapping) and spec.get("suspend") is True


def validate_job(
    operation: str,
    job: Mapping[str, Any],
    old_job: Mapping[str, Any] | None,
    username: str,
    namespace: str,
    queues: QueueView,
    config: ManagedJobsConfig,
    controller_usernames: Collection[str] = DEFAULT_CONTROLLER_USERNAMES,
) -> str | None:
    if not isinstance(job, Mapping):
        return "object: must be a JSON object"
    if operation == "UPDATE" and not isinstance(old_job, Mapping):
        return "oldObject: Required value: an UPDATE review must carry the stored Job"
    old = old_job if isinstance(old_job, Mapping) else None

    if old is not None and not _suspended(old):
        # Running (admitted) Jobs keep their queue: the quota was reserved in that queue.
        if job_queue_name(old) != job_queue_name(job):
            return (f"metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: {job_queue_name(job) or ''!r}: "
                    f"field is immutable while the Job is admitted (not suspended)")

    # A Job counts as managed if either side is: dropping the queue label and unsuspending
    # in one update must not be a way round the queue.
    managed = is_managed(job, namespace, queues, config) or (old is not None and is_managed(old, namespace, queues, config))
    unsuspends = not _suspended(job) and (old is None or _suspended(old))
    if managed and unsuspends and username not in controller_usernames:
        queue = job_queue_name(job) or job_queue_name(old or {})
        where = f"LocalQueue {queue}" if queue else "its queue"
        return (f"spec.suspend: Forbidden: only the gpuqueue controller ({', '.join(controller_usernames)}) may set suspend "
                f"to false on a Job managed by gpuqueue; user {username!r} may not. The Job waits in {where} "
                f"and starts when it is admitted")
    return None
