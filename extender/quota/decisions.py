"""What the engine decides; the simulator reports these, the controller carries them out."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuqueue.extender.quota.model import Admission


@dataclass(frozen=True, slots=True)
class Admitted:
    key: str
    admission: Admission
    # Victims whose eviction makes the room; the controller must see them gone before it
    # unsuspends this Job. The engine already counts the room as this workload's.
    after_evicting: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Preempted:
    key: str
    cluster_queue: str
    preemptor: str
    preemptor_cluster_queue: str
    reason: str  # InClusterQueue, InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing


@dataclass(frozen=True, slots=True)
class Evicted:
    """Evicted for a reason other than preemption (a stopped queue)."""

    key: str
    cluster_queue: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Pending:
    key: str
    cluster_queue: str | None
    message: str
    reason: str = "Inadmissible"


Decision = Admitted | Preempted | Evicted | Pending

PENDING_EVALUATION = "Workload is pending evaluation in the scheduling queue"
BYPASSED = "Bypassed scheduling evaluation because an equivalent workload recently failed"
NAMESPACE_MISMATCH = "workload namespace doesn't match ClusterQueue selector"  # Kueue v0.18 (lower-case w)
# Kueue's deactivation (spec.active false): the reason of Evicted and Requeued=False, and its words
DEACTIVATED = "Deactivated"
DEACTIVATED_MESSAGE = "The workload is deactivated"
REACTIVATED = "Reactivated"
PODS_READY_TIMEOUT = "PodsReadyTimeout"  # waitForPodsReady's eviction: requeued after a backoff
REACTIVATED_MESSAGE = "The workload was reactivated"


def counted_eviction(reason: str, underlying_cause: str = "") -> tuple[str, str]:
    """(reason, underlying_cause) of an eviction as Kueue's metrics label it: every deactivation
    is Deactivated, its cause (the Evicted reason's DeactivatedDueTo<cause>) the underlying one."""
    if reason.startswith(f"{DEACTIVATED}DueTo"):
        return DEACTIVATED, reason.removeprefix(f"{DEACTIVATED}DueTo")
    return reason, underlying_cause


# TAS: the quota would do, but no domain of the flavor's nodes holds the pods (Kueue's
# TopologyPlacementFailed, KEP-10852's tiered reasons)
TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
# Reasons of a workload that did not fit (Kueue's "no fit" reasons); an equivalent workload
# arriving meanwhile is not evaluated and says BYPASSED with the same reason.
NO_FIT_REASONS = frozenset({"WaitingForQuota", "ExceedsMaxQuota", "NoMatchingFlavor", TOPOLOGY_PLACEMENT_FAILED})
