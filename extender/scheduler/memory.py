"""A ClusterView held in memory: for tests, the benchmark and the simulator."""

from __future__ import annotations

from typing import Callable

from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.api.base import ObjectMeta

from gpuqueue.extender.placement.kube import job_key
from gpuqueue.extender.placement.model import FlavorSelector
from gpuqueue.extender.scheduler.view import UNMANAGED, Admitted, NotAdmitted, PodRef, Verdict


class InMemoryClusterView:
    """Jobs are keyed ``namespace/name``; a pod belongs to the Job named by its controller
    ownerReference (else its ``job-name`` label). A Job that was never registered here is not
    managed by gpuqueue."""

    def __init__(self, nodes: NodeCache | None = None,
                 may_evict: Callable[[PodRef], bool] | None = None) -> None:
        self._nodes = nodes if nodes is not None else NodeCache()
        self._jobs: dict[str, Verdict] = {}
        self._pods: dict[str, PodRef] = {}
        self._may_evict = may_evict or (lambda pod: False)

    @property
    def nodes(self) -> NodeCache:
        return self._nodes

    # -- what tests and the simulator set up -------------------------------------
    def admit(self, job: str, flavor: FlavorSelector) -> None:
        self._jobs[job] = Admitted(flavor, job)

    def pend(self, job: str, message: str) -> None:
        self._jobs[job] = NotAdmitted(message)

    def forget(self, job: str) -> None:
        self._jobs.pop(job, None)

    def add_pod(self, meta: ObjectMeta | dict) -> PodRef:
        ref = meta if isinstance(meta, ObjectMeta) else ObjectMeta.model_validate(meta)
        self._pods[ref.uid] = ref
        return ref

    def set_eviction_policy(self, may_evict: Callable[[PodRef], bool]) -> None:
        self._may_evict = may_evict

    # -- ClusterView -------------------------------------------------------------
    def workload_for(self, pod: PodRef) -> Verdict:
        key = job_key(pod)
        if key is None:
            return UNMANAGED
        return self._jobs.get(key, UNMANAGED)

    def pod_by_uid(self, uid: str) -> PodRef | None:
        return self._pods.get(uid)

    def may_evict(self, pod: PodRef) -> bool:
        return bool(self._may_evict(pod))
