"""What the extender endpoints need to know about the cluster, as a protocol.

The controller implements it over its watch cache; ``memory.InMemoryClusterView`` implements
it for tests, the benchmark and the simulator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Union

from gpuqueue.api.base import ObjectMeta

from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.placement.model import FlavorSelector

PodRef = ObjectMeta  # a pod's identity: namespace, name, uid, labels, ownerReferences


@dataclass(frozen=True, slots=True)
class Unmanaged:
    """Not a pod of a Job gpuqueue manages: kube-scheduler decides alone."""


@dataclass(frozen=True, slots=True)
class NotAdmitted:
    """A managed pod whose Workload has no quota reservation."""

    message: str  # the Workload's pending message


@dataclass(frozen=True, slots=True)
class Admitted:
    """A pod of an admitted Workload: it must land on a node of ``flavor``."""

    flavor: FlavorSelector
    job_key: str


Verdict = Union[Unmanaged, NotAdmitted, Admitted]
UNMANAGED = Unmanaged()


class ClusterView(Protocol):
    @property
    def nodes(self) -> NodeCache:
        """Nodes, and the GPUs bound and in-flight pods take on them."""

    def workload_for(self, pod: PodRef) -> Verdict:
        """Is this pod gpuqueue's, and if so is its Workload admitted, to which flavor?"""

    def pod_by_uid(self, uid: str) -> PodRef | None:
        """A pod the view knows (kube-scheduler names preemption victims by UID only)."""

    def may_evict(self, pod: PodRef) -> bool:
        """The quota engine's word on evicting this pod of an admitted Workload."""
