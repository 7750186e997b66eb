"""The quota engine: pure, deterministic, no I/O.

Callers tell it what exists (flavors, cohorts, ClusterQueues, LocalQueues, namespaces)
and what happens to workloads (submitted, finished, deleted); `schedule(now)` then admits
and preempts until nothing more can change, and returns the decisions in the order they
were taken (the preemptions that make room before the admission they make room for).

Unlike Kueue, which takes one head per ClusterQueue per cycle, a pass here admits
everything that fits; and the room a preemption frees is taken by the preemptor in the
same step, so no other workload can slip into it.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.quota import decisions as d
from extender.quota import flavorassigner as fa
from extender.quota.fairsharing import FairSharing
from extender.quota.model import Admission, ClusterQueueSpec, CohortSpec, FlavorSpec, LocalQueueSpec, WorkloadSpec
from extender.quota.preemption import ClassicalPreemptor, Target
from extender.quota.state import AdmittedWorkload, ClusterState, PendingWorkload
from gpuqueue.api.labelselector import selector_matches

MAX_ROUNDS_PER_WORKLOAD = 50  # a safety net against a preemption cycle; never reached in practice


@dataclass(slots=True)
class _Entry:
    pending: PendingWorkload
    cq: str
    assignment: fa.Assignment
    computed_at: int  # the root's change counter when the assignment was computed


class QuotaEngine:
    def __init__(self, fair_sharing: FairSharing | None = None) -> None:
        self.state = ClusterState()
        self.pending: dict[str, PendingWorkload] = {}
        self.fair_sharing = fair_sharing
        self.preemptor = ClassicalPreemptor(self.state, fair_sharing)
        self._epoch = 0  # bumped by every spec change: every inadmissible workload is retried
        self._freed: dict[int, int] = {}  # per root: bumped when quota frees up
        self._changed: dict[int, int] = {}  # per root: bumped on any usage change
        self._admissions = 0
        self._seq = 0
        self._tree_dirty = True
        self.preemption_count = 0
        self._now = 0.0
        self._assignments: dict[str, tuple] = {}  # key -> ((epoch, change counter), cq, assignment)

    # -- quota objects ---------------------------------------------------------------------
    def _spec_changed(self) -> None:
        self._epoch += 1
        self._tree_dirty = True

    def set_flavor(self, spec: FlavorSpec) -> None:
        self.state.flavors[spec.name] = spec
        self._spec_changed()

    def remove_flavor(self, name: str) -> None:
        self.state.flavors.pop(name, None)
        self._spec_changed()

    def set_cohort(self, spec: CohortSpec) -> None:
        self.state.cohort_specs[spec.name] = spec
        self._spec_changed()

    def remove_cohort(self, name: str) -> None:
        self.state.cohort_specs.pop(name, None)
        self._spec_changed()

    def set_cluster_queue(self, spec: ClusterQueueSpec) -> None:
        self.state.cq_specs[spec.name] = spec
        self._spec_changed()

    def remove_cluster_queue(self, name: str) -> None:
        self.state.cq_specs.pop(name, None)
        self._spec_changed()

    def set_local_queue(self, spec: LocalQueueSpec) -> None:
        self.state.local_queues[spec.key] = spec
        self._spec_changed()

    def remove_local_queue(self, namespace: str, name: str) -> None:
        self.state.local_queues.pop(f"{namespace}/{name}", None)
        self._spec_changed()

    def set_namespace(self, name: str, labels: dict[str, str]) -> None:
        if self.state.namespaces.get(name) != labels:
            self.state.namespaces[name] = dict(labels)
            self._spec_changed()

    def _ensure_tree(self) -> None:
        if self._tree_dirty:
            self.state.rebuild_tree()
            self._tree_dirty = False

    # -- workloads ---------------------------------------------------------------------------
    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def submit(self, wl: WorkloadSpec) -> None:
        """A new workload (a Job was created); it waits for the next pass."""
        if wl.key in self.pending or wl.key in self.state.admitted:
            raise ValueError(f"workload {wl.key} is already known")
        if not wl.seq:
            wl.seq = self.next_seq()
        self.pending[wl.key] = PendingWorkload(spec=wl, queue_ts=(wl.created, wl.seq))

    def restore_admitted(self, wl: WorkloadSpec, admission: Admission, admitted_at: float) -> None:
        """A workload the API already records as admitted (a restarted controller)."""
        self._ensure_tree()
        self._admissions += 1
        if not wl.seq:
            wl.seq = self.next_seq()
        self.state.hold(AdmittedWorkload(wl, admission, (admitted_at, self._admissions), (wl.created, wl.seq)))
        self._bump(admission.cluster_queue, freed=False)

    def finish(self, key: str) -> AdmittedWorkload | PendingWorkload | None:
        """The workload's Job completed or was deleted: its quota is free again."""
        self._ensure_tree()
        self._assignments.pop(key, None)
        w = self.state.release(key)
        if w is not None:
            self._bump(w.admission.cluster_queue, freed=True)
            return w
        return self.pending.pop(key, None)

    delete = finish

    def evict(self, key: str, now: float) -> PendingWorkload | None:
        """Take an admitted workload's quota back and requeue it (at its eviction time)."""
        self._ensure_tree()
        w = self.state.release(key)
        if w is None:
            return None
        self._bump(w.admission.cluster_queue, freed=True)
        p = PendingWorkload(spec=w.spec, queue_ts=(now, self.next_seq()), requeued=True)
        self.pending[key] = p
        return p

    # -- queries ------------------------------------------------------------------------------
    def is_admitted(self, key: str) -> bool:
        return key in self.state.admitted

    def admission(self, key: str) -> Admission | None:
        w = self.state.admitted.get(key)
        return w.admission if w else None

    def pending_message(self, key: str) -> str | None:
        p = self.pending.get(key)
        return p.message if p else None

    def usage(self, cq: str) -> dict[tuple[str, str], int]:
        node = None if self._tree_dirty else self.state.cq_nodes.get(cq)
        return dict(node.usage) if node is not None else self.state.cq_usage(cq)

    def cluster_queue_of(self, wl: WorkloadSpec) -> str | None:
        lq = self.state.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        return lq.cluster_queue if lq else None

    # -- bookkeeping for re-evaluation -----------------------------------------------------
    def _root_id(self, cq: str) -> int:
        node = self.state.cq_nodes.get(cq)
        return id(node.root()) if node is not None else 0

    def _bump(self, cq: str, freed: bool) -> None:
        rid = self._root_id(cq)
        self._changed[rid] = self._changed.get(rid, 0) + 1
        if freed:
            self._freed[rid] = self._freed.get(rid, 0) + 1

    def _mark(self, p: PendingWorkload, cq: str | None, sensitive_to_any_change: bool, until: float | None = None) -> None:
        """Remember that `p` cannot be admitted until its cohort tree frees quota (or, when
        preemption was possible, changes at all), a spec changes, or time `until` comes."""
        rid = self._root_id(cq) if cq else 0
        if sensitive_to_any_change:
            p.mark = (self._epoch, rid, "changed", self._changed.get(rid, 0), until)
        else:
            p.mark = (self._epoch, rid, "freed", self._freed.get(rid, 0), until)

    def _mark_stale(self, p: PendingWorkload) -> bool:
        if p.mark is None:
            return True
        epoch, rid, kind, version, until = p.mark
        if epoch != self._epoch or (until is not None and self._now >= until):
            return True
        counters = self._changed if kind == "changed" else self._freed
        return counters.get(rid, 0) != version

    def next_wakeup(self) -> float | None:
        """The earliest future time at which a waiting workload should be looked at again
        even if nothing else happens (a preemption protection ending)."""
        times = [p.mark[4] for p in self.pending.values() if p.mark is not None and p.mark[4] is not None]
        future = [t for t in times if t > self._now]
        return min(future) if future else None

    # -- the pass ---------------------------------------------------------------------------------
    def inactive_reason(self, cq: str) -> str | None:
        """Why a ClusterQueue admits nothing (None when it is active)."""
        spec = self.state.cq_specs[cq]
        if spec.stop_policy != "None":
            return "Stopped"
        for rg in spec.resource_groups:
            for flavor in rg.flavors:
                if flavor not in self.state.flavors:
                    return "FlavorNotFound"
        if self.state.in_cohort_cycle(cq):
            return "CohortCycle"
        return None

    def advance(self, now: float) -> None:
        """Time moves on: called before the changes of a new instant (and by schedule())."""
        self._ensure_tree()
        self._now = now
        self.preemptor.now = now
        if self.fair_sharing is not None:
            self.fair_sharing.advance(self.state, now)

    def schedule(self, now: float) -> list[d.Decision]:
        self.advance(now)
        out: list[d.Decision] = []
        self._drain_stopped(now, out)
        by_cq = self._route_pending(out)
        limit = MAX_ROUNDS_PER_WORKLOAD * (len(self.pending) + 1)
        rounds = 0
        while rounds < limit:
            rounds += 1
            entries = self._heads(by_cq)
            if not entries:
                break
            entries.sort(key=self._entry_order)
            if self.fair_sharing is not None:
                entries = self._best_per_root(entries)
            for e in entries:
                self._process(e, now, out, by_cq)
        self._announce_unevaluated(out)
        return out

    def _best_per_root(self, entries: list[_Entry]) -> list[_Entry]:
        """With fair sharing every admission changes the shares in its cohort tree, so only
        the winner of each tree's tournament goes ahead; the rest are ranked again."""
        seen: set[int] = set()
        out = []
        for e in entries:
            rid = self._root_id(e.cq)
            if rid not in seen:
                seen.add(rid)
                out.append(e)
        return out

    def _announce_unevaluated(self, out: list[d.Decision]) -> None:
        """Workloads still waiting behind a StrictFIFO head say so."""
        for p in self.pending.values():
            if not p.evaluated:
                self._set_pending(p, p.cluster_queue, d.PENDING_EVALUATION, out, "Pending")

    def _drain_stopped(self, now: float, out: list[d.Decision]) -> None:
        """HoldAndDrain on a ClusterQueue or LocalQueue evicts what it had admitted."""
        for key, w in list(self.state.admitted.items()):
            cq_spec = self.state.cq_specs.get(w.admission.cluster_queue)
            lq = self.state.local_queues.get(f"{w.spec.namespace}/{w.spec.queue_name}")
            if cq_spec is not None and cq_spec.stop_policy == "HoldAndDrain":
                reason, msg = "ClusterQueueStopped", "The ClusterQueue is stopped"
            elif lq is not None and lq.stop_policy == "HoldAndDrain":
                reason, msg = "LocalQueueStopped", "The LocalQueue is stopped"
            else:
                continue
            self.evict(key, now)
            out.append(d.Evicted(key, w.admission.cluster_queue, reason, msg))

    def _set_pending(self, p: PendingWorkload, cq: str | None, message: str, out: list[d.Decision], reason: str) -> None:
        if p.message != message or p.cluster_queue != cq or not p.evaluated:
            out.append(d.Pending(p.spec.key, cq, message, reason))
        p.message = message
        p.cluster_queue = cq
        p.evaluated = True

    def _route_pending(self, out: list[d.Decision]) -> dict[str, list[PendingWorkload]]:
        """Sort pending workloads into their ClusterQueues; those that cannot be queued get
        Kueue's message (missing or stopped queues, inactive ClusterQueue)."""
        state = self.state
        by_cq: dict[str, list[PendingWorkload]] = {}
        for p in self.pending.values():
            wl = p.spec
            lq = state.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
            if lq is None:
                self._set_pending(p, None, f"LocalQueue {wl.queue_name} doesn't exist", out, "Inadmissible")
                continue
            if lq.stop_policy != "None":
                self._set_pending(p, lq.cluster_queue, f"LocalQueue {wl.queue_name} is inactive", out, "Inadmissible")
                continue
            if lq.cluster_queue not in state.cq_specs:
                self._set_pending(p, lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} doesn't exist", out, "Inadmissible")
                continue
            if self.inactive_reason(lq.cluster_queue) is not None:
                self._set_pending(p, lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} is inactive", out, "Inadmissible")
                continue
            if p.cluster_queue != lq.cluster_queue:
                p.mark = None
            p.cluster_queue = lq.cluster_queue
            by_cq.setdefault(lq.cluster_queue, []).append(p)
        for items in by_cq.values():
            items.sort(key=PendingWorkload.order_key)
        return by_cq

    def _heads(self, by_cq: dict[str, list[PendingWorkload]]) -> list[_Entry]:
        entries: list[_Entry] = []
        for cq, items in by_cq.items():
            strict = self.state.cq_specs[cq].queueing_strategy == "StrictFIFO"
            for p in items:
                if p.spec.key not in self.pending:
                    continue
                if self._mark_stale(p):
                    entries.append(self._evaluate(p, cq))
                    break
                if strict:
                    break
        return entries

    def _evaluate(self, p: PendingWorkload, cq: str) -> _Entry:
        version = (self._epoch, self._changed.get(self._root_id(cq), 0))
        cached = self._assignments.get(p.spec.key)
        if cached is not None and cached[0] == version and cached[1] == cq:
            return _Entry(p, cq, cached[2], version[1])
        a = self._assign(p.spec, cq)
        self._assignments[p.spec.key] = (version, cq, a)
        return _Entry(p, cq, a, version[1])

    def _assign(self, wl: WorkloadSpec, cq: str) -> fa.Assignment:
        state = self.state
        assigner = fa.FlavorAssigner(
            state.cq_specs[cq], state.cq_nodes[cq], state.flavors, self.preemptor.simulate, self.fair_sharing is not None
        )
        return assigner.assign(wl)

    def _entry_order(self, e: _Entry) -> tuple:
        if self.fair_sharing is not None:
            return self.fair_sharing.entry_order(self.state, e.cq, e.assignment, e.pending)
        return (e.assignment.borrow_level, -e.pending.spec.priority, e.pending.queue_ts)

    def _namespace_allowed(self, wl: WorkloadSpec, cq: str) -> bool:
        labels = self.state.namespaces.get(wl.namespace) or {"kubernetes.io/metadata.name": wl.namespace}
        return selector_matches(self.state.cq_specs[cq].namespace_selector, labels)

    def _process(self, e: _Entry, now: float, out: list[d.Decision], by_cq: dict[str, list[PendingWorkload]]) -> None:
        p, cq = e.pending, e.cq
        if p.spec.key not in self.pending:
            return
        if not self._namespace_allowed(p.spec, cq):
            self._set_pending(p, cq, "Workload namespace doesn't match ClusterQueue selector", out, "Inadmissible")
            self._mark(p, cq, False)
            return
        if e.computed_at != self._changed.get(self._root_id(cq), 0):
            e.assignment = self._assign(p.spec, cq)
        a = e.assignment
        mode = a.mode
        if mode == fa.FIT:
            self._admit(p, cq, a, now, out, ())
            return
        if mode == fa.PREEMPT:
            targets = self._targets(p.spec, cq, a)
            if targets:
                for t in targets:
                    self._preempt(t, p.spec.key, cq, now, out, by_cq)
                self._admit(p, cq, a, now, out, tuple(t.victim.spec.key for t in targets))
                return
            self._set_pending(p, cq, a.message(), out, "WaitingForQuota")
            until = self.fair_sharing.protection_ends if self.fair_sharing is not None else None
            self._mark(p, cq, True, until)
            return
        reason = "WaitingForQuota"
        if any(r.startswith("insufficient quota") for ps in a.pod_sets for r in ps.reasons):
            reason = "ExceedsMaxQuota"
        elif any(ps.failed and not any(r.startswith("insufficient") for r in ps.reasons) for ps in a.pod_sets):
            reason = "NoMatchingFlavor"
        self._set_pending(p, cq, a.message(), out, reason)
        self._mark(p, cq, False)

    def _targets(self, wl: WorkloadSpec, cq: str, a: fa.Assignment) -> list[Target]:
        return self.preemptor.get_targets(wl, cq, a.usage, a.resources_needing_preemption())

    def _preempt(
        self, t: Target, preemptor: str, preemptor_cq: str, now: float, out: list[d.Decision], by_cq: dict[str, list[PendingWorkload]]
    ) -> None:
        victim = t.victim
        vcq = victim.admission.cluster_queue
        p = self.evict(victim.spec.key, now)
        assert p is not None
        p.cluster_queue = vcq
        self.preemption_count += 1
        out.append(d.Preempted(victim.spec.key, vcq, preemptor, preemptor_cq, t.reason))
        items = by_cq.setdefault(vcq, [])
        items.append(p)
        items.sort(key=PendingWorkload.order_key)

    def _admit(
        self, p: PendingWorkload, cq: str, a: fa.Assignment, now: float, out: list[d.Decision], victims: tuple[str, ...]
    ) -> None:
        node = self.state.cq_nodes[cq]
        borrowing = any(node.borrowing_with(fr, v) for fr, v in a.usage.items())
        admission = Admission(
            cluster_queue=cq,
            flavors=a.flavors_by_pod_set(),
            usage=dict(a.usage),
            counts={ps.name: ps.count for ps in a.pod_sets},
            borrowing=borrowing,
        )
        self._admissions += 1
        del self.pending[p.spec.key]
        self._assignments.pop(p.spec.key, None)
        self.state.hold(AdmittedWorkload(p.spec, admission, (now, self._admissions), p.queue_ts))
        self._bump(cq, freed=False)
        out.append(d.Admitted(p.spec.key, admission, victims))
