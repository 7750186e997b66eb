"""What the controller keeps of each managed Job while it tracks it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class JobState:
    key: str  # namespace/name: the engine's key
    namespace: str
    name: str
    uid: str
    wl_name: str
    created: float  # creationTimestamp, seconds
    wl_uid: str = ""
    wl_created: dict | None = None  # the Workload as our create returned it (until the watch has it)
    phase: str = "pending"  # pending | admitted | evicting | blocked | finished
    refusals: int = 0  # how often the API refused the pod template admission needed
    priority: int | None = None  # as the engine was given it (so the Workload need not parse the Job again)
    # False while the API surely holds no reservation of ours for it: never admitted in this term, or
    # its reservation cleared since; True once an admission write may have landed (or on rebuild)
    maybe_reserved: bool = False
