"""Random quota trees and random histories for the quota engine, as small plain values.

A `World` is what an operator applies (flavors, cohorts with parents and quota of their own,
ClusterQueues with resource groups, limits, preemption policies, fair sharing); a history is a
list of operations (submit, finish, delete, quota change, queue stop, LocalQueue removal, time
passing). Both print as Python literals, so a shrunk failing example pastes straight into a
regression test. Operations name queues and workloads by index, taken modulo what exists when
they run, so any list is a valid history and shrinking never produces an impossible one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Union

from hypothesis import strategies as st

from gpuqueue.extender.quota.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorSpec,
    LocalQueueSpec,
    PodSetSpec,
    PreemptionSpec,
    Quota,
    ResourceGroupSpec,
    WorkloadSpec,
)

CPU, GPU = "cpu", "nvidia.com/gpu"
RESOURCES = (CPU, GPU)
NAMESPACES = ("a", "b")  # namespace a has team=a, b has team=b
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")
STRATEGY_LISTS = (
    ("LessThanOrEqualToFinalShare",),
    ("LessThanInitialShare",),
    ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
    ("LessThanInitialShare", "LessThanOrEqualToFinalShare"),
)


class Q(NamedTuple):
    """One quota entry: flavor, resource, nominalQuota, borrowingLimit, lendingLimit."""

    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class CohortW:
    name: str
    parent: str | None = None
    quotas: tuple[Q, ...] = ()
    weight: int = 1000


@dataclass(frozen=True)
class QueueW:
    name: str
    cohort: str | None
    groups: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (coveredResources, flavors)
    quotas: tuple[Q, ...]
    within: str = "Never"
    reclaim: str = "Never"
    borrow: str = "Never"
    max_priority_threshold: int | None = None
    strategy: str = "BestEffortFIFO"
    weight: int = 1000
    only_team: str | None = None  # namespaceSelector matchLabels team=...; None: {} (all)


@dataclass(frozen=True)
class World:
    flavors: tuple[str, ...]
    cohorts: tuple[CohortW, ...]
    queues: tuple[QueueW, ...]
    fair: tuple[str, ...] | None = None  # preemptionStrategies when fair sharing is on


# -- history operations ---------------------------------------------------------------------
class Submit(NamedTuple):
    """`copies` identical workloads (a burst of Jobs), one after another."""

    queue: int
    ns: int = 0
    priority: int = 0
    count: int = 1
    cpu: int = 1
    gpu: int = 0
    copies: int = 1


class Finish(NamedTuple):
    pick: int  # among admitted workloads, by key


class Delete(NamedTuple):
    pick: int  # among pending and admitted workloads, by key


class SetQuota(NamedTuple):
    """Replace one quota entry of a ClusterQueue (queue >= 0) or a Cohort (~index)."""

    node: int
    entry: int
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


class StopQueue(NamedTuple):
    queue: int
    policy: str


class StopLocalQueue(NamedTuple):
    queue: int
    ns: int
    policy: str


class LocalQueueExists(NamedTuple):
    queue: int
    ns: int
    exists: bool


class Advance(NamedTuple):
    seconds: int


Op = Union[Submit, Finish, Delete, SetQuota, StopQueue, StopLocalQueue, LocalQueueExists, Advance]


# -- to the engine's specs ---------------------------------------------------------------------
def quota_of(q: Q) -> Quota:
    return Quota(q.nominal, q.borrowing_limit, q.lending_limit)


def cohort_spec(c: CohortW) -> CohortSpec:
    return CohortSpec(c.name, c.parent, {(q.flavor, q.resource): quota_of(q) for q in c.quotas}, c.weight)


def cluster_queue_spec(w: QueueW, stop_policy: str = "None") -> ClusterQueueSpec:
    return ClusterQueueSpec(
        name=w.name,
        cohort=w.cohort,
        resource_groups=tuple(ResourceGroupSpec(cov, fl) for cov, fl in w.groups),
        quotas={(q.flavor, q.resource): quota_of(q) for q in w.quotas},
        namespace_selector={"matchLabels": {"team": w.only_team}} if w.only_team else {},
        queueing_strategy=w.strategy,
        preemption=PreemptionSpec(w.reclaim, w.within, w.borrow, w.max_priority_threshold),
        fair_weight_milli=w.weight,
        stop_policy=stop_policy,
    )


def flavor_spec(name: str) -> FlavorSpec:
    return FlavorSpec(name)


def local_queue_spec(queue: int, ns: int, world: World, stop_policy: str = "None") -> LocalQueueSpec:
    return LocalQueueSpec(NAMESPACES[ns], lq_name(queue), world.queues[queue].name, stop_policy)


def lq_name(queue: int) -> str:
    return f"lq-{queue}"


def workload_spec(key: str, op: Submit, created: float) -> WorkloadSpec:
    per_pod = {CPU: op.cpu}
    if op.gpu:
        per_pod[GPU] = op.gpu
    ns = NAMESPACES[op.ns]
    return WorkloadSpec(key=key, namespace=ns, queue_name=lq_name(op.queue),
                        pod_sets=(PodSetSpec("main", op.count, per_pod),), priority=op.priority, created=created)


# -- strategies ---------------------------------------------------------------------------
def _limits(draw, nominal: int, in_cohort: bool) -> tuple[int | None, int | None]:
    if not in_cohort:
        return (None, None)
    bl = draw(st.none() | st.integers(0, 4))
    ll = draw(st.none() | st.integers(0, nominal))
    return (bl, ll)


@st.composite
def quota_entries(draw, groups, in_cohort: bool, max_nominal: int = 6) -> tuple[Q, ...]:
    out = []
    for covered, flavors in groups:
        for f in flavors:
            for r in covered:
                n = draw(st.integers(0, max_nominal).map(lambda v: max_nominal - v))  # shrinks to roomy
                bl, ll = _limits(draw, n, in_cohort)
                out.append(Q(f, r, n, bl, ll))
    return tuple(out)


@st.composite
def resource_groups(draw, flavors: tuple[str, ...]):
    """One group covering cpu and the GPU, one group per resource with disjoint flavors, or a
    queue that covers cpu only (so GPU requests are never admitted there)."""
    layout = draw(st.sampled_from(("shared", "split", "cpu-only")) if len(flavors) > 1
                  else st.sampled_from(("shared", "cpu-only")))
    order = draw(st.permutations(flavors))
    if layout == "split":
        cut = draw(st.integers(1, len(order) - 1))
        return ((((CPU,), tuple(order[:cut])), ((GPU,), tuple(order[cut:]))))
    k = draw(st.integers(1, len(order)))
    covered = (CPU, GPU) if layout == "shared" else (CPU,)
    return ((covered, tuple(order[:k])),)


@st.composite
def contended_worlds(draw) -> World:
    """2-4 ClusterQueues in one cohort (under a parent half of the time), one shared flavor
    group, reclaim on: the shape in which borrowing, reclaim and fair-sharing preemption happen."""
    flavors = tuple(f"f{i}" for i in range(draw(st.integers(1, 2))))
    parent = draw(st.booleans())
    cohorts = [CohortW("c0", None, draw(quota_entries(((RESOURCES, flavors),), False, max_nominal=3)))]
    if parent:
        cohorts.append(CohortW("c1", "c0", draw(quota_entries(((RESOURCES, flavors),), True, max_nominal=2))))
    fair = draw(st.none() | st.sampled_from(STRATEGY_LISTS))
    queues = []
    for i in range(draw(st.integers(2, 4))):
        groups = (((RESOURCES), tuple(draw(st.permutations(flavors)))),)
        reclaim = draw(st.sampled_from(("Any", "LowerPriority")))
        borrow = draw(st.sampled_from(("Never", "LowerPriority")))
        queues.append(QueueW(
            name=f"cq-{i}", cohort=draw(st.sampled_from([c.name for c in cohorts])), groups=groups,
            quotas=draw(quota_entries(groups, True, max_nominal=4)),
            within=draw(st.sampled_from(("Never", "LowerPriority", "LowerOrNewerEqualPriority"))),
            reclaim=reclaim, borrow=borrow,
            max_priority_threshold=draw(st.none() | st.integers(0, 2)) if borrow != "Never" else None,
            strategy=draw(st.sampled_from(("BestEffortFIFO", "StrictFIFO"))),
            weight=draw(st.sampled_from((1000, 500, 2000, 0))) if fair else 1000,
        ))
    return World(flavors, tuple(cohorts), tuple(queues), fair)


@st.composite
def worlds(draw, max_queues: int = 8) -> World:
    flavors = tuple(f"f{i}" for i in range(draw(st.integers(1, 3))))
    n_cohorts = draw(st.sampled_from((1, 2, 3, 0)))
    cohorts = []
    for i in range(n_cohorts):
        parent = draw(st.none() | st.sampled_from([f"c{j}" for j in range(i)])) if i else None
        own = draw(st.booleans())
        quotas: tuple[Q, ...] = ()
        if own:
            sub = tuple(draw(st.lists(st.sampled_from(flavors), min_size=1, max_size=len(flavors), unique=True)))
            quotas = draw(quota_entries(((RESOURCES, sub),), parent is not None, max_nominal=4))
        cohorts.append(CohortW(f"c{i}", parent, quotas, draw(st.sampled_from((1000, 1000, 500, 2000, 0)))))
    fair = draw(st.none() | st.sampled_from(STRATEGY_LISTS))
    queues = []
    for i in range(draw(st.integers(1, max_queues))):
        cohort = None
        if cohorts and draw(st.integers(0, 3)):  # most queues share capacity
            cohort = draw(st.sampled_from([c.name for c in cohorts]))
        groups = draw(resource_groups(flavors))
        quotas = draw(quota_entries(groups, cohort is not None))
        reclaim = draw(st.sampled_from(("Never", "LowerPriority", "Any")))
        borrow = "Never" if reclaim == "Never" else draw(st.sampled_from(("Never", "LowerPriority")))
        queues.append(QueueW(
            name=f"cq-{i}",
            cohort=cohort,
            groups=groups,
            quotas=quotas,
            within=draw(st.sampled_from(("Never", "LowerPriority", "LowerOrNewerEqualPriority"))),
            reclaim=reclaim,
            borrow=borrow,
            max_priority_threshold=draw(st.none() | st.integers(0, 2)) if borrow != "Never" else None,
            strategy=draw(st.sampled_from(("BestEffortFIFO", "StrictFIFO"))),
            weight=draw(st.sampled_from((1000, 1000, 500, 2000, 0))) if fair else 1000,
            only_team=draw(st.sampled_from((None, None, None, "a"))),
        ))
    return World(flavors, tuple(cohorts), tuple(queues), fair)


def submits() -> st.SearchStrategy[Submit]:
    return st.builds(Submit, queue=st.integers(0, 7), ns=st.integers(0, 1), priority=st.integers(0, 2),
                     count=st.sampled_from((1, 2, 1, 3)), cpu=st.sampled_from((1, 2, 1, 0, 3)), gpu=st.sampled_from((0, 1, 0, 2)),
                     copies=st.integers(1, 4))


def queue_controls() -> st.SearchStrategy[Op]:
    """Stopping and resuming queues, removing and recreating LocalQueues; resuming is as likely
    as stopping, so histories do not end with every queue stopped."""
    policy = st.sampled_from(("None", "None", "Hold", "HoldAndDrain"))
    return st.one_of(
        st.builds(StopQueue, st.integers(0, 7), policy),
        st.builds(StopLocalQueue, st.integers(0, 7), st.integers(0, 1), policy),
        st.builds(LocalQueueExists, st.integers(0, 7), st.integers(0, 1), st.sampled_from((True, True, False))),
    )


def operations() -> st.SearchStrategy[Op]:
    sub = submits()
    finish = st.builds(Finish, st.integers(0, 20))
    advance = st.builds(Advance, st.integers(1, 60))
    rare = st.one_of(
        st.builds(Delete, st.integers(0, 20)),
        st.builds(SetQuota, st.integers(-3, 7), st.integers(0, 11), st.integers(0, 6),
                  st.none() | st.integers(0, 4), st.none() | st.integers(0, 6)),
        queue_controls(),
    )
    return st.one_of(sub, sub, sub, sub, sub, sub, sub, sub, finish, finish, finish, advance, advance, rare, rare)


def workload_operations() -> st.SearchStrategy[Op]:
    """Only submit, finish and time passing: contention without queues going away."""
    sub, finish = submits(), st.builds(Finish, st.integers(0, 20))
    return st.one_of(sub, sub, sub, finish, finish, st.builds(Advance, st.integers(1, 60)))


def histories(chunks: int = 10, chunk_size: int = 12, ops: st.SearchStrategy[Op] | None = None
              ) -> st.SearchStrategy[list[Op]]:
    """Lists of lists, flattened: Hypothesis keeps a flat list short (about 5 on average);
    this way histories average some 25 operations and still shrink op by op."""
    ops = ops if ops is not None else operations()
    return st.lists(st.lists(ops, max_size=chunk_size), min_size=1, max_size=chunks).map(
        lambda parts: [op for part in parts for op in part])
