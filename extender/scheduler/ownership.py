"""Which Workload, and which of its pod sets, a pod belongs to: by controller ownerReference
UIDs through objects the cache holds, never by a label or a name in the request.

A pod belongs to the Workload whose controller ownerReference is the pod itself (plain pods,
when that integration comes) or, walking up controller ownerReferences through owners the cache
holds, one of its owners: a Job's pod, the Job (a CronJob's Job is its own Workload's owner, so
the walk stops there); a JobSet's pod, its child Job, then the JobSet. Every owner on the way is
in the pod's namespace (Kubernetes ignores ownerReferences across namespaces; so does this).

Each owner kind brings a pod-set resolver: which of its Workload's pod sets the pod is in, and
which groups of pods fill that pod set's admitted count, as the node cache keys them (by their
controller owner's UID). Only batch/v1 Job is registered; another kind plugs in here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gpuqueue.extender.scheduler.view import CachedPod, ClusterView, WorkloadEntry

MAIN = "main"  # a batch/v1 Job's one pod set, as Kueue names it
MAX_DEPTH = 4  # pod -> Job -> JobSet -> ... : no integration goes deeper


@dataclass(frozen=True, slots=True)
class Membership:
    workload: WorkloadEntry
    pod_set: str
    counted: tuple[str, ...]  # node-cache job keys whose pods (bound or in flight) fill the pod set


# kind of the Workload's owner -> (pod, owner uid) -> (pod set, counted keys)
PodSetResolver = Callable[[CachedPod, str], tuple[str, tuple[str, ...]]]


def _batch_job(pod: CachedPod, job_uid: str) -> tuple[str, tuple[str, ...]]:
    return MAIN, (job_uid,)


POD_SET_RESOLVERS: dict[str, PodSetResolver] = {"Job": _batch_job}


def membership(view: ClusterView, pod: CachedPod) -> Membership | None:
    """The Workload and pod set ``pod`` belongs to, or None: no Workload owns it or any of its
    owners, or its Workload's owner is of a kind without a resolver."""
    uid, kind, parent = pod.uid, "Pod", pod.controller_uid
    for _ in range(MAX_DEPTH):
        wl = view.workload_owned_by(uid)
        if wl is not None and wl.namespace == pod.namespace:
            resolve = POD_SET_RESOLVERS.get(kind)
            if resolve is None:
                return None
            pod_set, counted = resolve(pod, uid)
            return Membership(wl, pod_set, counted)
        if parent is None:
            return None
        owner = view.owner(parent)
        if owner is None or owner.namespace != pod.namespace:
            return None
        uid, kind, parent = owner.uid, owner.kind, owner.controller_uid
    return None
