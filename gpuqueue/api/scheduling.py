"""Kubernetes' node-admission rules shared by the quota engine and placement: taints,
tolerations and which taint a pod does not tolerate. Plain frozen data and pure functions;
the pydantic models in ``base.py`` convert to these with ``to_spec()``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"
# The effects kube-scheduler's TaintToleration filter (and Kueue's flavor check) look at;
# PreferNoSchedule only scores.
HARD_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    def __str__(self) -> str:
        # apimachinery's Taint.ToString: key=value:effect, or key:effect without a value
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = ""  # "" means Equal, as in Kubernetes
    value: str = ""
    effect: str = ""  # "" matches every effect

    def to_dict(self) -> dict[str, str]:
        """As core/v1 writes it in a pod spec (empty fields left out)."""
        return {k: v for k, v in (("key", self.key), ("operator", self.operator), ("value", self.value),
                                  ("effect", self.effect)) if v}

    def tolerates(self, taint: Taint) -> bool:
        """core/v1 Toleration.ToleratesTaint, rule for rule."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        if self.operator == "Exists":
            return True
        return False


def untolerated_taint(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration matches, or None
    (component-helpers' FindMatchingUntoleratedTaint with the NoSchedule/NoExecute filter)."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if taint.effect not in HARD_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)
