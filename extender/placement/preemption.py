"""The preemption veto: kube-scheduler proposes victims per node; gpuqueue keeps a node only if
every victim on it may go. Pods gpuqueue does not manage are kube-scheduler's business; a pod of
an admitted Workload goes only if the quota engine agrees (``EvictionPolicy.may_evict``).

A node is all or nothing: kube-scheduler picked the fewest victims that make the preemptor
fit, and it does not re-check the fit after an extender trims the list, so evicting a subset
would hurt those pods and still not place the preemptor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Mapping, Protocol, TypeVar

V = TypeVar("V")


class EvictionPolicy(Protocol):
    def may_evict(self, pod) -> bool:
        """True when the quota engine agrees this pod of an admitted Workload may be evicted."""


@dataclass(frozen=True, slots=True)
class NodeVictims(Generic[V]):
    pods: tuple[V, ...]
    num_pdb_violations: int = 0


def veto(proposed: Mapping[str, NodeVictims[V]], allowed: Callable[[V], bool]) -> dict[str, NodeVictims[V]]:
    """The nodes whose every proposed victim is ``allowed``; the others are dropped whole."""
    return {node: v for node, v in proposed.items() if all(allowed(p) for p in v.pods)}
