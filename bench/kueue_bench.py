"""Kueue's scheduler benchmarks (test/performance/scheduler/configs/), replayed in virtual time.

    python bench/kueue_bench.py baseline [--runs 3] [--write-scenario FILE]
    python bench/kueue_bench.py large-scale
    python bench/kueue_bench.py custom --cohorts 2 --queues 3 --scale 0.1

Writes the configuration as a `gpuqueue simulate` scenario (cohorts x ClusterQueues, nominal
quota 20, borrowingLimit 100, reclaimWithinCohort Any, withinClusterQueue LowerPriority;
small/medium/large workload classes submitted at fixed intervals with fixed runtimes), runs it
through the simulator without output, and reports per class the average time to admission,
the ClusterQueue usage as Kueue's runner reports it (time-weighted usage over nominal quota,
the minimum over ClusterQueues), preemptions, CPU time and peak memory. Medians of --runs.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import bench_env  # noqa: E402,F401  (the repository on sys.path, or one line saying why not)

from gpuqueue.extender.simulate.runner import Simulation  # noqa: E402
from gpuqueue.extender.simulate.scenario import load_scenario  # noqa: E402

RES = "cpu"


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    count: int  # per ClusterQueue
    request: int  # cpu
    runtime: float  # seconds
    priority: int
    every: float  # seconds between submissions


@dataclass(frozen=True)
class Config:
    cohorts: int
    queues_per_cohort: int
    classes: tuple[WorkloadClass, ...]
    nominal: int = 20
    borrowing_limit: int = 100
    published: dict | None = None


CONFIGS = {
    "baseline": Config(5, 6, (
        WorkloadClass("small", 350, 1, 0.2, 50, 0.1),
        WorkloadClass("medium", 100, 5, 0.5, 100, 0.5),
        WorkloadClass("large", 50, 20, 1.0, 200, 1.2),
    ), published={"wall": 351, "small": 215, "medium": 76.8, "large": 16.5, "usage": 55.9}),
    "large-scale": Config(10, 100, (
        WorkloadClass("small", 35, 1, 0.15, 50, 0.06),
        WorkloadClass("medium", 11, 5, 0.35, 100, 0.3),
        WorkloadClass("large", 4, 20, 0.7, 200, 0.7),
    ), published={"wall": 1179, "small": 700, "medium": 256, "large": 106, "usage": 38.6}),
}


def scenario_text(cfg: Config) -> str:
    docs = ["apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}\n"]
    for c in cfg.classes:
        docs.append(f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {{name: {c.name}}}\nvalue: {c.priority}\n")
    events = []
    for co in range(cfg.cohorts):
        for q in range(cfg.queues_per_cohort):
            cq = f"cq-{co}-{q}"
            docs.append(
                f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: {cq}}}\nspec:\n"
                f"  cohortName: cohort-{co}\n  namespaceSelector: {{}}\n"
                f"  preemption: {{reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}}\n"
                f"  resourceGroups:\n  - coveredResources: [{RES}]\n    flavors:\n    - name: default\n"
                f"      resources: [{{name: {RES}, nominalQuota: {cfg.nominal}, borrowingLimit: {cfg.borrowing_limit}}}]\n"
            )
            docs.append(f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{namespace: {cq}, name: lq}}\nspec: {{clusterQueue: {cq}}}\n")
            for c in cfg.classes:
                events.append(
                    f"- at: {c.every}\n  every: {c.every}\n  count: {c.count}\n  submit:\n"
                    f"    apiVersion: batch/v1\n    kind: Job\n"
                    f"    metadata: {{namespace: {cq}, name: {c.name}, labels: {{kueue.x-k8s.io/queue-name: lq, "
                    f"kueue.x-k8s.io/priority-class: {c.name}}}, annotations: {{gpuqueue.io/runtime-seconds: '{c.runtime}'}}}}\n"
                    f"    spec: {{template: {{spec: {{restartPolicy: Never, containers: [{{name: w, image: busybox, "
                    f"resources: {{requests: {{{RES}: '{c.request}'}}}}}}]}}}}}}\n"
                )
    docs.append("apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n" + "".join(events))
    return "---\n".join(docs)


def replay(cfg: Config, text: str) -> dict:
    scenario = load_scenario(text, "kueue-bench")
    t0 = time.process_time()
    sim = Simulation(scenario)
    created: dict[str, float] = {}
    waits: dict[str, list[float]] = {c.name: [] for c in cfg.classes}
    usage_area: dict[str, float] = {}
    last_usage: dict[str, int] = {}
    last_t = 0.0
    first_submit = min(c.every for c in cfg.classes)
    end = 0.0
    preemptions = 0
    for step in sim.run():
        dt = step.time - last_t
        for cq, u in last_usage.items():
            usage_area[cq] = usage_area.get(cq, 0.0) + u * dt
        last_t = step.time
        for ev in step.events:
            kind = ev["kind"]
            if kind == "Admitted" and ev["job"] not in created:
                created[ev["job"]] = step.time
                cls = ev["job"].split("/")[1].rsplit("-", 1)[0]
                submitted = _submit_time(cfg, cls, ev["job"])
                waits[cls].append(step.time - submitted)
            elif kind == "Preempted":
                preemptions += 1
        for cq, flavors in step.usage.items():
            raw = flavors.get("default", {}).get(RES, "0")
            last_usage[cq] = _milli(raw)
        end = step.time
    cpu = time.process_time() - t0
    span = max(end - first_submit, 1e-9)
    quota = cfg.nominal * 1000
    per_cq = [usage_area.get(cq, 0.0) / span / quota * 100 for cq in sim.cq_order]
    return {
        "cpu": cpu,
        "virtual": end,
        "avg_wait": {k: (sum(v) / len(v) if v else float("nan")) for k, v in waits.items()},
        "admitted": sum(len(v) for v in waits.values()),
        "min_usage": min(per_cq) if per_cq else 0.0,
        "preemptions": preemptions,
    }


def _milli(raw: str) -> int:
    return int(raw[:-1]) if raw.endswith("m") else int(float(raw) * 1000)


def _submit_time(cfg: Config, cls: str, job: str) -> float:
    c = next(c for c in cfg.classes if c.name == cls)
    n = int(job.rsplit("-", 1)[1])
    return c.every + n * c.every


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", choices=[*CONFIGS, "custom"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cohorts", type=int, default=2)
    ap.add_argument("--queues", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every class's count (custom)")
    ap.add_argument("--write-scenario", default=None)
    args = ap.parse_args()
    if args.config == "custom":
        base = CONFIGS["baseline"]
        cfg = Config(args.cohorts, args.queues, tuple(
            WorkloadClass(c.name, max(1, int(c.count * args.scale)), c.request, c.runtime, c.priority, c.every)
            for c in base.classes))
    else:
        cfg = CONFIGS[args.config]
    text = scenario_text(cfg)
    if args.write_scenario:
        Path(args.write_scenario).write_text(text)
    results = [replay(cfg, text) for _ in range(args.runs)]
    med = lambda f: statistics.median(f(r) for r in results)  # noqa: E731
    total = cfg.cohorts * cfg.queues_per_cohort * sum(c.count for c in cfg.classes)
    print(f"{args.config}: {cfg.cohorts} cohorts x {cfg.queues_per_cohort} ClusterQueues, {total} workloads; "
          f"median of {args.runs} runs")
    print(f"  engine CPU {med(lambda r: r['cpu']):.1f} s for {med(lambda r: r['virtual']):.1f} s of virtual time; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print(f"  admitted {med(lambda r: r['admitted']):.0f}, preemptions {med(lambda r: r['preemptions']):.0f}, "
          f"min ClusterQueue usage {med(lambda r: r['min_usage']):.1f}%")
    for c in cfg.classes:
        print(f"  avg time to admission {c.name:6}: {med(lambda r: r['avg_wait'][c.name]):.2f} s")
    if cfg.published:
        p = cfg.published
        print(f"  Kueue published: wall {p['wall']} s; small {p['small']} s, medium {p['medium']} s, "
              f"large {p['large']} s; usage {p['usage']}%")


if __name__ == "__main__":
    main()
