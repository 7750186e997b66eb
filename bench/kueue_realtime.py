"""Kueue's scheduler benchmarks replayed in real time through the controller (`gpuqueue extender`).

    python bench/kueue_realtime.py baseline [--scale 0.2] [--cohorts 5 --queues 6] [--qps 5000]
    python bench/kueue_realtime.py large-scale --scale 0.05

Three processes on the wall clock:
  - the API server stand-in (tests.standin, a forked child, real HTTP on 127.0.0.1). In the same
    process, standing in for the Job controller and the kubelet: a Job unsuspended by the controller
    is marked Complete `runtime` seconds later (a Job suspended again before then is not), and a
    recorder observes every committed write;
  - `gpuqueue extender` itself, a subprocess reading a kubeconfig that points at the stand-in;
  - this driver: it creates the ClusterQueues, LocalQueues and priority classes of the configuration
    (bench/kueue_bench.py's CONFIGS), then each class's Jobs (suspended, as the webhook leaves them)
    at the class's interval from every ClusterQueue's namespace, over HTTP, until all completed.

Reported, from the stand-in's record of writes: per class the average time to admission (Job
creation -> unsuspend), the ClusterQueue usage as Kueue's runner defines it (kueue_bench.py: the
time-weighted reserved quota of admitted Workloads over nominal quota, from the first Job's creation
to the last completion; the minimum over ClusterQueues), preemptions (Workloads evicted with reason
Preempted), the wall time (first creation -> last completion), the CPU time of the controller, of
the stand-in and of this driver. One run; not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import multiprocessing as mp
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import aiohttp  # noqa: E402
import orjson  # noqa: E402

from tests.standin import ApiServer  # noqa: E402
from tests.standin import resources as R  # noqa: E402
from tests.standin import rules  # noqa: E402
from kueue_bench import CONFIGS, RES, Config, WorkloadClass  # noqa: E402

RUNTIME = "gpuqueue.io/runtime-seconds"
CLASS = "kueue.x-k8s.io/priority-class"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


# --- the stand-in's process ------------------------------------------------------------------------------

def _milli(q: str) -> int:
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _true(obj: dict, type_: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_ and c.get("status") == "True":
            return c
    return None


@dataclass
class Record:
    """What the recorder saw, sent back to the driver at the end (monotonic seconds)."""
    created: dict[str, float] = field(default_factory=dict)  # Job key -> creation
    admitted: dict[str, float] = field(default_factory=dict)  # Job key -> first unsuspend
    completed: dict[str, float] = field(default_factory=dict)  # Job key -> Complete written
    job_class: dict[str, str] = field(default_factory=dict)
    wl_created: dict[str, float] = field(default_factory=dict)  # Job key -> its Workload's creation
    wl_admitted: dict[str, float] = field(default_factory=dict)  # Job key -> first Admitted=True written
    wl_finished: dict[str, float] = field(default_factory=dict)  # Job key -> Finished=True written
    usage_log: list[tuple[float, str, int]] = field(default_factory=list)  # (t, ClusterQueue, +-milli)
    preemptions: int = 0
    resuspensions: int = 0
    writes: dict[str, int] = field(default_factory=dict)  # "verb resource[/subresource]" -> count
    responses: dict[str, int] = field(default_factory=dict)  # "METHOD status" -> count, every request


class JobsAndRecorder:
    """Observer of every committed write. Jobs: creation and first unsuspension times; an unsuspended
    Job completes after its runtime, as the Job controller would write it once its pod succeeded.
    Workloads: reservations (status.admission with QuotaReserved=True, not Finished) per
    ClusterQueue, and evictions by preemption."""

    def __init__(self, api: ApiServer) -> None:
        self.cluster = api.cluster
        self.loop = asyncio.get_running_loop()
        self.rec = Record()
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.reserved: dict[str, tuple[str, int]] = {}  # Workload key -> (ClusterQueue, milli)
        api.observe(self)

    def __call__(self, w) -> None:
        what = f"{w.verb} {w.resource.storage_key}{'/' + w.subresource if w.subresource else ''}"
        self.rec.writes[what] = self.rec.writes.get(what, 0) + 1
        if w.resource is R.JOBS:
            self._job(w)
        elif w.resource is R.WORKLOADS:
            self._workload(w)

    def _job(self, w) -> None:
        key = f"{w.namespace}/{w.name}"
        now = time.monotonic()
        if w.type == "ADDED":
            self.rec.created[key] = now
            self.rec.job_class[key] = (w.new["metadata"].get("labels") or {}).get(CLASS, "")
            return
        if w.type != "MODIFIED":
            return
        was, is_ = w.old["spec"].get("suspend"), w.new["spec"].get("suspend")
        if was and not is_:
            self.rec.admitted.setdefault(key, now)
            runtime = float((w.new["metadata"].get("annotations") or {}).get(RUNTIME, "0"))
            self.timers[key] = self.loop.call_later(runtime, self._complete, w.namespace, w.name,
                                                    w.new["metadata"]["uid"])
        elif is_ and not was:
            self.rec.resuspensions += 1
            timer = self.timers.pop(key, None)
            if timer is not None:
                timer.cancel()

    def _complete(self, namespace: str, name: str, uid: str) -> None:
        key = f"{namespace}/{name}"
        self.timers.pop(key, None)
        job = self.cluster.store.get(R.JOBS.storage_key, (namespace, name))
        if job is None or job["metadata"]["uid"] != uid or job["spec"].get("suspend") or _true(job, "Complete"):
            return
        now = rules.fmt_time(rules.now())
        status = copy.deepcopy(job.get("status") or {})
        status.setdefault("startTime", now)
        status.update(completionTime=now, succeeded=1, conditions=list(status.get("conditions") or []) + [
            {"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}])
        status.pop("active", None)
        self.cluster.update(R.JOBS, namespace, name, {"metadata": {"name": name, "namespace": namespace},
                                                      "status": status},
                            subresource="status", verb="job-controller")
        self.rec.completed[key] = time.monotonic()

    def _workload(self, w) -> None:
        key = f"{w.namespace}/{w.name}"
        now = time.monotonic()
        new = w.new
        job = next((f"{w.namespace}/{r['name']}" for r in new["metadata"].get("ownerReferences") or ()
                    if r.get("kind") == "Job"), key)
        if w.type == "ADDED":
            self.rec.wl_created.setdefault(job, now)
        if _true(new, "Admitted"):
            self.rec.wl_admitted.setdefault(job, now)
        if _true(new, "Finished"):
            self.rec.wl_finished.setdefault(job, now)
        admission = (new.get("status") or {}).get("admission")
        holds = (w.type != "DELETED" and admission is not None and _true(new, "QuotaReserved") is not None
                 and _true(new, "Finished") is None)
        before = self.reserved.get(key)
        if holds and before is None:
            amount = sum(_milli((psa.get("resourceUsage") or {}).get(RES, "0"))
                         for psa in admission.get("podSetAssignments") or ())
            self.reserved[key] = (admission["clusterQueue"], amount)
            self.rec.usage_log.append((now, admission["clusterQueue"], amount))
        elif not holds and before is not None:
            del self.reserved[key]
            self.rec.usage_log.append((now, before[0], -before[1]))
        if w.subresource == "status" and w.old is not None:
            why = _why(w.old, new)
            self.rec.writes[f"  of which {why}"] = self.rec.writes.get(f"  of which {why}", 0) + 1
        evicted = _true(new, "Evicted")
        if evicted and evicted.get("reason") == "Preempted" and not (w.old and _true(w.old, "Evicted")):
            self.rec.preemptions += 1


def pace_garbage_collector(cluster, interval: float) -> None:
    """The stand-in runs its garbage collector - a scan of every stored object - after each write to
    an object with ownerReferences; every Workload write is one, so the scans grow quadratic with
    the run and would be most of the stand-in's CPU. kube-apiserver has no such cost (its garbage
    collector is a separate controller working from an owner graph). Here it runs at most once per
    `interval`: this benchmark deletes nothing, so it never has anything to collect anyway."""
    def schedule() -> None:
        if not cluster._gc_scheduled:
            cluster._gc_scheduled = True
            asyncio.get_running_loop().call_later(interval, cluster.collect_garbage)

    cluster._schedule_gc = schedule


def _why(old: dict, new: dict) -> str:
    """What a Workload status write did, for the write counts."""
    for cond in ("Finished", "Evicted", "Admitted", "Requeued"):
        if _true(new, cond) and not _true(old, cond):
            return cond
    if (old.get("status") or {}).get("admission") and not (new.get("status") or {}).get("admission"):
        return "reservation cleared"
    return "other (pending message)"


def _what(path: str) -> str:
    """`jobs (one)`, `pods (list)`...: what a GET read."""
    parts = path.split("?")[0].strip("/").split("/")
    if "namespaces" in parts[:-1]:
        parts = parts[parts.index("namespaces") + 2:]
    else:
        parts = parts[3:] if parts[0] == "apis" else parts[2:]
    return f"{parts[0]} ({'one' if len(parts) > 1 else 'list'})" if parts else path


def _serve(conn, profile: Path | None) -> None:
    async def main():
        # A large watch window: the controller's watches resume after their timeout without a relist.
        async with ApiServer(history_size=1_000_000) as api:
            pace_garbage_collector(api.cluster, 1.0)
            jobs = JobsAndRecorder(api)
            conn.send(api.url)
            loop = asyncio.get_running_loop()
            while True:
                msg = await loop.run_in_executor(None, conn.recv)
                if msg == "progress":
                    r = jobs.rec
                    conn.send((len(r.created), len(r.admitted), len(r.completed)))
                elif msg == "record":
                    jobs.rec.responses = {f"{m} {c}": n for (m, c), n in sorted(getattr(api, "responses", {}).items())}
                    gets: dict[str, int] = {}
                    for method, path in api.requests:
                        if method == "GET" and "watch=" not in path:
                            what = "GET " + _what(path)
                            gets[what] = gets.get(what, 0) + 1
                    jobs.rec.responses.update(sorted(gets.items(), key=lambda kv: -kv[1]))
                    conn.send(jobs.rec)
                elif msg == "stop":
                    return

    if profile is None:
        asyncio.run(main())
        return
    import cProfile

    prof = cProfile.Profile()
    prof.runcall(asyncio.run, main())
    prof.dump_stats(profile)


# --- the controller's process ----------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kubeconfig(url: str, path: Path) -> None:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: standin, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: bench, user: {token: bench}}]\n"
        "contexts: [{name: bench, context: {cluster: standin, user: bench}}]\ncurrent-context: bench\n")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the driver --------------------------------------------------------------------------------------------

def job_body(ns: str, c: WorkloadClass, n: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": ns, "name": f"{c.name}-{n}",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq", CLASS: c.name},
                         "annotations": {RUNTIME: str(c.runtime)}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox", "resources": {"requests": {RES: str(c.request)}}}]}}}}


def setup_objects(cfg: Config) -> list[tuple[str, dict]]:
    objs: list[tuple[str, dict]] = [(f"{KUEUE}/resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}})]
    for c in cfg.classes:
        objs.append((f"{KUEUE}/workloadpriorityclasses", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": c.name}, "value": c.priority}))
    for ns in namespaces(cfg):
        objs.append(("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
        objs.append((f"{KUEUE}/clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": ns},
            "spec": {"cohortName": "cohort-" + ns.split("-")[1], "namespaceSelector": {},
                     "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": [RES], "flavors": [{"name": "default", "resources": [
                         {"name": RES, "nominalQuota": cfg.nominal, "borrowingLimit": cfg.borrowing_limit}]}]}]}}))
        objs.append((f"{KUEUE}/namespaces/{ns}/localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"namespace": ns, "name": "lq"}, "spec": {"clusterQueue": ns}}))
    return objs


def namespaces(cfg: Config) -> list[str]:
    return [f"cq-{co}-{q}" for co in range(cfg.cohorts) for q in range(cfg.queues_per_cohort)]


def timeline(cfg: Config) -> list[tuple[float, str, WorkloadClass, int]]:
    """(seconds after the start, namespace, class, index): the n-th Job of a class at every*(n+1)."""
    events = [(c.every * (n + 1), ns, c, n) for ns in namespaces(cfg) for c in cfg.classes for n in range(c.count)]
    events.sort(key=lambda e: e[0])
    return events


async def post(session: aiohttp.ClientSession, url: str, path: str, body: dict) -> None:
    async with session.post(url + path, data=orjson.dumps(body),
                            headers={"Content-Type": "application/json"}) as resp:
        if resp.status != 201:
            raise RuntimeError(f"POST {path}: {resp.status} {await resp.text()}")
        await resp.read()


async def submit_all(session, url: str, cfg: Config) -> list[float]:
    """Create every Job at its time; returns how late each creation was sent."""
    lags: list[float] = []
    tasks: set[asyncio.Task] = set()
    t0 = time.monotonic()
    for at, ns, c, n in timeline(cfg):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, -delay))
        task = asyncio.create_task(post(session, url, f"/apis/batch/v1/namespaces/{ns}/jobs", job_body(ns, c, n)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    return lags


async def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"gpuqueue extender exited with {proc.returncode}")
            try:
                async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError("gpuqueue extender not ready")


async def ask(conn, msg: str):
    conn.send(msg)
    return await asyncio.get_running_loop().run_in_executor(None, conn.recv)


async def run(cfg: Config, qps: float, burst: int, timeout: float, log_path: Path | None,
              profile: Path | None) -> dict:
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    parent, child = mp.Pipe()
    server = mp.get_context("fork").Process(
        target=_serve, args=(child, profile / "standin.prof" if profile else None), daemon=True)
    server.start()
    url = await asyncio.get_running_loop().run_in_executor(None, parent.recv)
    tmp = Path(tempfile.mkdtemp(prefix="kueue-realtime-"))
    kubeconfig = tmp / "kubeconfig"
    _kubeconfig(url, kubeconfig)
    metrics_port = _free_port()
    log_file = open(log_path or tmp / "extender.log", "w")
    python = [sys.executable] + (["-m", "cProfile", "-o", str(profile / "controller.prof")] if profile else [])
    ctl = subprocess.Popen([*python, "-m", "gpuqueue.cli", "extender", "--kubeconfig", str(kubeconfig),
                            "--insecure-http", "--host", "127.0.0.1", "--port", str(_free_port()),
                            "--metrics-port", str(metrics_port), "--metrics-insecure", "--qps", str(qps), "--burst", str(burst)],
                           cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT)
    total = len(namespaces(cfg)) * sum(c.count for c in cfg.classes)
    try:
        conn = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=conn) as session:
            for path, body in setup_objects(cfg):
                await post(session, url, path, body)
            await wait_ready(metrics_port, ctl)
            cpu0 = {"controller": cpu_seconds(ctl.pid), "stand-in": cpu_seconds(server.pid),
                    "driver": time.process_time()}
            start = time.monotonic()
            lags = await submit_all(session, url, cfg)
        deadline = start + timeout
        while True:
            created, admitted, completed = await ask(parent, "progress")
            if completed >= total:
                break
            if time.monotonic() > deadline or ctl.poll() is not None:
                raise TimeoutError(f"after {time.monotonic() - start:.0f} s: {created} created, {admitted} admitted, "
                                   f"{completed} of {total} completed (controller "
                                   f"{'exited' if ctl.poll() is not None else 'running'})")
            await asyncio.sleep(0.5)
        cpu = {"controller": cpu_seconds(ctl.pid) - cpu0["controller"],
               "stand-in": cpu_seconds(server.pid) - cpu0["stand-in"],
               "driver": time.process_time() - cpu0["driver"]}
        rec: Record = await ask(parent, "record")
        passes = await scrape_passes(metrics_port)
    finally:
        if ctl.poll() is None:
            ctl.send_signal(signal.SIGTERM)
            try:
                ctl.wait(10)
            except subprocess.TimeoutExpired:
                ctl.kill()
        log_file.close()
        parent.send("stop")
        server.join(30)
    return summarize(cfg, rec, cpu, lags, passes)


async def scrape_passes(port: int) -> tuple[float, float] | None:
    """(count, seconds) of the controller's scheduling passes, from its /metrics."""
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    except aiohttp.ClientError:
        return None
    found = {}
    for line in text.splitlines():
        for suffix in ("count", "sum"):
            if line.startswith(f"gpuqueue_admission_pass_duration_seconds_{suffix} "):
                found[suffix] = float(line.split()[1])
    return (found["count"], found["sum"]) if len(found) == 2 else None


