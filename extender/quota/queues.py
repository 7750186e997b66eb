"""Pending workloads, queued per ClusterQueue in Kueue's order.

Workloads of one ClusterQueue that ask for exactly the same thing with the same priority
from the same namespace are one *group*: the engine only ever needs to look at a group's
first member, since every other member would get the same answer in the same state. A
group found inadmissible is *parked* until quota in its cohort tree frees up (Kueue's
inadmissible workloads, requeued on the same events), a spec changes, or a preemption
protection ends; so a pass costs what changed, not how deep the queues are.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass, field

from gpuqueue.extender.quota.state import PendingWorkload


def signature(p: PendingWorkload, order_by_creation: bool) -> tuple:
    """What decides a pending workload's fate apart from its place in the queue."""
    wl = p.spec
    sig = (wl.namespace, wl.priority, tuple(ps.fingerprint() for ps in wl.pod_sets))
    if order_by_creation:  # LowerOrNewerEqualPriority compares creation times
        sig += (p.queue_ts,)
    return sig


@dataclass(eq=False, slots=True)
class PendingGroup:
    cq: str
    sig: tuple
    members: list[PendingWorkload] = field(default_factory=list)
    # parked: (root id, freed counter of that root, until) - ready again when the counter
    # moves on or time `until` comes
    parked: tuple | None = None

    def head(self) -> PendingWorkload:
        return self.members[0]

    def add(self, p: PendingWorkload) -> None:
        if not self.members or self.members[-1].order_key() <= p.order_key():
            self.members.append(p)
        else:
            insort(self.members, p, key=PendingWorkload.order_key)


@dataclass(slots=True)
class ClusterQueueQueue:
    name: str
    strict: bool
    order_by_creation: bool
    groups: dict[tuple, PendingGroup] = field(default_factory=dict)

    def push(self, p: PendingWorkload) -> PendingGroup:
        sig = signature(p, self.order_by_creation)
        g = self.groups.get(sig)
        if g is None:
            g = self.groups[sig] = PendingGroup(self.name, sig)
        g.add(p)
        return g

    def remove(self, p: PendingWorkload) -> None:
        sig = signature(p, self.order_by_creation)
        g = self.groups.get(sig)
        if g is None:
            return
        try:
            g.members.remove(p)
        except ValueError:
            return
        if not g.members:
            del self.groups[sig]

    def next_group(self, is_ready) -> PendingGroup | None:
        """The group whose first member is next in Kueue's order among those that may be
        looked at: for StrictFIFO only the very first workload of the queue counts."""
        best: PendingGroup | None = None
        best_key = None
        for g in self.groups.values():
            if not self.strict and not is_ready(g):
                continue
            k = g.members[0].order_key()
            if best_key is None or k < best_key:
                best, best_key = g, k
        if best is not None and self.strict and not is_ready(best):
            return None
        return best

    def __len__(self) -> int:
        return sum(len(g.members) for g in self.groups.values())
