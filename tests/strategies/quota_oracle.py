"""Drive the quota engine through a history and check issue 9's invariants after every step.

The quota arithmetic here is written from Kueue's rules, not from extender/quota/tree.py, so a
bug in the engine's tree is not mirrored by its own checker:

- a node's subtree quota S is its nominal quota plus what each child lends it (the child's S
  minus the part its lendingLimit keeps at home, G = max(0, S - lendingLimit));
- a Cohort's usage U is what its children use beyond what they keep at home, max(0, U - G);
- a node with a parent and a borrowingLimit BL may use at most S + BL; a root at most S.

The excess over a limit may be positive after a quota is lowered (Kueue does not evict then);
the engine must never make any excess larger, nor create one.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.fairsharing import FairSharing
from tests.strategies.quota_world import (
    NAMESPACES,
    Advance,
    CohortW,
    Delete,
    Finish,
    LocalQueueExists,
    Op,
    Q,
    QueueW,
    SetQuota,
    StopLocalQueue,
    StopQueue,
    Submit,
    World,
    cluster_queue_spec,
    cohort_spec,
    flavor_spec,
    local_queue_spec,
    workload_spec,
)

FR = tuple[str, str]
CROSS_QUEUE_REASONS = ("InCohortReclamation", "InCohortFairSharing", "InCohortReclaimWhileBorrowing")


class InvariantViolation(AssertionError):
    pass


def violation(n: int, message: str) -> InvariantViolation:
    return InvariantViolation(f"invariant {n}: {message}")


# -- independent quota arithmetic ----------------------------------------------------------
@dataclass
class Limits:
    parent: str | None
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None


def quota_table(queues: dict[str, QueueW], cohorts: dict[str, CohortW], fr: FR) -> dict[str, Limits]:
    def find(quotas: tuple[Q, ...]) -> Q | None:
        return next((q for q in quotas if (q.flavor, q.resource) == fr), None)

    table: dict[str, Limits] = {}
    for name, c in cohorts.items():
        q = find(c.quotas)
        table[name] = Limits(c.parent, q.nominal if q else 0, q.borrowing_limit if q else None,
                             q.lending_limit if q else None)
    for name, w in queues.items():
        q = find(w.quotas)
        table[name] = Limits(w.cohort, q.nominal if q else 0, q.borrowing_limit if q else None,
                             q.lending_limit if q else None)
    return table


def excess(table: dict[str, Limits], usage: dict[str, int]) -> dict[str, int]:
    """For each node: how far its usage is above what it may use (0 when within its limits)."""
    children: dict[str, list[str]] = defaultdict(list)
    for name, lim in table.items():
        if lim.parent is not None:
            children[lim.parent].append(name)
    S: dict[str, int] = {}
    G: dict[str, int] = {}
    U: dict[str, int] = {}

    def visit(name: str) -> None:
        lim = table[name]
        s, u = lim.nominal, usage.get(name, 0)
        for c in children.get(name, ()):
            visit(c)
            s += S[c] - G[c]
            u += max(0, U[c] - G[c])
        S[name], U[name] = s, u
        G[name] = max(0, s - lim.lending_limit) if lim.lending_limit is not None else 0

    out: dict[str, int] = {}
    for name, lim in table.items():
        if lim.parent is None:
            visit(name)
    for name, lim in table.items():
        if lim.parent is None:
            out[name] = max(0, U[name] - S[name])
        elif lim.borrowing_limit is not None:
            out[name] = max(0, U[name] - S[name] - lim.borrowing_limit)
        else:
            out[name] = 0
    return out


def fits(table: dict[str, Limits], usage: dict[str, int], cq: str, amount: int) -> bool:
    """Does `amount` more fit in ClusterQueue `cq` with no limit anywhere exceeded further?"""
    if amount == 0:
        return True
    before = excess(table, usage)
    more = dict(usage)
    more[cq] = more.get(cq, 0) + amount
    after = excess(table, more)
    return all(after[n] <= before[n] for n in after)


# -- the workloads as the decisions describe them ---------------------------------------------
@dataclass
class Job:
    key: str
    op: Submit
    state: str = "pending"  # pending | admitted | finished | deleted
    queue_ts: tuple[float, int] = (0.0, 0)  # creation, or the last eviction; then entry order
    created: tuple[float, int] = (0.0, 0)  # creation time, then submission order
    cluster_queue: str | None = None
    usage: dict[FR, int] = field(default_factory=dict)
    admitted_at: float | None = None

    def totals(self) -> dict[str, int]:
        out = {"cpu": self.op.count * self.op.cpu}
        if self.op.gpu:
            out["nvidia.com/gpu"] = self.op.count * self.op.gpu
        return out

    def order_key(self) -> tuple:
        return (-self.op.priority, self.queue_ts)


class HistoryRun:
    """One history on one engine, every step checked (check=False: only record decisions)."""

    def __init__(self, world: World, check: bool = True) -> None:
        self.world = world
        self.check = check
        self.queues: dict[str, QueueW] = {q.name: q for q in world.queues}
        self.cohorts: dict[str, CohortW] = {c.name: c for c in world.cohorts}
        self.cq_stop: dict[str, str] = {q.name: "None" for q in world.queues}
        # (queue index, namespace index) -> stopPolicy; missing: the LocalQueue does not exist
        self.local_queues: dict[tuple[int, int], str] = {
            (i, ns): "None" for i in range(len(world.queues)) for ns in range(len(NAMESPACES))}
        self.jobs: dict[str, Job] = {}
        self.now = 0.0
        self.seq = 0
        self.steps: list[list[d.Decision]] = []
        fair = FairSharing(strategies=world.fair) if world.fair is not None else None
        e = self.engine = QuotaEngine(fair_sharing=fair)
        for f in world.flavors:
            e.set_flavor(flavor_spec(f))
        for ns in NAMESPACES:
            e.set_namespace(ns, {"kubernetes.io/metadata.name": ns, "team": ns})
        for c in world.cohorts:
            e.set_cohort(cohort_spec(c))
        for q in world.queues:
            e.set_cluster_queue(cluster_queue_spec(q))
        for (i, ns) in self.local_queues:
            e.set_local_queue(local_queue_spec(i, ns, world))

    # -- operations -------------------------------------------------------------------------
    def run(self, history: list[Op]) -> None:
        self.step(None)  # the objects alone
        for op in history:
            self.step(op)

    def step(self, op: Op | None) -> None:
        if op is not None:
            self.apply(op)
        before = self.usage_by_cq()
        was = {k: j.state for k, j in self.jobs.items()}
        decisions = self.engine.schedule(self.now)
        self.steps.append(decisions)
        self.follow(decisions, before, was)
        if self.check:
            self.check_state(before)

    def apply(self, op: Op) -> None:
        e, n = self.engine, len(self.world.queues)
        if isinstance(op, Submit):
            op = op._replace(queue=op.queue % n)
            for _ in range(op.copies):
                key = f"{NAMESPACES[op.ns]}/job-{len(self.jobs)}"
                self.seq += 1
                self.jobs[key] = Job(key, op, queue_ts=(self.now, self.seq), created=(self.now, self.seq))
                e.submit(workload_spec(key, op, self.now))
        elif isinstance(op, Finish):
            live = sorted(k for k, j in self.jobs.items() if j.state == "admitted")
            if live:
                self._remove(live[op.pick % len(live)], "finished")
        elif isinstance(op, Delete):
            live = sorted(k for k, j in self.jobs.items() if j.state in ("pending", "admitted"))
            if live:
                self._remove(live[op.pick % len(live)], "deleted")
        elif isinstance(op, SetQuota):
            self._set_quota(op)
        elif isinstance(op, StopQueue):
            name = self.world.queues[op.queue % n].name
            self.cq_stop[name] = op.policy
            e.set_cluster_queue(cluster_queue_spec(self.queues[name], op.policy))
        elif isinstance(op, StopLocalQueue):
            where = (op.queue % n, op.ns % len(NAMESPACES))
            if where in self.local_queues:
                self.local_queues[where] = op.policy
                e.set_local_queue(local_queue_spec(*where, self.world, op.policy))
        elif isinstance(op, LocalQueueExists):
            where = (op.queue % n, op.ns % len(NAMESPACES))
            if op.exists and where not in self.local_queues:
                self.local_queues[where] = "None"
                e.set_local_queue(local_queue_spec(*where, self.world))
            elif not op.exists and where in self.local_queues:
                del self.local_queues[where]
                e.remove_local_queue(NAMESPACES[where[1]], f"lq-{where[0]}")
        elif isinstance(op, Advance):
            self.now += op.seconds
        else:
            raise TypeError(op)

    def _remove(self, key: str, how: str) -> None:
        self.engine.finish(key) if how == "finished" else self.engine.delete(key)
        self.jobs[key].state = how
        self.jobs[key].usage = {}

    def _set_quota(self, op: SetQuota) -> None:
        if op.node >= 0:
            q = self.world.queues[op.node % len(self.world.queues)]
            node: QueueW | CohortW = self.queues[q.name]
            has_parent = node.cohort is not None
        else:
            if not self.cohorts:
                return
            node = self.cohorts[self.world.cohorts[(~op.node) % len(self.world.cohorts)].name]
            has_parent = node.parent is not None
        if not node.quotas:
            return
        i = op.entry % len(node.quotas)
        old = node.quotas[i]
        bl = op.borrowing_limit if has_parent else None
        ll = min(op.lending_limit, op.nominal) if has_parent and op.lending_limit is not None else None
        quotas = node.quotas[:i] + (Q(old.flavor, old.resource, op.nominal, bl, ll),) + node.quotas[i + 1:]
        node = dataclasses.replace(node, quotas=quotas)
        if isinstance(node, QueueW):
            self.queues[node.name] = node
            self.engine.set_cluster_queue(cluster_queue_spec(node, self.cq_stop[node.name]))
        else:
            self.cohorts[node.name] = node
            self.engine.set_cohort(cohort_spec(node))

    # -- following the decisions (invariants 2 and 3 as they come) ------------------------------
    def usage_by_cq(self) -> dict[str, dict[FR, int]]:
        out: dict[str, dict[FR, int]] = defaultdict(dict)
        for j in self.jobs.values():
            if j.state == "admitted":
                u = out[j.cluster_queue]
                for fr, v in j.usage.items():
                    u[fr] = u.get(fr, 0) + v
        return out

    def follow(self, decisions: list[d.Decision], before: dict[str, dict[FR, int]], was: dict[str, str]) -> None:
        usage = {cq: dict(u) for cq, u in before.items()}
        batch: list[d.Preempted] = []
        preempted: set[str] = set()
        for dec in decisions:
            job = self.jobs.get(dec.key)
            if job is None:
                raise violation(3, f"decision {dec!r} about a workload never submitted")
            if isinstance(dec, d.Preempted):
                if batch and batch[-1].preemptor != dec.preemptor:
                    raise violation(2, f"preemptions for {batch[-1].preemptor} not followed by its admission")
                if dec.key in preempted:
                    raise violation(3, f"{dec.key} preempted twice in one pass (by {dec.preemptor} this time): "
                                       f"a preemption cycle, {len(decisions)} decisions in this pass")
                preempted.add(dec.key)
                batch.append(dec)
                continue
            if isinstance(dec, d.Admitted):
                if job.state != "pending":
                    raise violation(3, f"{dec.key} admitted while {job.state}")
                if self.check:
                    self.check_admission(job, dec)
                    self.check_preemptions(job, dec, batch, usage)
                for p in batch:
                    self._requeue(p.key, usage)
                batch = []
                job.state, job.cluster_queue, job.admitted_at = "admitted", dec.admission.cluster_queue, self.now
                job.usage = {fr: v for fr, v in dec.admission.usage.items() if v}
                cu = usage.setdefault(job.cluster_queue, {})
                for fr, v in job.usage.items():
                    cu[fr] = cu.get(fr, 0) + v
            elif batch:
                raise violation(2, f"preemptions for {batch[-1].preemptor} not followed by its admission")
            elif isinstance(dec, d.Evicted):
                if job.state != "admitted":
                    raise violation(3, f"{dec.key} evicted while {job.state}")
                if self.check and self._stop_of(job) == "None":
                    raise violation(3, f"{dec.key} evicted ({dec.reason}) but neither its queue nor its LocalQueue drains")
                self._requeue(dec.key, usage)
            elif isinstance(dec, d.Pending):
                if job.state != "pending":
                    raise violation(3, f"{dec.key} reported pending while {job.state}")
        if batch:
            raise violation(2, f"preemptions for {batch[-1].preemptor} not followed by its admission")

    def _stop_of(self, job: Job) -> str:
        cq = self.cq_stop.get(job.cluster_queue, "None")
        lq = self.local_queues.get((job.op.queue, job.op.ns), "None")
        return "HoldAndDrain" if "HoldAndDrain" in (cq, lq) else "None"

    def _requeue(self, key: str, usage: dict[str, dict[FR, int]]) -> None:
        job = self.jobs[key]
        if job.state != "admitted":
            raise violation(3, f"{key} preempted or evicted while {job.state}")
        cu = usage[job.cluster_queue]
        for fr, v in job.usage.items():
            cu[fr] -= v
        self.seq += 1
        job.state, job.queue_ts, job.usage, job.admitted_at = "pending", (self.now, self.seq), {}, None

    # -- the checks ---------------------------------------------------------------------------------
    def queue_of(self, job: Job) -> QueueW:
        return self.queues[self.world.queues[job.op.queue].name]

    def queue_accepts(self, job: Job) -> bool:
        """The workload's LocalQueue exists and is active, its ClusterQueue is active and its
        namespace is selected."""
        lq = self.local_queues.get((job.op.queue, job.op.ns))
        q = self.queue_of(job)
        return lq == "None" and self.cq_stop[q.name] == "None" and self.namespace_allowed(job, q)

    @staticmethod
    def namespace_allowed(job: Job, q: QueueW) -> bool:
        return q.only_team is None or NAMESPACES[job.op.ns] == q.only_team

    def check_admission(self, job: Job, dec: d.Admitted) -> None:
        q = self.queue_of(job)
        adm = dec.admission
        if adm.cluster_queue != q.name:
            raise violation(3, f"{job.key} admitted to {adm.cluster_queue}, its LocalQueue points to {q.name}")
        if not self.queue_accepts(job):
            raise violation(3, f"{job.key} admitted through a stopped, missing or non-matching queue")
        flavors = adm.flavors_of("main")
        expected: dict[FR, int] = {}
        for res, total in job.totals().items():
            group = next((g for g in q.groups if res in g[0]), None)
            if group is None:
                raise violation(1, f"{job.key} admitted with {res}, which {q.name} does not cover")
            f = flavors.get(res)
            if f not in group[1]:
                raise violation(1, f"{job.key}: {res} assigned flavor {f}, not one of {group[1]}")
            if any(flavors.get(r, f) != f for r in group[0] if r in flavors):
                raise violation(1, f"{job.key}: one resource group assigned two flavors {flavors}")
            if total:
                expected[(f, res)] = total
        got = {fr: v for fr, v in adm.usage.items() if v}
        if got != expected:
            raise violation(1, f"{job.key}: admission usage {got} but its requests make {expected}")

    def check_preemptions(self, job: Job, dec: d.Admitted, batch: list[d.Preempted],
                          usage: dict[str, dict[FR, int]]) -> None:
        if sorted(p.key for p in batch) != sorted(dec.after_evicting):
            raise violation(2, f"{job.key} admitted after evicting {dec.after_evicting}, preempted {[p.key for p in batch]}")
        if not batch:
            return
        q = self.queue_of(job)
        contested = {fr for fr, v in dec.admission.usage.items() if v}
        cross: dict[str, list[d.Preempted]] = defaultdict(list)
        for p in batch:
            victim = self.jobs[p.key]
            vcq = victim.cluster_queue
            vp, pp = victim.op.priority, job.op.priority
            if p.reason == "InClusterQueue":
                ok = vcq == q.name and q.within != "Never" and (
                    vp < pp or (vp == pp and q.within == "LowerOrNewerEqualPriority"
                                and victim.created > job.created))
            else:
                ok = vcq != q.name and q.reclaim != "Never" and self.same_tree(vcq, q.name)
                if p.reason == "InCohortReclaimWhileBorrowing":
                    limit = pp if q.max_priority_threshold is None else min(pp, q.max_priority_threshold + 1)
                    ok = ok and q.borrow != "Never" and vp < limit
                elif p.reason == "InCohortReclamation":
                    ok = ok and (q.reclaim == "Any" or vp < pp)
                elif p.reason == "InCohortFairSharing":
                    ok = ok and self.world.fair is not None and (q.reclaim == "Any" or vp < pp)
                else:
                    ok = False
                cross[vcq].append(p)
            if not ok:
                raise violation(2, f"{job.key} (priority {pp}, {q.name}) preempted {p.key} (priority {vp}, {vcq}) "
                                   f"as {p.reason}, which {q.name}'s policy {q.within}/{q.reclaim}/{q.borrow} forbids")
        for vcq, victims in cross.items():
            self.check_victim_queue_borrows(job, vcq, victims, contested, usage)

    def check_victim_queue_borrows(self, job: Job, vcq: str, victims: list[d.Preempted], contested: set[FR],
                                   usage: dict[str, dict[FR, int]]) -> None:
        """Some order of taking these victims keeps their ClusterQueue above its nominal quota
        for a contested resource up to the last one taken."""
        q = self.queues[vcq]
        nominal = {(x.flavor, x.resource): x.nominal for x in q.quotas}
        cu = usage.get(vcq, {})
        for last in victims:
            left = dict(cu)
            for p in victims:
                if p is not last:
                    for fr, v in self.jobs[p.key].usage.items():
                        left[fr] = left.get(fr, 0) - v
            if any(left.get(fr, 0) > nominal.get(fr, 0) for fr in contested):
                return
        raise violation(2, f"{job.key} took {[p.key for p in victims]} ({victims[0].reason}) from {vcq}, "
                           f"which was within its nominal quota {nominal} for {sorted(contested)}: usage {cu}")

    def same_tree(self, a: str, b: str) -> bool:
        def root(cq: str) -> str | None:
            c = self.queues[cq].cohort
            while c is not None and self.cohorts[c].parent is not None:
                c = self.cohorts[c].parent
            return c

        return root(a) is not None and root(a) == root(b)

    def check_state(self, before: dict[str, dict[FR, int]]) -> None:
        self.check_bookkeeping()
        after = self.usage_by_cq()
        frs = {fr for u in list(before.values()) + list(after.values()) for fr in u}
        for fr in sorted(frs):
            table = quota_table(self.queues, self.cohorts, fr)
            b = excess(table, {cq: u.get(fr, 0) for cq, u in before.items()})
            a = excess(table, {cq: u.get(fr, 0) for cq, u in after.items()})
            for node, over in a.items():
                if over > b[node]:
                    kind = "ClusterQueue" if node in self.queues else "Cohort"
                    raise violation(1, f"{kind} {node} over its limit for {fr} by {over} (was {b[node]}) "
                                       f"usage {dict(after)}")
        for job in self.jobs.values():
            if job.state == "admitted" and self._stop_of(job) == "HoldAndDrain":
                raise violation(3, f"{job.key} still admitted in a draining queue")
        self.check_nothing_waits(after)

    def check_bookkeeping(self) -> None:
        e = self.engine
        pending = {k for k, j in self.jobs.items() if j.state == "pending"}
        admitted = {k for k, j in self.jobs.items() if j.state == "admitted"}
        if set(e.pending) != pending:
            raise violation(3, f"engine pending {sorted(e.pending)} but decisions say {sorted(pending)}")
        if set(e.state.admitted) != admitted:
            raise violation(3, f"engine admitted {sorted(e.state.admitted)} but decisions say {sorted(admitted)}")
        for k in admitted:
            got = {fr: v for fr, v in e.state.admitted[k].admission.usage.items() if v}
            if got != self.jobs[k].usage:
                raise violation(3, f"{k} holds {got} in the engine, admitted with {self.jobs[k].usage}")

    def check_nothing_waits(self, usage: dict[str, dict[FR, int]]) -> None:
        """Invariant 5. After a pass, a pending workload that its queue would take (LocalQueue
        present and active, ClusterQueue active, namespace selected) and that is not behind
        another in queue order (BestEffortFIFO: nothing is ahead; StrictFIFO: it is the head of
        the ClusterQueue's queue) is admitted if some flavor of every resource group it needs
        has room for its whole request, no borrowing or lending limit exceeded anywhere."""
        queued: dict[str, list[Job]] = defaultdict(list)
        for job in self.jobs.values():
            if job.state != "pending":
                continue
            lq = self.local_queues.get((job.op.queue, job.op.ns))
            q = self.queue_of(job)
            if lq == "None" and self.cq_stop[q.name] == "None":
                queued[q.name].append(job)
        for cq, jobs in queued.items():
            q = self.queues[cq]
            if q.strategy == "StrictFIFO":
                jobs = [min(jobs, key=Job.order_key)]
            for job in jobs:
                if self.namespace_allowed(job, q) and self.would_fit(job, q, usage):
                    raise violation(5, f"{job.key} ({job.op}) waits in {cq} although it fits; usage {dict(usage)}; "
                                       f"message {self.engine.pending_message(job.key)!r}")

    def would_fit(self, job: Job, q: QueueW, usage: dict[str, dict[FR, int]]) -> bool:
        totals = job.totals()
        for res, total in totals.items():
            if total and not any(res in cov for cov, _ in q.groups):
                return False
        for covered, flavors in q.groups:
            wanted = {r: totals[r] for r in covered if r in totals}
            if not wanted:
                continue
            if not any(all(self.fits_fr(q.name, (f, r), v, usage) for r, v in wanted.items()) for f in flavors):
                return False
        return True

    def fits_fr(self, cq: str, fr: FR, amount: int, usage: dict[str, dict[FR, int]]) -> bool:
        table = quota_table(self.queues, self.cohorts, fr)
        return fits(table, {c: u.get(fr, 0) for c, u in usage.items()}, cq, amount)


def run_history(world: World, history: list[Op]) -> HistoryRun:
    """Run and check every step, then replay on a fresh engine: the same decisions (invariant 4)."""
    first = HistoryRun(world)
    first.run(history)
    again = HistoryRun(world, check=False)
    again.run(history)
    for i, (a, b) in enumerate(zip(first.steps, again.steps)):
        if a != b:
            raise violation(4, f"step {i}: {a!r} then, on replay, {b!r}")
    return first
