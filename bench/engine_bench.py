"""Cost of one admission pass of the quota engine (not run by the test suite).

    python bench/engine_bench.py [--runs 5] [--pending 10000] [--queues 100] [--cohorts 10]
    python bench/engine_bench.py --latency   # issue 8: per-admission and preemption-search latency

Builds `queues` ClusterQueues in `cohorts` cohorts (each with a nominal GPU quota, borrowing
allowed, reclaimWithinCohort Any, withinClusterQueue LowerPriority, as Kueue's benchmark
configures them), submits `pending` workloads of mixed sizes and priorities, and times the
first `schedule()` pass (which admits until quota runs out) and a second pass with nothing
changed (what every later event costs when it frees nothing). The same run with fair
sharing on and off; medians of --runs runs, CPU time.
"""

from __future__ import annotations

import argparse
import sys

import bench_env  # noqa: E402,F401  (the repository on sys.path, or one line saying why not)
import random
import statistics
import time

from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.fairsharing import FairSharing
from gpuqueue.extender.quota.model import (
    ClusterQueueSpec, FlavorSpec, LocalQueueSpec, PodSetSpec, PreemptionSpec, Quota, ResourceGroupSpec, WorkloadSpec,
)

GPU = "nvidia.com/gpu"


DISTINCT = "--distinct" in sys.argv  # every workload asks for something different: no two share a group


