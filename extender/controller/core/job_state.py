"""What the controller keeps of each managed Job while it tracks it, and what its parts (the
reconcilers, the rebuild, the writers) read of the controller (Scheduling)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from gpuqueue.extender.controller.kinds.managed_kinds import BATCH_JOB, ManagedKind
from gpuqueue.extender.quota.engine import QuotaEngine


@dataclass
class JobState:
    key: str  # namespace/name: the engine's key
    namespace: str
    name: str
    uid: str
    wl_name: str
    created: float  # creationTimestamp, seconds
    wl_uid: str = ""
    # pending | admitted | evicting | blocked | finished, or departed: the Job is gone while its
    # reservation stands (its pods may still run), kept under a key of its own (departed_key)
    phase: str = "pending"
    queue_name: str = ""  # the LocalQueue its Workload names (a label removed leaves it there)
    generation: int = 0  # the Job's metadata.generation its pod sets were last compared at
    refusals: int = 0  # how often the API refused the pod template admission needed
    priority: int | None = None  # as the engine was given it (so the Workload need not parse the Job again)
    # False while the API surely holds no reservation of ours for it: never admitted in this term, or
    # its reservation cleared since; True once an admission write may have landed (or on rebuild)
    maybe_reserved: bool = False
    kind: ManagedKind = BATCH_JOB  # its kind (integration)


def departed_key(st: JobState) -> str:
    """The engine's key of a gone Job's reservation: apart from a new Job of the same name ('@'
    is in no object name)."""
    return f"{st.namespace}/{st.name}@{st.uid}"


class Scheduling(Protocol):
    """The controller as its parts see it, live: whether it leads and has rebuilt its engine in
    this term, its engine (None until rebuilt), the Jobs it tracks (a write for a Job no longer
    tracked is moot), and the kinds it queues (fewer after start: a missing CRD, an old server)."""

    @property
    def leader(self) -> bool: ...

    @property
    def recovered(self) -> bool:
        """The engine is rebuilt for this term: events before that are the rebuild's to judge."""

    @property
    def engine(self) -> QuotaEngine | None: ...

    @property
    def jobs(self) -> Mapping[str, JobState]: ...

    @property
    def kinds(self) -> Sequence[ManagedKind]:
        """The kinds it queues."""

    @property
    def kinds_by_kind(self) -> Mapping[str, ManagedKind]:
        """The kinds it queues, by kind name."""
