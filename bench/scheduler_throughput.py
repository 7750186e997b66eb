"""Benchmark: how many pods a real kube-scheduler binds per second with gpuqueue's extender in its
configuration and without it (issue 37), on a real control plane.

The end-to-end suite's control plane (tests/e2e/harness.py: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, `gpuqueue webhook` and `gpuqueue extender`, named by the
GPUQUEUE_E2E_* variables of tests/e2e/env.py), with kube-scheduler's client QPS raised to 1000 and
kube-controller-manager's to 500, so client throttling is not what is measured. NODES fake Nodes of
8 GPUs (GH200), one ClusterQueue covering them all. Each phase runs one Job of PODS pods of 1 GPU:

- "with": kube-scheduler has the extender in its configuration; the Job names a LocalQueue, so
  gpuqueue queues it, admits it as one Workload and unsuspends it; kube-scheduler calls /filter
  for every pod;
- "without": kube-scheduler restarted without the extender; the same Job in a namespace with no
  LocalQueue and no queue label, which gpuqueue leaves alone.

- "bare" (``--bare``): as "without", but kube-scheduler calls an extender that does no work
  (bench/bare_extender.py: /filter passes the first candidate, on the same HTTP layer and TLS):
  what the call itself costs kube-scheduler, apart from what gpuqueue does to answer it.

The webhooks serve every pod and binding in all of them. "backlog": kube-scheduler is stopped, the Job's
pods are all created, then it is started and drains them. "live": kube-scheduler runs while the
Job controller creates the pods. The figure: pods bound per second over the middle 80% of the
bindings (the time the passive fake kubelet's pod watch saw each binding). Phases alternate with
and without, the order flipping each run; the result is the median of the runs and its ratio to the
median without, per mode, with the spread. Each phase also prints each process's CPU per pod,
kube-apiserver's writes per pod, and kube-scheduler's own mean time per scheduling attempt (its
scheduling algorithm: its filters, the extender's call and its scores, the serial step of every
pod; and its Filter and Score extension points alone), read from its /metrics before it restarts.

By default every process runs at the same CPU weight. ``--pod-cpu-shares`` puts each in a cpu
cgroup with the shares of its pod's CPU request instead, as the kubelet does on a node that runs
them all: kubeadm's requests for the control plane (kube-apiserver 250m, kube-controller-manager
200m, kube-scheduler 100m, etcd 100m), manifests/install.yaml's for gpuqueue's extender and
webhook. On 2 saturated cores, how long a process waits for a CPU each time it wakes (printed per
phase) is much of what a synchronous call to it costs its caller.

    GPUQUEUE_E2E_K8S_BIN=... GPUQUEUE_E2E_ETCD=... GPUQUEUE_E2E_KUBECTL=... \\
        python bench/scheduler_throughput.py [--nodes 500] [--pods 1000] [--runs 3] [--modes backlog,live] [--bare]
            [--bare-pack] [--pod-cpu-shares]
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import sys
import time
from pathlib import Path
from urllib.request import urlopen

import bench_env  # noqa: F401  (the repository on sys.path, or one line saying why not)

from tests.e2e import cases as C  # noqa: E402
from tests.e2e.env import missing  # noqa: E402
from tests.e2e.harness import GH200, Cluster, is_true  # noqa: E402
from bench_env import cpu_seconds, run_queue_wait  # noqa: E402
from webhook_cost_real import failed_webhook_calls, samples, scrape  # noqa: E402

GPUS_PER_NODE = 8
QUEUE = "tput"


def setup(e2e: Cluster, nodes: int) -> None:
    t0 = time.monotonic()
    for i in range(nodes):
        e2e.node(f"tput-{i:04d}", GPUS_PER_NODE, GH200)
    e2e.apply([C.flavor(QUEUE, GH200), C.cluster_queue(QUEUE, QUEUE, nodes * GPUS_PER_NODE)], server_side=True)
    print(f"{nodes} nodes and the ClusterQueue in {time.monotonic() - t0:.1f} s", flush=True)


def rate(times: list[float]) -> float:
    """Bindings per second over the middle 80%."""
    times = sorted(times)
    lo, hi = int(len(times) * 0.1), int(len(times) * 0.9) - 1
    return (hi - lo) / (times[hi] - times[lo]) if times[hi] > times[lo] else float("inf")


def process_cpu(e2e: Cluster) -> dict[str, tuple[float, float, int]]:
    """Of each live process of the cluster (kube-scheduler under one name whether or not it has
    the extender), so far: CPU seconds, seconds waited for a CPU, times put on one."""
    out = {}
    for p in e2e.c.procs:
        if p.pid is not None and p.alive():
            try:
                cpu, (waited, slices) = cpu_seconds(p.pid), run_queue_wait(p.pid)
            except OSError:
                continue
            was = out.get(p.name, (0.0, 0.0, 0))
            out[p.name] = (was[0] + cpu, was[1] + waited, was[2] + slices)
    return out


def writes(e2e: Cluster) -> dict[str, float]:
    """kube-apiserver's count of write requests so far, by verb, resource and subresource."""
    out: dict[str, float] = {}
    for labels, value in samples(scrape(e2e), "apiserver_request_total"):
        if labels.get("verb") in ("GET", "LIST", "WATCH", "CONNECT"):
            continue
        key = f"{labels.get('verb')} {labels.get('resource')}{'/' + labels['subresource'] if labels.get('subresource') else ''}"
        out[key] = out.get(key, 0.0) + value
    return out


