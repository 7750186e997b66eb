"""The engine's view of the cluster: quota objects, the quota tree built from them, and
the workloads that hold quota."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuqueue.extender.quota.model import Admission, ClusterQueueSpec, CohortSpec, FlavorSpec, LocalQueueSpec, WorkloadSpec
from gpuqueue.extender.quota.tree import QuotaNode, rebuild_subtree


@dataclass(slots=True)
class AdmittedWorkload:
    spec: WorkloadSpec
    admission: Admission
    admitted_at: tuple[float, int]  # (time, admission counter): later is more recent
    queue_ts: tuple[float, int]


@dataclass(slots=True)
class PendingWorkload:
    spec: WorkloadSpec
    queue_ts: tuple[float, int]  # creation or eviction time, then submission order
    message: str | None = None
    reason: str = "PendingEvaluation"
    cluster_queue: str | None = None
    evaluated: bool = False

    def order_key(self) -> tuple:
        return (-self.spec.priority, self.queue_ts)


@dataclass
class ClusterState:
    flavors: dict[str, FlavorSpec] = field(default_factory=dict)
    cq_specs: dict[str, ClusterQueueSpec] = field(default_factory=dict)
    cohort_specs: dict[str, CohortSpec] = field(default_factory=dict)
    local_queues: dict[str, LocalQueueSpec] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    cq_nodes: dict[str, QuotaNode] = field(default_factory=dict)
    cohort_nodes: dict[str, QuotaNode] = field(default_factory=dict)
    admitted: dict[str, AdmittedWorkload] = field(default_factory=dict)
    admitted_by_cq: dict[str, dict[str, AdmittedWorkload]] = field(default_factory=dict)
    # per ClusterQueue and priority, in admission order: preemption candidates come out of
    # these already in Kueue's order (lowest priority, most recently admitted first)
    admitted_by_priority: dict[str, dict[int, dict[str, AdmittedWorkload]]] = field(default_factory=dict)
    cycle_cohorts: set[str] = field(default_factory=set)

    # -- workloads holding quota -------------------------------------------------------
    def add_usage(self, w: AdmittedWorkload) -> None:
        node = self.cq_nodes.get(w.admission.cluster_queue)
        if node is not None:
            for fr, v in w.admission.usage.items():
                node.add_usage(fr, v)

    def remove_usage(self, w: AdmittedWorkload) -> None:
        node = self.cq_nodes.get(w.admission.cluster_queue)
        if node is not None:
            for fr, v in w.admission.usage.items():
                node.remove_usage(fr, v)

    def hold(self, w: AdmittedWorkload) -> None:
        cq = w.admission.cluster_queue
        self.admitted[w.spec.key] = w
        self.admitted_by_cq.setdefault(cq, {})[w.spec.key] = w
        level = self.admitted_by_priority.setdefault(cq, {}).setdefault(w.spec.priority, {})
        level[w.spec.key] = w
        if len(level) > 1 and next(reversed(level.values())) is w:
            last = list(level.values())[-2]
            if last.admitted_at > w.admitted_at:  # restored out of order: keep admission order
                ordered = sorted(level.values(), key=lambda x: x.admitted_at)
                level.clear()
                level.update((x.spec.key, x) for x in ordered)
        self.add_usage(w)

    def most_recent_first(self, cq: str, below: int | None = None, at: int | None = None):
        """Admitted workloads of `cq` with priority < `below` (and those at priority `at`),
        lowest priority first, most recently admitted first within a priority."""
        levels = self.admitted_by_priority.get(cq)
        if not levels:
            return
        for prio in sorted(levels):
            if (below is not None and prio < below) or prio == at or (below is None and at is None):
                yield from reversed(levels[prio].values())

    def release(self, key: str) -> AdmittedWorkload | None:
        w = self.admitted.pop(key, None)
        if w is None:
            return None
        cq = w.admission.cluster_queue
        self.admitted_by_cq.get(cq, {}).pop(key, None)
        levels = self.admitted_by_priority.get(cq, {})
        level = levels.get(w.spec.priority)
        if level is not None:
            level.pop(key, None)
            if not level:
                del levels[w.spec.priority]
        self.remove_usage(w)
        return w

    def cq_usage(self, cq: str) -> dict[tuple[str, str], int]:
        usage: dict[tuple[str, str], int] = {}
        for w in self.admitted_by_cq.get(cq, {}).values():
            for fr, v in w.admission.usage.items():
                usage[fr] = usage.get(fr, 0) + v
        return usage

    # -- the tree ------------------------------------------------------------------------
    def rebuild_tree(self) -> None:
        """Rebuild every node from the specs and the admitted workloads (after a spec change)."""
        self.cohort_nodes = {}
        self.cq_nodes = {}
        for name, spec in self.cohort_specs.items():
            node = QuotaNode(name, True, spec.quotas)
            node.weight_milli = spec.fair_weight_milli
            self.cohort_nodes[name] = node

        def cohort(name: str) -> QuotaNode:
            if name not in self.cohort_nodes:  # named by a cohortName but never defined
                self.cohort_nodes[name] = QuotaNode(name, True)
            return self.cohort_nodes[name]

        for name in list(self.cohort_specs):
            parent = self.cohort_specs[name].parent
            if parent:
                child = cohort(name)
                child.parent = cohort(parent)
                child.parent.children.append(child)
        self.cycle_cohorts = self._find_cycles()
        for name in self.cycle_cohorts:
            node = self.cohort_nodes[name]
            if node.parent is not None:
                node.parent.children.remove(node)
                node.parent = None
        for name, spec in self.cq_specs.items():
            node = QuotaNode(name, False, spec.quotas)
            node.weight_milli = spec.fair_weight_milli
            self.cq_nodes[name] = node
            if spec.cohort:
                node.parent = cohort(spec.cohort)
                node.parent.children.append(node)
        usage = {cq: self.cq_usage(cq) for cq in self.cq_specs}
        roots = {id(n.root()): n.root() for n in list(self.cq_nodes.values()) + list(self.cohort_nodes.values())}
        for root in roots.values():
            rebuild_subtree(root, usage)

    def _find_cycles(self) -> set[str]:
        in_cycle: set[str] = set()
        for start in self.cohort_specs:
            seen: list[str] = []
            name: str | None = start
            while name is not None and name not in seen:
                seen.append(name)
                spec = self.cohort_specs.get(name)
                name = spec.parent if spec else None
            if name is not None and name in seen:
                in_cycle.update(seen[seen.index(name):])
        return in_cycle

    def in_cohort_cycle(self, cq: str) -> bool:
        spec = self.cq_specs.get(cq)
        if not spec or not spec.cohort or not self.cycle_cohorts:
            return False
        name: str | None = spec.cohort
        visited: set[str] = set()
        while name is not None and name not in visited:
            if name in self.cycle_cohorts:
                return True
            visited.add(name)
            cspec = self.cohort_specs.get(name)
            name = cspec.parent if cspec else None
        return False
