"""Cost of preemption for room on the nodes (Kueue's preemption with TAS), not run by the suite.

    python bench/tas_preemption_bench.py [--runs 5] [--blocks 8] [--racks 4] [--nodes 8] [--jobs 4]

A Topology of BLOCKS x RACKS x NODES nodes of 4 GPUs; a lender ClusterQueue whose quota is every
GPU and a borrower with none, in one cohort. The borrower fills every node with 1-pod 4-GPU Jobs
pinned to their nodes, taking the racks in turn: Kueue's order (most recently admitted first) then
tries one Job on every rack before it frees any, the search's bad case. Then the lender submits
JOBS Jobs of NODES pods x 4 GPUs, each needing a whole rack. The simulator drives the engine with its nodes; what is timed
is the engine's passes at the lender's submission (CPU time, median of --runs), in three set-ups of
the same size:

- tas-reclaim: as above - every lender Job preempts a rack's borrowers;
- tas-free: the borrower submits nothing - the same Jobs placed on free racks (no preemption);
- quota-reclaim: the same fill and reclaim on a flavor without a Topology (quota preemption only).
"""

from __future__ import annotations

import argparse
import statistics
import time

import bench_env  # noqa: F401  (the repository on sys.path, or one line saying why not)

from gpuqueue.extender.simulate.runner import Simulation
from gpuqueue.extender.simulate.scenario import load_scenario

RACK, BLOCK = "example.com/rack", "example.com/block"


def scenario(blocks: int, racks: int, nodes: int, jobs: int, fill: bool, topology: bool) -> str:
    gpus = blocks * racks * nodes * 4
    docs = [f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {{name: t}}\nspec: {{levels: "
            f"[{{nodeLabel: {BLOCK}}}, {{nodeLabel: {RACK}}}, {{nodeLabel: kubernetes.io/hostname}}]}}\n",
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: gh200}\nspec: {"
            + ("topologyName: t" if topology else "") + "}\n"]
    for name, ns, quota, extra in (("lender", "a", gpus, "  preemption: {reclaimWithinCohort: Any}\n"),
                                   ("borrower", "b", 0, "")):
        docs.append(f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: {name}}}\nspec:\n"
                    f"  namespaceSelector: {{}}\n  cohortName: pool\n{extra}"
                    f"  resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: gh200, resources: "
                    f"[{{name: nvidia.com/gpu, nominalQuota: {quota}}}]}}]}}]\n")
        docs.append(f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{namespace: {ns}, name: lq}}\n"
                    f"spec: {{clusterQueue: {name}}}\n")
    for b in range(blocks):
        for r in range(racks):
            for n in range(nodes):
                host = f"b{b}-r{r}-n{n}"
                docs.append(f"apiVersion: v1\nkind: Node\nmetadata: {{name: {host}, labels: {{kubernetes.io/hostname: "
                            f"{host}, {BLOCK}: b{b}, {RACK}: b{b}-r{r}}}}}\nstatus: {{allocatable: {{nvidia.com/gpu: \"4\"}}}}\n")
    events = []
    if fill:  # one Job a node, pinned by its nodeSelector, taking the racks in turn: the most recent
        # Jobs (Kueue's candidates first) are one on each rack
        hosts = [[f"b{b}-r{r}-n{n}" for n in range(nodes)] for b in range(blocks) for r in range(racks)]
        for i in range(nodes):
            for rack in hosts:
                events.append(submit(0, "b", rack[i], 1, {}, count=1, host=rack[i]))
    ann = {"kueue.x-k8s.io/podset-required-topology": RACK} if topology else {}
    events.append(submit(10, "a", "train", nodes, ann, count=jobs))
    docs.append("apiVersion: gpuqueue.io/v1alpha1\nkind: Scenario\nevents:\n" + "".join(events))
    return "---\n".join(docs)


def submit(at: int, ns: str, name: str, pods: int, annotations: dict, count: int, host: str | None = None) -> str:
    meta = f"metadata: {{annotations: {annotations}}}, " if annotations else ""
    selector = f"nodeSelector: {{kubernetes.io/hostname: {host}}}, " if host else ""
    return (f"- at: {at}\n  count: {count}\n  submit:\n    apiVersion: batch/v1\n    kind: Job\n"
            f"    metadata: {{namespace: {ns}, name: {name}, labels: {{kueue.x-k8s.io/queue-name: lq}}}}\n"
            f"    spec: {{parallelism: {pods}, template: {{{meta}spec: {{{selector}restartPolicy: Never, containers: "
            f"[{{name: w, image: x, resources: {{limits: {{nvidia.com/gpu: 4}}}}}}]}}}}}}\n")


def timed_pass(text: str) -> tuple[float, int, int]:
    """CPU seconds of the engine's passes at t=10, their admissions and preemptions."""
    sim = Simulation(load_scenario(text, "bench.yaml"))
    spent = []
    schedule = sim.engine.schedule

    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return schedule(*args, **kwargs)
        finally:
            if sim.now == 10:
                spent.append(time.process_time() - start)

    sim.engine.schedule = timed
    for step in sim.run():
        if step.time == 10:
            kinds = [e["kind"] for e in step.events]
            return sum(spent), kinds.count("Admitted"), kinds.count("Preempted")
    raise AssertionError("nothing happened at t=10")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--racks", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=8, help="nodes per rack (and pods per lender Job)")
    ap.add_argument("--jobs", type=int, default=4, help="lender Jobs, each needing a whole rack")
    args = ap.parse_args()
    total = args.blocks * args.racks * args.nodes
    print(f"{total} nodes ({args.blocks} blocks x {args.racks} racks x {args.nodes}), {total} borrower Jobs, "
          f"{args.jobs} lender Jobs of {args.nodes} pods; medians of {args.runs} runs, CPU time of the engine's passes")
    results = {}
    for label, fill, topology in (("tas-reclaim", True, True), ("tas-free", False, True), ("quota-reclaim", True, False)):
        text = scenario(args.blocks, args.racks, args.nodes, args.jobs, fill, topology)
        runs = [timed_pass(text) for _ in range(args.runs)]
        results[label] = statistics.median(r[0] for r in runs)
        print(f"  {label:14s} {results[label] * 1000:9.1f} ms  admitted {runs[0][1]}, preempted {runs[0][2]}")
    base = results["tas-free"]
    print(f"  ratio tas-reclaim / tas-free {results['tas-reclaim'] / base:.1f}x, "
          f"tas-reclaim / quota-reclaim {results['tas-reclaim'] / results['quota-reclaim']:.1f}x")


if __name__ == "__main__":
    main()
