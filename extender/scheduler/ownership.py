"""Which Workload, and which of its pod sets, a pod belongs to: by ownerReference UIDs through
objects the cache holds, never by a label or a name in the request.

A pod belongs to the Workload that the pod itself owns (a plain pod's Workload is controlled by the
pod; a pod group's Workload - plain groups, StatefulSets, LeaderWorkerSets, and each pod of a
Deployment - is owned by every pod of the group), or, walking up controller ownerReferences
through owners the cache holds, the Workload of the first owner that has one: a Job's pod, the
Job (a CronJob's Job is its own Workload's owner, so the walk stops there); a JobSet's pod, its
child Job, then the JobSet; a TrainJob's, Job -> JobSet -> TrainJob; a RayJob's, RayCluster ->
RayJob (its submitter: Job -> RayJob); an MPIJob's launcher, Job -> MPIJob. Every owner on the
way is in the pod's namespace (Kubernetes ignores ownerReferences across namespaces; so does
this).

The Workload's owner's integration (``gpuqueue.jobframework.registry``, by the owner's kind) then
says which pod set the pod is in, from the labels its kind's controller puts on its pods
(``jobset.sigs.k8s.io/replicatedjob-name``, ``training.kubeflow.org/replica-type``, ``ray.io/group``,
``kueue.x-k8s.io/role-hash``, ...) and the kind between the pod and the owner. A label picks
among the pod sets of the one Workload the UIDs lead to: a pod that claims another pod set than
its own is held to that pod set's per-pod requests and count, so it cannot add capacity.

The pods that fill a pod set's admitted count are counted together in the node cache under one
key (``Membership.key``): a batch/v1 Job's pods under the Job's uid (their controller, as the
controller binds them today), every other kind's under ``<workload namespace/name>/<pod set>``
(their controllers - a PyTorchJob, a RayCluster, a ReplicaSet - own pods of several pod sets or
Workloads). ``count_key`` is the key a pod is to be bound under.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuqueue.jobframework.integration import PodFacts
from gpuqueue.jobframework.registry import BY_KIND

from gpuqueue.extender.scheduler.view import CachedPod, ClusterView, WorkloadEntry

MAIN = "main"  # a batch/v1 Job's one pod set, as Kueue names it
# pod -> StatefulSet -> leader pod -> StatefulSet -> LeaderWorkerSet is the longest chain
MAX_DEPTH = 5


@dataclass(frozen=True, slots=True)
class Membership:
    workload: WorkloadEntry
    pod_set: str | None  # None: the pod names no pod set of its kind
    key: str  # node-cache key under which the pod set's pods (bound or in flight) are counted

    @property
    def counted(self) -> tuple[str, ...]:
        return (self.key,)


def membership(view: ClusterView, pod: CachedPod) -> Membership | None:
    """The Workload and pod set ``pod`` belongs to, or None: no Workload owns it or any of its
    owners, or its Workload's owner is of a kind gpuqueue has no integration for."""
    uid, kind, parent, child_kind = pod.uid, "Pod", pod.controller_uid, None
    for _ in range(MAX_DEPTH):
        wl = view.workload_owned_by(uid)
        if wl is not None and wl.namespace == pod.namespace:
            integration = BY_KIND.get(kind)
            if integration is None:
                return None
            pod_set = integration.pod_set_of(PodFacts(pod.labels, pod.annotations, child_kind))
            key = uid if kind == "Job" else f"{wl.key}/{pod_set}"
            return Membership(wl, pod_set, key)
        if parent is None:
            return None
        owner = view.owner(parent)
        if owner is None or owner.namespace != pod.namespace:
            return None
        child_kind = None if kind == "Pod" and uid == pod.uid else kind
        uid, kind, parent = owner.uid, owner.kind, owner.controller_uid
    return None


def count_key(view: ClusterView, pod: CachedPod) -> str | None:
    """The node-cache key to bind ``pod`` under: its pod set's (``Membership.key``), or, for a pod
    of no Workload, its controller's uid."""
    member = membership(view, pod)
    return member.key if member is not None and member.pod_set is not None else pod.controller_uid