def scheduler_metrics(e2e: Cluster) -> dict[str, float]:
    """kube-scheduler's own cumulative timings since it started (it restarts every phase), in
    seconds, with the count of each: its scheduling algorithm (filters, the extender's calls,
    scores: the serial step of every pod) and its Filter extension point (its own filters)."""
    c = e2e.c
    ctx = ssl.create_default_context(cafile=c.path("pki", "ca.crt"))
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.load_cert_chain(c.path("pki", "admin.crt"), c.path("pki", "admin.key"))
    with urlopen(f"https://127.0.0.1:{c.ports['scheduler']}/metrics", context=ctx, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for key, metric, point in (("algorithm", "scheduler_scheduling_algorithm_duration_seconds", None),
                               ("filter", "scheduler_framework_extension_point_duration_seconds", "Filter"),
                               ("score", "scheduler_framework_extension_point_duration_seconds", "Score")):
        for part in ("sum", "count"):
            out[f"{key}_{part}"] = sum(v for labels, v in samples(text, f"{metric}_{part}")
                                       if point is None or labels.get("extension_point") == point)
    return out


# CPU requests of the control plane's static pods as kubeadm writes them (their cgroups' weights).
KUBEADM_REQUESTS = {"kube-apiserver": "250m", "kube-controller-manager": "200m", "kube-scheduler": "100m",
                    "etcd": "100m"}
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller; cgroup v2 has cpu.weight instead


def pod_cpu_shares() -> dict[str, int]:
    """Each process's cpu.shares as the kubelet sets them for its pod (1024 per CPU requested):
    kubeadm's for the control plane, manifests/install.yaml's for gpuqueue (the bare extender
    stands in for gpuqueue's)."""
    import yaml

    requests = dict(KUBEADM_REQUESTS)
    manifest = Path(__file__).resolve().parents[1] / "manifests" / "install.yaml"
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc and doc.get("kind") == "Deployment" and doc["metadata"]["name"] in ("gpuqueue-extender", "gpuqueue-webhook"):
            requests[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    requests["bare-extender"] = requests["gpuqueue-extender"]
    milli = {k: int(v[:-1]) if v.endswith("m") else int(float(v) * 1000) for k, v in requests.items()}
    return {k: max(2, m * 1024 // 1000) for k, m in milli.items()}


def place_in_cgroups(e2e: Cluster, shares: dict[str, int]) -> None:
    """Every process of the cluster into a cpu cgroup of its own with its pod's shares, as the
    kubelet puts pods (the bench itself, the fake kubelet, in one of 1024, a node daemon's)."""
    pids = {p.name: p.pid for p in e2e.c.procs if p.pid is not None and p.alive()}
    pids["bench"] = os.getpid()
    for name, pid in pids.items():
        group = CPU_CGROUPS / "gpuqueue-bench" / name
        group.mkdir(parents=True, exist_ok=True)
        (group / "cpu.shares").write_text(str(shares.get(name, 1024)))
        (group / "cgroup.procs").write_text(str(pid))


def leave_cgroups() -> None:
    top = CPU_CGROUPS / "gpuqueue-bench"
    if not top.is_dir():
        return
    for group in top.iterdir():
        if group.is_dir():
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    (CPU_CGROUPS / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # it ended meanwhile
            group.rmdir()
    top.rmdir()


def start_bare_extender(e2e: Cluster, pack: int = 0):
    """bench/bare_extender.py on a free port, and kube-scheduler's configuration entry for it."""
    port = e2e.rc.free_ports(1)[0]
    e2e.c.spawn("bare-extender", [sys.executable, str(Path(__file__).with_name("bare_extender.py")),
                                  "--cert-dir", str(e2e.certs), "--port", str(port), "--pack", str(pack)])
    e2e.wait_for("the bare extender listening", lambda: _listening(port), timeout=30, poll=0.2)
    return e2e.rc.extender_from_cert_dir(f"https://127.0.0.1:{port}", str(e2e.certs))


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def phase(e2e: Cluster, name: str, variant: str, mode: str, pods: int,
          bare=None, shares: dict[str, int] | None = None) -> tuple[float, float, dict[str, float]]:
    """One Job's pods bound: the rate (see the module's docstring), the webhook calls that
    failed meanwhile (kube-apiserver's calling_webhook_error), and each process's CPU ms per pod
    from kube-scheduler's start (backlog) or the Job's creation (live) to the last binding."""
    c = e2e.c
    extender = variant == "with"
    scheduler_extender = {"with": c.extender, "without": None, "bare": bare}[variant]
    failed_before = failed_webhook_calls(e2e)
    e2e.namespace(name)
    if extender:
        e2e.apply(C.local_queue(name, QUEUE, QUEUE))
    c.stop_scheduler()
    cpu0, w0 = {}, {}
    if mode == "live":
        c.start_scheduler(extender=scheduler_extender)
        if shares:
            place_in_cgroups(e2e, shares)
        cpu0, w0 = process_cpu(e2e), writes(e2e)
    e2e.apply(C.job(name, "tput", gpus=1, pods=pods, queue=QUEUE if extender else None))
    if extender:
        e2e.wait_for("the Job admitted", lambda: is_true(e2e.workload_of(name, "tput"), "Admitted"), timeout=120)
    if mode == "backlog":
        e2e.wait_for(f"{pods} pods created", lambda: len(e2e.job_pods(name, "tput")) >= pods, timeout=300, poll=1.0)
        c.start_scheduler(extender=scheduler_extender)
        if shares:
            place_in_cgroups(e2e, shares)
        cpu0, w0 = process_cpu(e2e), writes(e2e)
    uids: list[str] = []

    def all_bound() -> bool:
        nonlocal uids
        if len(uids) < pods:
            uids = [p["metadata"]["uid"] for p in e2e.job_pods(name, "tput")]
        return len(uids) >= pods and all(u in e2e.kubelet.bound_at for u in uids)

    e2e.wait_for(f"{pods} pods bound", all_bound, timeout=600, poll=0.2)
    cpu1, w1 = process_cpu(e2e), writes(e2e)
    try:
        m = scheduler_metrics(e2e)
        print("  kube-scheduler ms per attempt: " + ", ".join(
            f"{k} {m[k + '_sum'] * 1000 / m[k + '_count']:.2f} ({m[k + '_count']:.0f})"
            for k in ("algorithm", "filter", "score") if m[k + "_count"]), flush=True)
    except OSError as exc:
        print(f"  kube-scheduler's /metrics: {exc}", flush=True)
    per_pod = {k: (cpu1[k][0] - cpu0[k][0]) * 1000 / pods for k in cpu1 if k in cpu0}
    waits = {k: ((cpu1[k][1] - cpu0[k][1]) * 1000 / pods, (cpu1[k][1] - cpu0[k][1]) * 1e6 / max(cpu1[k][2] - cpu0[k][2], 1))
             for k in cpu1 if k in cpu0}
    print("  waited for a CPU, ms per pod (us per wake-up): " + ", ".join(
        f"{k} {ms:.2f} ({us:.0f})" for k, (ms, us) in sorted(waits.items(), key=lambda kv: -kv[1][0])), flush=True)
    wrote = {k: (v - w0.get(k, 0.0)) / pods for k, v in w1.items() if v - w0.get(k, 0.0) > 0}
    print("  writes per pod: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(wrote.items(), key=lambda kv: -kv[1])),
          flush=True)
    failed = failed_webhook_calls(e2e) - failed_before
    if failed:
        why = [line.strip()[:300] for line in Path(c.logfile("kube-apiserver")).read_text(errors="replace").splitlines()
               if "failed calling webhook" in line]
        print("  kube-apiserver on the failed webhook calls (its last lines on them):\n    " + "\n    ".join(why[-3:]),
              flush=True)
    return rate([e2e.kubelet.bound_at[u] for u in uids]), failed, per_pod


def clean(e2e: Cluster, name: str) -> None:
    e2e.delete_namespaces([name])
    e2e.wait_for(f"namespace {name} gone", lambda: not [n for n in e2e.items("/api/v1/namespaces")
                                                         if n["metadata"]["name"] == name], timeout=600, poll=1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="backlog,live")
    ap.add_argument("--bare", action="store_true", help="also run each mode with an extender that does no work")
    ap.add_argument("--bare-pack", action="store_true", help="the bare extender packs pods onto nodes as gpuqueue does")
    ap.add_argument("--pod-cpu-shares", action="store_true",
                    help="run each process in a cpu cgroup with the shares of its pod's CPU request, as the kubelet "
                         "does (kubeadm's static pods, manifests/install.yaml); needs root and cgroup v1's cpu controller")
    args = ap.parse_args()
    why = missing()
    if why:
        sys.exit(f"scheduler_throughput.py: {why}")
    modes = args.modes.split(",")
    e2e = Cluster(log=lambda msg: print(msg, flush=True), scheduler_client={"qps": 1000, "burst": 1000},
                  controller_manager_args=["--kube-api-qps=500", "--kube-api-burst=500"])
    results: dict[tuple[str, str], list[float]] = {}
    variants = ["with", "without"] + (["bare"] if args.bare else [])
    failures: list[float] = []
    shares = None
    if args.pod_cpu_shares:
        if not (CPU_CGROUPS / "cpu.shares").is_file() or not os.access(CPU_CGROUPS, os.W_OK):
            sys.exit(f"scheduler_throughput.py: --pod-cpu-shares needs a writable cgroup v1 cpu controller at {CPU_CGROUPS}")
        shares = pod_cpu_shares()
        print("cpu.shares: " + ", ".join(f"{k} {v}" for k, v in sorted(shares.items())), flush=True)
    try:
        e2e.start()
        e2e.kubelet.passive = True
        bare = start_bare_extender(e2e, GPUS_PER_NODE if args.bare_pack else 0) if args.bare else None
        setup(e2e, args.nodes)
        print(f"Kubernetes v{'.'.join(map(str, e2e.version))}; {args.nodes} nodes x {GPUS_PER_NODE} GPUs, "
              f"a Job of {args.pods} pods x 1 GPU per phase", flush=True)
        for run in range(args.runs):
            for mode in modes:
                for variant in (variants if run % 2 == 0 else variants[::-1]):
                    name = f"tput-{mode}-{variant}-{run}"
                    got, failed, cpu = phase(e2e, name, variant, mode, args.pods, bare, shares)
                    results.setdefault((mode, variant), []).append(got)
                    failures.append(failed)
                    print(f"run {run + 1} {mode:7} {variant:7} {got:7.1f} pods/s, "
                          f"{failed:.0f} webhook calls failed; CPU ms per pod: "
                          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])),
                          flush=True)
                    clean(e2e, name)
    finally:
        e2e.stop()
        if shares:
            leave_cgroups()
    print(f"\nKubernetes v{'.'.join(map(str, e2e.version))}, {args.nodes} nodes, {args.pods} pods, "
          f"median of {args.runs} alternating runs (real control plane):")
    print(f"  webhook calls failed (calling_webhook_error), all phases: {sum(failures):.0f}")
    for mode in modes:
        w, wo, b = (results.get((mode, v), []) for v in ("with", "without", "bare"))
        if w and wo:
            print(f"  {mode:7} with {statistics.median(w):6.1f} pods/s ({min(w):.1f}-{max(w):.1f}), without "
                  f"{statistics.median(wo):6.1f} ({min(wo):.1f}-{max(wo):.1f}): "
                  f"ratio {statistics.median(w) / statistics.median(wo):.2f}"
                  + (f"; bare extender {statistics.median(b):6.1f} ({min(b):.1f}-{max(b):.1f}): "
                     f"ratio {statistics.median(b) / statistics.median(wo):.2f}" if b else ""))


if __name__ == "__main__":
    main()
