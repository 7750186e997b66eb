"""What placement reasons about: nodes, the flavor a pod was admitted to, and what one pod asks
for. Plain frozen data; taints and tolerations are ``gpuqueue.api.scheduling``'s (shared with
the quota engine); conversion from Kubernetes objects is in ``kube.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from gpuqueue.api.scheduling import (HARD_EFFECTS, UNSCHEDULABLE_TAINT, Taint, Toleration,  # noqa: F401
                                     untolerated_taint)

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A Node as placement sees it. Resources are integers in Kueue's units
    (cpu in millis, everything else whole units rounded up)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Mapping[str, int] = field(default_factory=dict)
    ready: bool = True

    @property
    def gpus(self) -> int:
        return self.allocatable.get(GPU_RESOURCE, 0)

    @property
    def hard_taints(self) -> tuple[Taint, ...]:
        return tuple(t for t in self.taints if t.effect in HARD_EFFECTS)


@dataclass(frozen=True, slots=True)
class FlavorSelector:
    """The admitted ResourceFlavor as far as placement cares: its name (for messages) and the
    nodeLabels every node must carry. When a Workload got several flavors (one per resource),
    the view passes their merged nodeLabels and joined names."""

    name: str
    node_labels: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def of(cls, name: str, node_labels: Mapping[str, str] | None = None,
           tolerations: tuple[Toleration, ...] = ()) -> "FlavorSelector":
        return cls(name, tuple(sorted((node_labels or {}).items())), tuple(tolerations))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.node_labels)

    @property
    def mismatch_reason(self) -> str:
        # One string per flavor, not per node: kube-scheduler counts identical reasons.
        if not self.node_labels:
            return f"node is not of flavor {self.name}"
        need = ", ".join(f"{k}={v}" for k, v in self.node_labels)
        return f"node is not of flavor {self.name} (needs {need})"


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod to place: what it asks for and what it must land on.

    ``flavor`` None means no flavor constraint (used for pods placement is asked about
    without an admission, e.g. by the simulator for unmanaged pods)."""

    uid: str
    gpus: int = 0
    requests: Mapping[str, int] = field(default_factory=dict)  # everything but GPUs
    tolerations: tuple[Toleration, ...] = ()
    flavor: FlavorSelector | None = None
    job_key: str | None = None

    @property
    def all_tolerations(self) -> tuple[Toleration, ...]:
        if self.flavor is None or not self.flavor.tolerations:
            return self.tolerations
        return self.tolerations + self.flavor.tolerations
