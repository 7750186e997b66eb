"""Cost of one admission pass of the quota engine (not run by the test suite).

    python bench/engine_bench.py [--runs 5] [--pending 10000] [--queues 100] [--cohorts 10]

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import random
import statistics
import time

from extender.quota.engine import QuotaEngine
from extender.quota.fairsharing import FairSharing
from extender.quota.model import (
    ClusterQueueSpec, FlavorSpec, LocalQueueSpec, PodSetSpec, PreemptionSpec, Quota, ResourceGroupSpec, WorkloadSpec,
)

GPU = "nvidia.com/gpu"


def build(pending: int, queues: int, cohorts: int, fair: bool, seed: int = 1) -> QuotaEngine:
    engine = QuotaEngine(fair_sharing=FairSharing() if fair else None)
    engine.set_flavor(FlavorSpec("gh200"))
    everyone: dict = {}
    for i in range(queues):
        name = f"cq-{i}"
        engine.set_cluster_queue(ClusterQueueSpec(
            name=name, cohort=f"cohort-{i % cohorts}",
            resource_groups=(ResourceGroupSpec((GPU,), ("gh200",)),),
            quotas={("gh200", GPU): Quota(20, borrowing_limit=100)},
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
            pod_sets=(PodSetSpec("main", 1, {GPU: gpus}),), priority=prio, created=float(n),
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
    args = ap.parse_args()
    off = measure(args, fair=False)
    on = measure(args, fair=True)
    print(f"{args.pending} pending workloads, {args.queues} ClusterQueues in {args.cohorts} cohorts, median of {args.runs} runs (CPU s)")
    for name, r in (("fair sharing off", off), ("fair sharing on", on)):
        per = r["first"] / r["admitted"] * 1000 if r["admitted"] else float("nan")
        print(f"  {name:17}: first pass {r['first']:.3f} s ({r['admitted']:.0f} admitted, {per:.3f} ms each); "
              f"pass with nothing changed {r['second'] * 1000:.2f} ms")
    print(f"  fair sharing on / off, first pass: {on['first'] / off['first']:.2f}x")


if __name__ == "__main__":
    main()