def build(pending: int, queues: int, cohorts: int, fair: bool, seed: int = 1) -> QuotaEngine:
    engine = QuotaEngine(fair_sharing=FairSharing() if fair else None)
    engine.set_flavor(FlavorSpec("gh200"))
    everyone: dict = {}
    for i in range(queues):
        name = f"cq-{i}"
        engine.set_cluster_queue(ClusterQueueSpec(
            name=name, cohort=f"cohort-{i % cohorts}",
            resource_groups=(ResourceGroupSpec((GPU, "cpu"), ("gh200",)),),
            quotas={("gh200", GPU): Quota(20, borrowing_limit=100), ("gh200", "cpu"): Quota(10**9)},
            namespace_selector=everyone,
            preemption=PreemptionSpec(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority"),
        ))
        engine.set_local_queue(LocalQueueSpec(f"ns-{i}", "lq", name))
    rng = random.Random(seed)
    sizes = [(1, 50), (5, 100), (20, 200)]
    for n in range(pending):
        q = n % queues
        gpus, prio = sizes[rng.choices(range(3), weights=(7, 2, 1))[0]]
        engine.submit(WorkloadSpec(
            key=f"ns-{q}/job-{n}", namespace=f"ns-{q}", queue_name="lq",
            pod_sets=(PodSetSpec("main", 1, {GPU: gpus, "cpu": 1000 + (n if DISTINCT else 0)}),), priority=prio, created=float(n),
        ))
    return engine


def measure(args, fair: bool) -> dict[str, float]:
    first, second, admitted = [], [], []
    for run in range(args.runs):
        engine = build(args.pending, args.queues, args.cohorts, fair, seed=run + 1)
        t0 = time.process_time()
        decisions = engine.schedule(0.0)
        t1 = time.process_time()
        engine.schedule(1.0)
        t2 = time.process_time()
        first.append(t1 - t0)
        second.append(t2 - t1)
        admitted.append(sum(1 for d in decisions if type(d).__name__ == "Admitted"))
    return {"first": statistics.median(first), "second": statistics.median(second), "admitted": statistics.median(admitted)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--queues", type=int, default=100)
    ap.add_argument("--cohorts", type=int, default=10)
    ap.add_argument("--distinct", action="store_true", help="no two workloads alike (the worst case for grouping)")
    args = ap.parse_args()
    off = measure(args, fair=False)
    on = measure(args, fair=True)
    alike = "every one different" if DISTINCT else "3 kinds"
    print(f"{args.pending} pending workloads ({alike}), {args.queues} ClusterQueues in {args.cohorts} cohorts, "
          f"median of {args.runs} runs (CPU s)")
    for name, r in (("fair sharing off", off), ("fair sharing on", on)):
        per = r["first"] / r["admitted"] * 1000 if r["admitted"] else float("nan")
        print(f"  {name:17}: first pass {r['first']:.3f} s ({r['admitted']:.0f} admitted, {per:.3f} ms each); "
              f"pass with nothing changed {r['second'] * 1000:.2f} ms")
    print(f"  fair sharing on / off, first pass: {on['first'] / off['first']:.2f}x")


if __name__ == "__main__" and "--latency" not in sys.argv:
    main()


# -- issue 8's two latency targets -------------------------------------------------------------

def admission_latencies(pending: int, queues: int, cohorts: int, fair: bool) -> list[float]:
    """Seconds between consecutive admissions in one pass (what each admitted workload cost,
    including the evaluations of those that did not fit in between)."""
    engine = build(pending, queues, cohorts, fair, seed=7)
    stamps: list[float] = []
    admit = engine._admit

    def timed_admit(*a, **k):
        stamps.append(time.perf_counter())
        return admit(*a, **k)

    engine._admit = timed_admit
    start = time.perf_counter()
    engine.schedule(0.0)
    prev, out = start, []
    for t in stamps:
        out.append(t - prev)
        prev = t
    return out


def preemption_search_latencies(admitted: int, searches: int) -> list[float]:
    """A cohort of 10 ClusterQueues holding `admitted` small borrowing workloads; each search
    is a high-priority workload of a queue under its nominal quota reclaiming its GPUs."""
    engine = QuotaEngine()
    engine.set_flavor(FlavorSpec("gh200"))
    per_cq = admitted // 10
    for i in range(10):
        engine.set_cluster_queue(ClusterQueueSpec(
            name=f"cq-{i}", cohort="big",
            resource_groups=(ResourceGroupSpec((GPU,), ("gh200",)),),
            quotas={("gh200", GPU): Quota(per_cq if i < 9 else 0)},
            namespace_selector={},
            preemption=PreemptionSpec(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority"),
        ))
        engine.set_local_queue(LocalQueueSpec(f"ns-{i}", "lq", f"cq-{i}"))
    # the borrowing-only queue takes the idle quota of queues 5..8
    for n in range(per_cq * 4):
        engine.submit(WorkloadSpec(key=f"ns-9/b-{n}", namespace="ns-9", queue_name="lq",
                                   pod_sets=(PodSetSpec("main", 1, {GPU: 1}),), created=float(n)))
    for i in range(5):
        for n in range(per_cq):
            engine.submit(WorkloadSpec(key=f"ns-{i}/w-{n}", namespace=f"ns-{i}", queue_name="lq",
                                       pod_sets=(PodSetSpec("main", 1, {GPU: 1}),), created=float(n)))
    engine.schedule(0.0)
    out = []
    for s in range(searches):
        i = 5 + s % 4
        wl = WorkloadSpec(key=f"ns-{i}/reclaim-{s}", namespace=f"ns-{i}", queue_name="lq",
                          pod_sets=(PodSetSpec("main", 1, {GPU: 8}),), priority=1000, created=1e6 + s)
        t0 = time.perf_counter()
        targets = engine.preemptor.get_targets(wl, f"cq-{i}", {("gh200", GPU): 8}, {("gh200", GPU)})
        out.append(time.perf_counter() - t0)
        assert len(targets) == 8, len(targets)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def latency_main() -> None:
    lat = admission_latencies(50_000, 1_000, 10, fair=False)
    print(f"50,000 pending over 1,000 ClusterQueues: {len(lat)} admitted in one pass; per admitted workload "
          f"p50 {pct(lat, .5) * 1000:.2f} ms, p99 {pct(lat, .99) * 1000:.2f} ms")
    lat = preemption_search_latencies(10_000, 200)
    print(f"preemption search, cohort with 10,000 admitted workloads: p50 {pct(lat, .5) * 1000:.2f} ms, "
          f"p99 {pct(lat, .99) * 1000:.2f} ms")


if __name__ == "__main__" and "--latency" in sys.argv:
    latency_main()
