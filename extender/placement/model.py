"""What placement reasons about: nodes, taints, tolerations, the flavor a pod was admitted to,
and what one pod asks for. Plain frozen data; parsing from Kubernetes JSON is in ``kube.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

GPU_RESOURCE = "nvidia.com/gpu"

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"
# The effects kube-scheduler's TaintToleration filter looks at; PreferNoSchedule only scores.
HARD_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = ""  # "" means Equal, as in Kubernetes
    value: str = ""
    effect: str = ""  # "" matches every effect

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' Toleration.ToleratesTaint, rule for rule."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        if self.operator == "Exists":
            return True
        return False


def untolerated_taint(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration matches, or None."""
    for taint in taints:
        if taint.effect not in HARD_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A Node as placement sees it. Resources are integers in Kueue's units
    (cpu in millis, everything else whole units rounded up)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Mapping[str, int] = field(default_factory=dict)

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
