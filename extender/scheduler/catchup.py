"""When a verdict may only say that the extender's caches are behind the request.

kube-scheduler asks about a pod within milliseconds of its creation (or ungating), often before
the extender's pod watch has delivered it, and a follower's Workload watch may not have brought
the admission that let the pod be made. Answering then with an ``Error`` or a refusal costs the
pod far more than the lag: kube-scheduler 1.24 parks both with its unschedulable pods until a
Node changes or five minutes pass (docs/extender.md). So /filter waits, once and bounded, for
the caches to take in what the request shows, and judges again at each change.

Not yet (waited for):

- the pod's uid is not in the pod cache (``Retry.lagging``);
- the request's pod is a newer version than the cache's and the verdict refuses it (an
  ownerReference, a label, a group's ungating the cache has not seen);
- the pod is refused because its Workload is missing, pending, or admitted for fewer or smaller
  pods in a cache that may not hold the (new) admission yet (``ClusterView.workloads_behind``),
  unless a wait for that already timed out and no Workload has changed since
  (``ClusterView.workloads_quiet``): a follower's Workload watch brings nothing between
  bookmarks when no Workload is written, so without that every refused pod version (a tenant's
  pods named for a queue, owned by a suspended Job or by nothing that exists, updated at will)
  would hold kube-scheduler's cycle for the whole wait. An admission is a Workload write, so its
  event ends the quiet;
- a candidate node is missing from the node cache, and no candidate it holds takes the pod (when
  one does, the pod goes there at once: kube-scheduler's cycle waits on this answer).

Final at once: a pod the cache holds at the request's version or later, a uid naming another
pod, a uid the pod cache saw deleted, a request without a uid.
"""

from __future__ import annotations

from gpuqueue.api.base import ObjectMeta

from gpuqueue.extender.placement.filter import NOT_CACHED, FilterResult
from gpuqueue.extender.scheduler.enforce import newer
from gpuqueue.extender.scheduler.ownership import membership
from gpuqueue.extender.scheduler.view import ClusterView, NotAdmitted, Retry, Verdict

WAIT_SECONDS = 1.0  # at most, once per /filter: a second in kube-scheduler's cycle against minutes parked
ADMISSION = "its Workload's admission"


def behind(view: ClusterView, meta: ObjectMeta, verdict: Verdict, result: FilterResult | None = None) -> str | None:
    """What the caches lack for ``verdict`` (and, for an admitted pod, the nodes' ``result``) to
    be final, or None when it is."""
    if isinstance(verdict, Retry):
        return "its pod" if verdict.lagging else None
    if isinstance(verdict, NotAdmitted):
        pod = view.pod(meta.uid or "")
        if pod is None:
            return None
        if newer(meta.resource_version, pod.resource_version):
            return f"pod version {meta.resource_version}"
        if pod.controller_uid is None and not pod.labels and not pod.annotations and membership(view, pod) is None:
            return None  # a bare pod nothing queues: no Workload is coming (and it may not stall kube-scheduler)
        # pending or missing, or admitted for fewer pods or less than this one (a new admission,
        # after the Job's parallelism changed, may be on its way)
        if not view.workloads_quiet and view.workloads_behind(meta.resource_version):
            return ADMISSION
        return None
    return nodes_behind(result) if result is not None else None


def nodes_behind(result: FilterResult) -> str | None:
    """For an admitted pod: the candidate the node cache lacks, when no candidate it holds takes
    the pod (it may be the one that would)."""
    if not result.passed and (result.failed or result.unresolvable):
        missing = next((n for n, why in result.reasons().items() if why == NOT_CACHED), None)
        return f"node {missing}" if missing is not None else None
    return None
