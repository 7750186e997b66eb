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

import dataclasses
import heapq
from dataclasses import dataclass

from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota import flavorassigner as fa
from gpuqueue.extender.quota.fairsharing import FairSharing
from gpuqueue.extender.quota.model import Admission, ClusterQueueSpec, CohortSpec, FlavorSpec, LocalQueueSpec, WorkloadSpec
from gpuqueue.extender.quota.preemption import ClassicalPreemptor, Target
from gpuqueue.extender.quota.queues import ClusterQueueQueue, PendingGroup
from gpuqueue.extender.quota.state import AdmittedWorkload, ClusterState, PendingWorkload
from gpuqueue.extender.quota.tas import capacity as tas
from gpuqueue.extender.quota.tas.room import CachedNodes, Room
from gpuqueue.api.labelselector import selector_matches

MAX_ROUNDS_PER_WORKLOAD = 50  # a safety net against a preemption cycle; never reached in practice


@dataclass(slots=True)
class _Entry:
    group: PendingGroup
    assignment: fa.Assignment

    @property
    def pending(self) -> PendingWorkload:
        return self.group.members[0]

    @property
    def cq(self) -> str:
        return self.group.cq


class QuotaEngine:
    def __init__(self, fair_sharing: FairSharing | None = None) -> None:
        self.state = ClusterState()
        self.pending: dict[str, PendingWorkload] = {}
        self.fair_sharing = fair_sharing
        self._preempted_in_pass: set[str] = set()
        self.preemptor = ClassicalPreemptor(self.state, fair_sharing)
        self.preemptor.spared = self._preempted_in_pass
        self.preemption_count = 0
        self._epoch = 0  # bumped by every spec change
        self._routed_epoch = -1  # the epoch the queues were built for
        self._tree_dirty = True
        self._freed: dict[int, int] = {}  # per cohort tree (root id): bumped when quota frees up
        self._changed: dict[int, int] = {}  # per cohort tree: bumped on any usage change
        self._queues: dict[str, ClusterQueueQueue] = {}
        self._root_cqs: dict[int, list[str]] = {}
        self._ready: set[str] = set()  # ClusterQueues that may have something to look at
        self._wakeups: list[tuple[float, str]] = []  # (time, ClusterQueue): protections ending
        self._unannounced: set[str] = set()  # pending workloads that never got a message
        # Workloads whose spec.active is false (Kueue's deactivation): held out of every queue,
        # whatever path hands them back (a resubmission, an eviction), until reactivated.
        self._inactive_keys: set[str] = set()
        self.inactive: dict[str, PendingWorkload] = {}
        self._assignments: dict[int, tuple] = {}  # id(group) -> (version, assignment)
        self._admissions = 0
        self._seq = 0
        self._now = 0.0
        # where the nodes stand, for flavors that admit only what their nodes hold (TAS, placement-aware)
        self.nodes: tas.NodeSource | None = None

    # -- quota objects ---------------------------------------------------------------------
    def _spec_changed(self) -> None:
        self._epoch += 1
        self._tree_dirty = True

    def _put(self, specs: dict, key: str, spec) -> None:
        """A spec the engine already has is no change: a controller sees every status write to
        a queue object as an update, and a change re-routes every pending workload."""
        if specs.get(key) != spec:
            specs[key] = spec
            self._spec_changed()

    def set_flavor(self, spec: FlavorSpec) -> None:
        self._put(self.state.flavors, spec.name, spec)

    def remove_flavor(self, name: str) -> None:
        if self.state.flavors.pop(name, None) is not None:
            self._spec_changed()

    def set_cohort(self, spec: CohortSpec) -> None:
        self._put(self.state.cohort_specs, spec.name, spec)

    def remove_cohort(self, name: str) -> None:
        if self.state.cohort_specs.pop(name, None) is not None:
            self._spec_changed()

    def set_cluster_queue(self, spec: ClusterQueueSpec) -> None:
        self._put(self.state.cq_specs, spec.name, spec)

    def remove_cluster_queue(self, name: str) -> None:
        if self.state.cq_specs.pop(name, None) is not None:
            self._spec_changed()

    def set_local_queue(self, spec: LocalQueueSpec) -> None:
        self._put(self.state.local_queues, spec.key, spec)

    def remove_local_queue(self, namespace: str, name: str) -> None:
        if self.state.local_queues.pop(f"{namespace}/{name}", None) is not None:
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
        if wl.key in self.pending or wl.key in self.state.admitted or wl.key in self.inactive:
            raise ValueError(f"workload {wl.key} is already known")
        if not wl.seq:
            wl.seq = self.next_seq()
        p = PendingWorkload(spec=wl, queue_ts=(wl.created, wl.seq))
        self._enqueue(p)

    def _enqueue(self, p: PendingWorkload) -> None:
        if p.spec.key in self._inactive_keys:
            self.inactive[p.spec.key] = p
            return
        self.pending[p.spec.key] = p
        self._unannounced.add(p.spec.key)
        if self._routed_epoch == self._epoch and not self._tree_dirty:
            self._route(p, None)

    def restore_admitted(self, wl: WorkloadSpec, admission: Admission, admitted_at: float) -> None:
        """A workload the API already records as admitted (a restarted controller)."""
        self._ensure_tree()
        self._admissions += 1
        if not wl.seq:
            wl.seq = self.next_seq()
        self.state.hold(AdmittedWorkload(wl, admission, (admitted_at, self._admissions), (wl.created, wl.seq)))
        self._bump(admission.cluster_queue, freed=False)

    def finish(self, key: str) -> AdmittedWorkload | PendingWorkload | None:
        """The workload's Job completed or was deleted: its quota is free again (and an inactive
        one is forgotten with its deactivation)."""
        self._ensure_tree()
        self._inactive_keys.discard(key)
        held_out = self.inactive.pop(key, None)
        if held_out is not None:
            return held_out
        w = self.state.release(key)
        if w is not None:
            self._bump(w.admission.cluster_queue, freed=True)
            return w
        return self._unqueue(key)

    delete = finish

    def _unqueue(self, key: str) -> PendingWorkload | None:
        p = self.pending.pop(key, None)
        if p is not None:
            self._unannounced.discard(key)
            q = self._queues.get(p.cluster_queue or "")
            if q is not None:
                q.remove(p)
                self._ready.add(q.name)  # a StrictFIFO queue may have lost the head that blocked it
        return p

    def deactivate(self, key: str, now: float) -> d.Evicted | None:
        """The workload's spec.active became false (Kueue's deactivation). An admitted one gives
        its quota back and is evicted (the decision returned, reason Deactivated); a pending one
        leaves its queue. Either is held out of the queues until reactivated, and comes back
        queued at its deactivation time (the time of Kueue's Evicted condition)."""
        self._ensure_tree()
        if key in self._inactive_keys:
            return None
        self._inactive_keys.add(key)
        if key in self.state.admitted:
            p = self.evict(key, now)  # held out, not queued: the key is inactive
            assert p is not None and p.cluster_queue is not None
            return d.Evicted(key, p.cluster_queue, d.DEACTIVATED, d.DEACTIVATED_MESSAGE)
        p = self._unqueue(key)
        if p is not None:
            p.queue_ts = (now, self.next_seq())
            p.evaluated = False
            p.message = None
            self.inactive[key] = p
        return None

    def reactivate(self, key: str) -> bool:
        """spec.active is true again: the workload is queued again (True when it was held out)."""
        self._inactive_keys.discard(key)
        p = self.inactive.pop(key, None)
        if p is None:
            return False
        self._enqueue(p)
        return True

    def set_priority(self, key: str, priority: int) -> bool:
        """The workload's priority changed (Kueue: its WorkloadPriorityClass label named another
        class). A pending one takes its new place in its queue, keeping its queue time, and is
        evaluated again; an admitted one keeps its quota, and its new priority counts from the next
        pass on, when victims are chosen. False if the workload is not known."""
        self._ensure_tree()
        w = self.state.admitted.get(key)
        if w is not None:
            if w.spec.priority != priority:
                self.state.release(key)
                w.spec = dataclasses.replace(w.spec, priority=priority)
                self.state.hold(w)
                self._bump(w.admission.cluster_queue, freed=True)  # what waits may now preempt it
            return True
        held_out = self.inactive.get(key)
        if held_out is not None:
            held_out.spec = dataclasses.replace(held_out.spec, priority=priority)
            return True
        p = self._unqueue(key)
        if p is None:
            return False
        p.spec = dataclasses.replace(p.spec, priority=priority)
        p.evaluated = False
        self._enqueue(p)
        return True

    def is_inactive(self, key: str) -> bool:
        return key in self._inactive_keys

    def evict(self, key: str, now: float) -> PendingWorkload | None:
        """Take an admitted workload's quota back and requeue it (at its eviction time)."""
        self._ensure_tree()
        w = self.state.release(key)
        if w is None:
            return None
        self._bump(w.admission.cluster_queue, freed=True)
        p = PendingWorkload(spec=w.spec, queue_ts=(now, self.next_seq()))
        p.cluster_queue = w.admission.cluster_queue
        self._enqueue(p)
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

    def pending_in_order(self, cq: str) -> list[PendingWorkload]:
        """The pending workloads of a ClusterQueue in its queue order (Kueue's heap and its
        inadmissible workloads together, by priority then queue time), as the visibility API lists them."""
        q = self._queues.get(cq)
        if q is not None:
            members = [p for g in q.groups.values() for p in g.members]
        else:  # inactive: they wait, unqueued
            members = [p for p in self.pending.values() if p.cluster_queue == cq]
        members.sort(key=PendingWorkload.order_key)
        return members

    def inadmissible_keys(self) -> set[str]:
        """The pending workloads Kueue counts as inadmissible: their group failed an admission
        attempt and is parked (_still_parked), or their ClusterQueue admits nothing. The others
        are active: the next pass looks at them."""
        out: set[str] = set()
        for q in self._queues.values():
            for g in q.groups.values():
                if self._still_parked(g):
                    out.update(p.spec.key for p in g.members)
        for key, p in self.pending.items():
            if p.cluster_queue is not None and p.cluster_queue not in self._queues:
                out.add(key)
        return out

    def usage(self, cq: str) -> dict[tuple[str, str], int]:
        node = None if self._tree_dirty else self.state.cq_nodes.get(cq)
        return dict(node.usage) if node is not None else self.state.cq_usage(cq)

    # -- bookkeeping for re-evaluation -----------------------------------------------------
    def _root_id(self, cq: str) -> int:
        node = self.state.cq_nodes.get(cq)
        return id(node.root()) if node is not None else 0

    def _bump(self, cq: str, freed: bool) -> None:
        rid = self._root_id(cq)
        self._changed[rid] = self._changed.get(rid, 0) + 1
        if freed:
            self._freed[rid] = self._freed.get(rid, 0) + 1
            self._ready.update(self._root_cqs.get(rid, ()))

    def _still_parked(self, g: PendingGroup) -> bool:
        """Parked, and nothing freed quota in its cohort tree since, nor has its wait ended."""
        if g.parked is None:
            return False
        rid, freed, until = g.parked
        return self._freed.get(rid, 0) == freed and (until is None or self._now < until)

    def _is_ready(self, g: PendingGroup) -> bool:
        if g.parked is None:
            return True
        if self._still_parked(g):
            return False
        g.parked = None
        return True

    def _park(self, g: PendingGroup, until: float | None) -> None:
        rid = self._root_id(g.cq)
        g.parked = (rid, self._freed.get(rid, 0), until)
        if until is not None:
            heapq.heappush(self._wakeups, (until, g.cq))

    def capacity_changed(self) -> bool:
        """The nodes changed (a pod bound or gone, a node added, cordoned or not ready): what waits
        for a flavor that places its pods is looked at again. False: no flavor places pods."""
        if not any(f.needs_placement for f in self.state.flavors.values()):
            return False
        for rid in self._root_cqs:
            self._freed[rid] = self._freed.get(rid, 0) + 1
        self._ready.update(self._queues)
        return True

    def next_wakeup(self) -> float | None:
        """The earliest future time at which a waiting workload should be looked at again
        even if nothing else happens (a preemption protection ending)."""
        while self._wakeups and self._wakeups[0][0] <= self._now:
            heapq.heappop(self._wakeups)
        return self._wakeups[0][0] if self._wakeups else None

    # -- routing: which ClusterQueue a pending workload waits in --------------------------------
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

    def _reroute(self, out: list[d.Decision]) -> None:
        """After a spec change: rebuild every queue (every inadmissible workload is looked at
        again) and drain what stopped queues hold."""
        self._queues = {}
        self._assignments = {}
        for name, spec in self.state.cq_specs.items():
            if self.inactive_reason(name) is None:
                self._queues[name] = ClusterQueueQueue(
                    name, spec.queueing_strategy == "StrictFIFO", spec.preemption.within_cluster_queue == "LowerOrNewerEqualPriority"
                )
        self._root_cqs = {}
        for name in sorted(self._queues):
            self._root_cqs.setdefault(self._root_id(name), []).append(name)
        self._ready = set(self._queues)
        self._drain_stopped(out)  # before the epoch is marked routed, so evictees are routed below
        self._routed_epoch = self._epoch
        for p in sorted(self.pending.values(), key=lambda p: p.queue_ts):
            self._route(p, out)

    def _route(self, p: PendingWorkload, out: list[d.Decision] | None) -> None:
        wl = p.spec
        state = self.state
        lq = state.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        problem: tuple[str | None, str] | None = None
        if lq is None:
            problem = (None, f"LocalQueue {wl.queue_name} doesn't exist")
        elif lq.stop_policy != "None":
            problem = (lq.cluster_queue, f"LocalQueue {wl.queue_name} is inactive")
        elif lq.cluster_queue not in state.cq_specs:
            problem = (lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} doesn't exist")
        elif lq.cluster_queue not in self._queues:
            problem = (lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} is inactive")
        if problem is not None:
            if out is not None:
                self._set_pending(p, problem[0], problem[1], out, "Inadmissible")
            else:  # said at the end of the next pass
                p.cluster_queue, p.message, p.reason = problem[0], problem[1], "Inadmissible"
            return
        assert lq is not None
        p.cluster_queue = lq.cluster_queue
        g = self._queues[lq.cluster_queue].push(p)
        head = g.members[0]
        if g.parked is not None and head is not p and not p.evaluated:
            # Its group's head was just judged in this state: a quota answer is not computed
            # again (Kueue's equivalence hashing), any other answer is the same for it.
            p.reason = head.reason
            p.message = d.BYPASSED if head.reason in d.NO_FIT_REASONS else head.message
        self._ready.add(lq.cluster_queue)

    # -- the pass ---------------------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Time moves on: called before the changes of a new instant (and by schedule())."""
        self._ensure_tree()
        self._now = now
        self.preemptor.now = now
        while self._wakeups and self._wakeups[0][0] <= now:
            self._ready.add(heapq.heappop(self._wakeups)[1])
        if self.fair_sharing is not None:
            self.fair_sharing.advance(self.state, now)

    def schedule(self, now: float) -> list[d.Decision]:
        self.advance(now)
        out: list[d.Decision] = []
        self._preempted_in_pass.clear()
        if self._routed_epoch != self._epoch:
            self._reroute(out)
        limit = MAX_ROUNDS_PER_WORKLOAD * (len(self.pending) + 1)
        rounds = 0
        while rounds < limit:
            rounds += 1
            entries = self._heads()
            if not entries:
                break
            entries.sort(key=self._entry_order)
            if self.fair_sharing is not None:
                entries = self._best_per_root(entries)
            for e in entries:
                self._process(e, now, out)
        self._announce(out)
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

    def _announce(self, out: list[d.Decision]) -> None:
        """Every workload that started waiting in this pass says why: its own answer, its
        group's, a queue problem, or (behind a StrictFIFO head) that it was not looked at yet."""
        for key in sorted(self._unannounced, key=lambda k: self.pending[k].queue_ts if k in self.pending else (0, 0)):
            p = self.pending.get(key)
            if p is not None and not p.evaluated:
                self._set_pending(p, p.cluster_queue, p.message or d.PENDING_EVALUATION, out, p.reason)
        self._unannounced.clear()

    def _drain_stopped(self, out: list[d.Decision]) -> None:
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
            self.evict(key, self._now)
            out.append(d.Evicted(key, w.admission.cluster_queue, reason, msg))

    def _set_pending(self, p: PendingWorkload, cq: str | None, message: str, out: list[d.Decision], reason: str) -> None:
        if p.message != message or p.cluster_queue != cq or not p.evaluated:
            out.append(d.Pending(p.spec.key, cq, message, reason))
        p.message = message
        p.reason = reason
        p.cluster_queue = cq
        p.evaluated = True

    def _heads(self) -> list[_Entry]:
        entries: list[_Entry] = []
        for cq in sorted(self._ready):
            q = self._queues.get(cq)
            g = q.next_group(self._is_ready) if q is not None else None
            if g is None:
                self._ready.discard(cq)
                continue
            entries.append(_Entry(g, self._assignment(g)))
        return entries

    def _assignment(self, g: PendingGroup) -> fa.Assignment:
        version = (self._epoch, self._changed.get(self._root_id(g.cq), 0))
        cached = self._assignments.get(id(g))
        if cached is not None and cached[0] == version and cached[2] is g:
            return cached[1]
        a = self._assign(g)
        self._assignments[id(g)] = (version, a, g)
        return a

    def _assign(self, g: PendingGroup, start: dict[tuple[str, str], int] | None = None) -> fa.Assignment:
        state = self.state
        assigner = fa.FlavorAssigner(
            state.cq_specs[g.cq], state.cq_nodes[g.cq], state.flavors, self.preemptor.simulate, self.fair_sharing is not None
        )
        return assigner.assign(g.members[0].spec, start)

    def _entry_order(self, e: _Entry) -> tuple:
        if self.fair_sharing is not None:
            return self.fair_sharing.entry_order(self.state, e.cq, e.assignment, e.pending)
        return (e.assignment.borrow_level, -e.pending.spec.priority, e.pending.queue_ts)

    def _namespace_allowed(self, wl: WorkloadSpec, cq: str) -> bool:
        labels = self.state.namespaces.get(wl.namespace) or {"kubernetes.io/metadata.name": wl.namespace}
        return selector_matches(self.state.cq_specs[cq].namespace_selector, labels)

    def _give_up(self, g: PendingGroup, message: str, reason: str, out: list[d.Decision], until: float | None = None) -> None:
        """The group cannot be admitted now: its first member says why and the group waits
        for quota to free up. Members behind it are not evaluated (as Kueue skips workloads
        equivalent to one that just failed): they keep their answer, or, never having had
        one, are pending evaluation; a problem that is not about quota applies to all."""
        quota = reason in d.NO_FIT_REASONS
        for i, p in enumerate(g.members):
            if i == 0:
                self._set_pending(p, g.cq, message, out, reason)
            elif not p.evaluated:
                if quota:
                    self._set_pending(p, g.cq, d.PENDING_EVALUATION, out, "PendingEvaluation")
                else:
                    self._set_pending(p, g.cq, message, out, reason)
        self._park(g, until)

    def _process(self, e: _Entry, now: float, out: list[d.Decision]) -> None:
        g = e.group
        q = self._queues.get(g.cq)
        if not g.members or g.parked is not None or q is None or q.groups.get(g.sig) is not g:
            return
        p = g.members[0]
        if not self._namespace_allowed(p.spec, g.cq):
            self._give_up(g, d.NAMESPACE_MISMATCH, "Inadmissible", out)
            return
        a = self._assignment(g)
        topology: dict = {}
        searched: set[tuple] = set()
        first_unplaced: fa.Assignment | None = None
        while a.mode in (fa.FIT, fa.PREEMPT):
            # The nodes are asked only once the quota would allow it (Kueue: quota first).
            topology, unplaced = self._placement(p.spec, a)
            if unplaced is None:
                break
            first_unplaced = first_unplaced or a
            # Kueue's next scheduling cycle resumes the flavor search after the flavors it stopped
            # at (LastTriedFlavorIdx), at once while some are left (PendingFlavors): done here in
            # one go. Past the last flavor it preempts for room on the nodes in the first flavor
            # where that helps, or waits, and starts again from the first.
            stopped = tuple(sorted(a.tried.items()))
            if not a.pending_flavors() or stopped in searched:
                if not self._preempt_for_placement(g, first_unplaced, now, out):
                    self._give_up(g, unplaced, d.TOPOLOGY_PLACEMENT_FAILED, out)
                return
            searched.add(stopped)
            a = self._assign(g, {k: i + 1 for k, i in a.tried.items()})
        mode = a.mode
        if mode == fa.FIT:
            self._admit(g, a, now, out, (), topology)
            return
        if mode == fa.PREEMPT:
            if self.fair_sharing is not None:
                self.fair_sharing.protection_ends = None
            # A workload preempted in this pass neither preempts in it nor (if it got back in)
            # is preempted again: otherwise two policies (fair sharing, borrowWithinCohort) or
            # equal priorities could chase each other round and round within one instant.
            targets = [] if p.spec.key in self._preempted_in_pass else self._targets(p.spec, g.cq, a)
            if targets:
                victims = tuple(t.victim.spec.key for t in targets)
                for t in targets:
                    self._preempt(t, p.spec.key, g.cq, now, out)
                self._admit(g, a, now, out, victims, topology)
                return
            until = self.fair_sharing.protection_ends if self.fair_sharing is not None else None
            self._give_up(g, a.message(), "WaitingForQuota", out, until)
            return
        reason = "WaitingForQuota"
        if any(r.startswith("insufficient quota") for ps in a.pod_sets for r in ps.reasons):
            reason = "ExceedsMaxQuota"
        elif any(ps.failed and not any(r.startswith("insufficient") for r in ps.reasons) for ps in a.pod_sets):
            reason = "NoMatchingFlavor"
        self._give_up(g, a.message(), reason, out)

    def _targets(self, wl: WorkloadSpec, cq: str, a: fa.Assignment) -> list[Target]:
        return self.preemptor.get_targets(wl, cq, a.usage, a.resources_needing_preemption())

    def _preempt_for_placement(self, g: PendingGroup, a: fa.Assignment, now: float, out: list[d.Decision]) -> bool:
        """The quota would take the workload but the nodes do not hold its pods now: evict the
        fewest workloads, by the ClusterQueue's preemption policies, whose going makes room for
        both (Kueue's preemption with TAS). False when none would."""
        p = g.members[0]
        if self.fair_sharing is not None or p.spec.key in self._preempted_in_pass:
            return False  # (fair sharing's victim search does not ask the nodes)
        specs = self.state.flavors
        placing = [specs[f] for f in sorted({f for fs in a.flavors_by_pod_set().values() for f in fs.values()})
                   if f in specs and specs[f].needs_placement]
        frs = {fr for fr in a.usage if fr[0] in {f.name for f in placing}}
        nodes = CachedNodes(self.nodes)

        def place(victims) -> set[str] | None:
            used: set[str] = set()
            return used if self._placement(p.spec, a, victims, nodes, used)[1] is None else None

        def touches(victim) -> set[str]:
            return set().union(*(nodes.held(victim.spec, victim.admission, f) for f in placing))

        room = Room(place, touches)
        # every victim the policies allow gone first: when even that leaves no room, search no further
        candidates = self.preemptor.find_candidates(p.spec, g.cq, frs)
        if not candidates or not room.fits(candidates):
            return False
        targets = self.preemptor.targets_for_placement(p.spec, g.cq, a.usage, frs, room)
        if not targets:
            return False
        topology, unplaced = self._placement(p.spec, a, [t.victim for t in targets], nodes)
        if unplaced is not None:  # cannot be: the search checked this very set; then wait as without it
            return False
        for t in targets:
            self._preempt(t, p.spec.key, g.cq, now, out)
        self._admit(g, a, now, out, tuple(t.victim.spec.key for t in targets), topology)
        return True

    def _preempt(self, t: Target, preemptor: str, preemptor_cq: str, now: float, out: list[d.Decision]) -> None:
        victim = t.victim
        vcq = victim.admission.cluster_queue
        self.evict(victim.spec.key, now)
        self._preempted_in_pass.add(victim.spec.key)
        self.preemption_count += 1
        out.append(d.Preempted(victim.spec.key, vcq, preemptor, preemptor_cq, t.reason))

    def _placement(self, wl: WorkloadSpec, a: fa.Assignment, victims: list | tuple = (),
                   nodes: tas.NodeSource | None = None, used: set[str] | None = None) -> tuple[dict, str | None]:
        """`victims`: admitted workloads counted as gone, their pods' room free; `nodes`: instead
        of the engine's own; `used`: given, gets the nodes the pods would take."""
        flavors = a.flavors_by_pod_set()
        specs = self.state.flavors
        asks = any(ps.topology is not None for ps in wl.pod_sets)
        if not asks and not any(specs[f].needs_placement for fs in flavors.values() for f in fs.values() if f in specs):
            return {}, None
        if self.nodes is None:  # nothing tells where the nodes stand (the simulator): quota alone
            return {}, None
        gone = {v.spec.key for v in victims}
        admitted = ((w.spec, w.admission) for w in self.state.admitted.values() if w.spec.key not in gone)
        return tas.place(wl, flavors, specs, admitted, nodes or self.nodes, [(v.spec, v.admission) for v in victims], used)

    def _admit(self, g: PendingGroup, a: fa.Assignment, now: float, out: list[d.Decision], victims: tuple[str, ...],
               topology: dict | None = None) -> None:
        p = g.members[0]
        cq = g.cq
        node = self.state.cq_nodes[cq]
        borrowing = any(node.borrowing_with(fr, v) for fr, v in a.usage.items())
        admission = Admission(
            cluster_queue=cq,
            flavors=a.flavors_by_pod_set(),
            usage=dict(a.usage),
            counts={ps.name: ps.count for ps in a.pod_sets},
            borrowing=borrowing,
            pod_set_usage=a.usage_by_pod_set(),
            topology=topology or {},
        )
        self._admissions += 1
        self._queues[cq].remove(p)
        del self.pending[p.spec.key]
        self._unannounced.discard(p.spec.key)
        self.state.hold(AdmittedWorkload(p.spec, admission, (now, self._admissions), p.queue_ts))
        self._bump(cq, freed=False)
        out.append(d.Admitted(p.spec.key, admission, victims))

