"""A ClusterView held in memory, for tests and the benchmark: pods, owners (Jobs) and Workloads
are put in directly instead of coming from watches; the verbs judge them exactly as they judge
the controller's view."""

from __future__ import annotations

from collections import deque
from typing import Callable, Mapping

from gpuqueue.api.core import Pod
from gpuqueue.jobframework.enforcement import EnforcementConfig

from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.placement.model import GPU_RESOURCE, FlavorSelector
from gpuqueue.extender.scheduler.ownership import MAIN, count_key
from gpuqueue.extender.scheduler.indexes import ViewIndexes
from gpuqueue.extender.scheduler.view import (ADMITTED, PENDING, CachedPod, Owner, PodSetAdmission, Violation,
                                              WorkloadEntry)

# What ``admit`` grants unless told: room for every pod a test sends.
DEFAULT_COUNT = 1000
DEFAULT_PER_POD = {GPU_RESOURCE: 8}


def job_uid(job: str) -> str:
    """The uid ``InMemoryClusterView`` gives Job ``namespace/name`` unless told another."""
    return f"uid-of-job-{job}"


class InMemoryClusterView(ViewIndexes):
    """Jobs are named ``namespace/name``; a pod belongs to one through its controller
    ownerReference's uid (``job_uid``), as with the controller's view."""

    def __init__(self, nodes: NodeCache | None = None, may_evict: Callable[[CachedPod], bool] | None = None,
                 enforcement: EnforcementConfig | None = None, covered: frozenset[str] | None = None) -> None:
        super().__init__(nodes, enforcement)
        self._covered = covered
        self._may_evict = may_evict or (lambda pod: False)
        self.violations: deque[Violation] = deque(maxlen=256)  # the last ones reported

    # -- what tests and the benchmark set up -------------------------------------
    def add_job(self, job: str, uid: str | None = None) -> Owner:
        namespace, name = job.split("/", 1)
        return self.put_owner(Owner(uid or job_uid(job), namespace, "Job", name))

    def admit(self, job: str, flavor: FlavorSelector, *, count: int = DEFAULT_COUNT,
              per_pod: Mapping[str, int] | None = None, uid: str | None = None) -> WorkloadEntry:
        """Job ``job``'s Workload holds quota for ``count`` pods of pod set main, each asking
        for at most ``per_pod``."""
        per_pod = DEFAULT_PER_POD if per_pod is None else per_pod
        usage = {r: v * count for r, v in per_pod.items()}
        return self._put(job, uid, ADMITTED, "", flavor, {MAIN: PodSetAdmission(count, usage)})

    def add_owner(self, kind: str, key: str, uid: str, controller_uid: str | None = None) -> Owner:
        """An owner of pods of any kind (``namespace/name``), controlled by ``controller_uid``."""
        namespace, name = key.split("/", 1)
        return self.put_owner(Owner(uid, namespace, kind, name, controller_uid))

    def admit_pod_sets(self, key: str, owner_uid: str, pod_sets: Mapping[str, tuple[int, Mapping[str, int],
                                                                                    FlavorSelector]],
                       members: frozenset[str] = frozenset()) -> WorkloadEntry:
        """Workload ``namespace/name`` of owner ``owner_uid`` (and of pods ``members``) holds quota
        for each pod set: (count, per-pod requests, its flavor)."""
        namespace, name = key.split("/", 1)
        admitted = {ps: PodSetAdmission(count, {r: v * count for r, v in per_pod.items()}, flavor)
                    for ps, (count, per_pod, flavor) in pod_sets.items()}
        merged = next(iter(pod_sets.values()))[2] if pod_sets else None
        return self.put_workload(WorkloadEntry(namespace, name, owner_uid, ADMITTED, "", merged, admitted,
                                               members=members))

    def bind_pod(self, uid: str, node: str) -> None:
        """The pod is bound to ``node``, counted as the controller counts it (``count_key``)."""
        pod = self.pod(uid)
        rest = {r: v for r, v in pod.requests.items() if r != GPU_RESOURCE}
        self.nodes.bind(uid, node, pod.gpus, rest, count_key(self, pod))

    def pend(self, job: str, message: str, uid: str | None = None) -> WorkloadEntry:
        return self._put(job, uid, PENDING, message, None, {})

    def set_state(self, job: str, state: str, message: str = "") -> None:
        """Move Job ``job``'s Workload to ``state`` (``view.EVICTED``, ``view.FINISHED``, ...)."""
        wl = self.workload_owned_by(self._owner_of(job))
        self.put_workload(WorkloadEntry(wl.namespace, wl.name, wl.owner_uid, state, message, wl.flavor, wl.pod_sets))

    def forget(self, job: str) -> None:
        wl = self.workload_owned_by(self._owner_of(job))
        if wl is not None:
            self.drop_workload(wl.key)

    def add_pod(self, pod: CachedPod | Pod | Mapping) -> CachedPod:
        """As the pod informer would: ``pod`` is a Pod object (``metadata``, ``spec``)."""
        return self.put_pod(pod if isinstance(pod, CachedPod) else CachedPod.of(
            pod if isinstance(pod, Pod) else Pod.model_validate(pod)))

    def remove_pod(self, uid: str) -> None:
        self.drop_pod(uid)

    def set_eviction_policy(self, may_evict: Callable[[CachedPod], bool]) -> None:
        self._may_evict = may_evict

    def _owner_of(self, job: str) -> str:
        return next((o.uid for o in self._owners.values() if f"{o.namespace}/{o.name}" == job), job_uid(job))

    def _put(self, job: str, uid: str | None, state: str, message: str, flavor: FlavorSelector | None,
             pod_sets: Mapping[str, PodSetAdmission]) -> WorkloadEntry:
        owner = self.add_job(job, uid or self._owner_of(job))
        return self.put_workload(WorkloadEntry(owner.namespace, f"job-{owner.name}", owner.uid, state, message,
                                               flavor, pod_sets))

    # -- ClusterView (the rest: ViewIndexes) ------------------------------------------
    def covered_resources(self) -> frozenset[str] | None:
        return self._covered

    def may_evict(self, pod: CachedPod) -> bool:
        return bool(self._may_evict(pod))

    def report(self, violation: Violation) -> None:
        self.violations.append(violation)