def summarize(cfg: Config, rec: Record, cpu: dict, lags: list[float], passes=None) -> dict:
    first = min(rec.created.values())
    end = max(rec.completed.values())
    waits: dict[str, list[float]] = {c.name: [] for c in cfg.classes}
    stages: dict[str, list[list[float]]] = {c.name: [[], [], []] for c in cfg.classes}
    for key, t in rec.admitted.items():
        cls = rec.job_class[key]
        waits[cls].append(t - rec.created[key])
        if key in rec.wl_created and key in rec.wl_admitted:
            for i, d in enumerate((rec.wl_created[key] - rec.created[key], rec.wl_admitted[key] - rec.wl_created[key],
                                   t - rec.wl_admitted[key])):
                stages[cls][i].append(d)
    # time-weighted reserved quota per ClusterQueue over [first creation, last completion]
    area: dict[str, float] = {}
    usage: dict[str, int] = {}
    last: dict[str, float] = {}
    for t, cq, delta in sorted(rec.usage_log):
        t = min(max(t, first), end)
        area[cq] = area.get(cq, 0.0) + usage.get(cq, 0) * (t - last.get(cq, first))
        usage[cq] = usage.get(cq, 0) + delta
        last[cq] = t
    span = max(end - first, 1e-9)
    per_cq = [(area.get(ns, 0.0) + usage.get(ns, 0) * (end - last.get(ns, first))) / span / (cfg.nominal * 1000) * 100
              for ns in namespaces(cfg)]
    lags.sort()
    large = handoffs(cfg, rec, cfg.classes[-1].name)
    totals = sorted(sum(h) for h in large)
    return {
        "handoff": {"class": cfg.classes[-1].name, "n": len(large),
                    "mean": [sum(x) / len(x) for x in zip(*large)] if large else [float("nan")] * 3,
                    "p50": totals[len(totals) // 2] if totals else float("nan"),
                    "p90": totals[int(0.9 * (len(totals) - 1))] if totals else float("nan")},
        "wall": end - first,
        "avg_wait": {k: (sum(v) / len(v) if v else float("nan")) for k, v in waits.items()},
        "stages": {k: [sum(x) / len(x) if x else float("nan") for x in v] for k, v in stages.items()},
        "max_wait": {k: max(v, default=float("nan")) for k, v in waits.items()},
        "admitted": len(rec.admitted),
        "completed": len(rec.completed),
        "min_usage": min(per_cq),
        "mean_usage": sum(per_cq) / len(per_cq),
        "preemptions": rec.preemptions,
        "resuspensions": rec.resuspensions,
        "cpu": cpu,
        "lag_p99": lags[int(0.99 * (len(lags) - 1))] if lags else 0.0,
        "lag_max": lags[-1] if lags else 0.0,
        "writes": rec.writes,
        "responses": rec.responses,
        "passes": passes,
    }


def handoffs(cfg: Config, rec: Record, cls: str) -> list[tuple[float, float, float]]:
    """The class's hand-offs within a ClusterQueue: a Job of the class completes while the next one
    (by admission) already waits; per hand-off the seconds from that completion to the completed
    Workload's Finished=True write, from there to the next one's Admitted=True write, and to its
    unsuspension. For the large class (a 20-cpu Job on a nominal quota of 20) this is the round trip
    each of its Jobs adds to the 1 s it runs."""
    out = []
    for ns in namespaces(cfg):
        jobs = sorted((t, k) for k, t in rec.admitted.items()
                      if rec.job_class.get(k) == cls and k.startswith(ns + "/"))
        for (_, prev), (t_next, nxt) in zip(jobs, jobs[1:]):
            done = rec.completed.get(prev)
            if done is None or rec.created[nxt] >= done or t_next <= done:
                continue  # not waiting for this one (or admitted beside it, borrowing)
            finished = rec.wl_finished.get(prev, done)
            admitted = rec.wl_admitted.get(nxt, t_next)
            out.append((finished - done, max(0.0, admitted - finished), t_next - admitted))
    return out


def scaled(cfg: Config, scale: float, cohorts: int | None, queues: int | None) -> Config:
    classes = tuple(replace(c, count=max(1, round(c.count * scale))) for c in cfg.classes)
    return replace(cfg, classes=classes, cohorts=cohorts or cfg.cohorts,
                   queues_per_cohort=queues or cfg.queues_per_cohort)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", choices=list(CONFIGS))
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every class's Job count per ClusterQueue")
    ap.add_argument("--cohorts", type=int, default=None)
    ap.add_argument("--queues", type=int, default=None, help="ClusterQueues per cohort")
    ap.add_argument("--qps", type=float, default=5000.0, help="the controller's write limit (gpuqueue extender --qps)")
    ap.add_argument("--burst", type=int, default=5000)
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    ap.add_argument("--controller-log", type=Path, default=None)
    ap.add_argument("--profile", type=Path, default=None,
                    help="write cProfile stats of the controller and the stand-in to DIR/{controller,standin}.prof")
    args = ap.parse_args()
    base = CONFIGS[args.config]
    cfg = scaled(base, args.scale, args.cohorts, args.queues)
    total = cfg.cohorts * cfg.queues_per_cohort * sum(c.count for c in cfg.classes)
    print(f"{args.config} x{args.scale:g}: {cfg.cohorts} cohorts x {cfg.queues_per_cohort} ClusterQueues, "
          f"{total} Jobs; controller --qps {args.qps:g} --burst {args.burst}", flush=True)
    r = asyncio.run(run(cfg, args.qps, args.burst, args.timeout, args.controller_log, args.profile))
    cpu = r["cpu"]
    print(f"  wall {r['wall']:.1f} s (first Job created -> last completed); admitted {r['admitted']}, "
          f"completed {r['completed']}")
    print(f"  CPU: controller {cpu['controller']:.1f} s, API stand-in (+ Job completion, recorder) "
          f"{cpu['stand-in']:.1f} s, driver {cpu['driver']:.1f} s; peak RSS driver "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print(f"  preemptions {r['preemptions']} (Jobs re-suspended {r['resuspensions']}); ClusterQueue usage "
          f"min {r['min_usage']:.1f}%, mean {r['mean_usage']:.1f}%")
    for c in cfg.classes:
        st = r["stages"][c.name]
        print(f"  avg time to admission {c.name:6}: {r['avg_wait'][c.name]:.2f} s (max {r['max_wait'][c.name]:.2f} s; "
              f"Job -> Workload {st[0]:.2f} s, Workload -> Admitted {st[1]:.2f} s, Admitted -> unsuspended {st[2]:.2f} s)")
    print("  writes: " + ", ".join(f"{k} {v}" for k, v in sorted(r["writes"].items(), key=lambda kv: -kv[1])))
    h = r["handoff"]
    print(f"  {h['class']} hand-offs within a ClusterQueue (one completes while the next waits): {h['n']}, "
          f"completion -> next unsuspended p50 {h['p50'] * 1000:.0f} ms, p90 {h['p90'] * 1000:.0f} ms; mean "
          f"completion -> Finished written {h['mean'][0] * 1000:.0f} ms, -> next Admitted written "
          f"{h['mean'][1] * 1000:.0f} ms, -> unsuspended {h['mean'][2] * 1000:.0f} ms")
    if r["passes"]:
        print(f"  scheduling passes {r['passes'][0]:.0f}, {r['passes'][1]:.1f} s in all "
              f"({r['passes'][1] / max(r['passes'][0], 1) * 1000:.1f} ms each)")
    print("  API requests by answer: " + ", ".join(f"{k} {v}" for k, v in r["responses"].items()))
    print(f"  Job creation sent late by p99 {r['lag_p99'] * 1000:.0f} ms, max {r['lag_max'] * 1000:.0f} ms")
    if base.published and args.scale == 1.0 and cfg.cohorts == base.cohorts and cfg.queues_per_cohort == base.queues_per_cohort:
        p = base.published
        print(f"  Kueue published: wall {p['wall']} s; small {p['small']} s, medium {p['medium']} s, "
              f"large {p['large']} s; usage {p['usage']}%")


if __name__ == "__main__":
    main()
