"""Kueue's scheduler benchmarks replayed in real time through the controller (`gpuqueue extender`).

    python bench/kueue_realtime.py baseline [--scale 0.2] [--cohorts 5 --queues 6] [--qps 5000]
    python bench/kueue_realtime.py large-scale --scale 0.05
    python bench/kueue_realtime.py baseline --scale 0.2 --cost-model real-1.24
    python bench/kueue_realtime.py baseline --cost-model real-1.24 --controller ../wt-old/.venv/bin/gpuqueue

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
the stand-in and of this driver, the controller's peak RSS, the API requests by kind with the bytes
they carried, and with `--cost-model` (tests/standin/costs.py: the stand-in answers with a real
kube-apiserver's costs; the profile is printed first and with the result) what the model did:
seconds per request, time queued for a seat, 429s, the server's and etcd's CPU. `--controller`
runs another install's `gpuqueue extender` (an older commit's) against the same stand-in and driver.
One run; not part of the test suite.
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
import bench_env  # noqa: E402  (the repository on sys.path, or one line saying why not)

import aiohttp  # noqa: E402
import orjson  # noqa: E402

from tests.standin import ApiServer  # noqa: E402
from tests.standin import resources as R  # noqa: E402
from tests.standin import rules  # noqa: E402
from tests.standin.costs import MODELS  # noqa: E402
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
    stored_bytes: dict[str, int] = field(default_factory=dict)  # same key -> bytes of the objects written
    responses: dict[str, int] = field(default_factory=dict)  # "METHOD status" -> count, every request
    traffic: dict[str, list[int]] = field(default_factory=dict)  # ApiServer.traffic: [requests, in, out]
    served: dict[str, tuple] = field(default_factory=dict)  # cost model: key -> (n, 429s, seconds, queued, cpu, etcd, no-ops)
    model_cpu: float = 0.0  # CPU-seconds the cost model served


class JobsAndRecorder:
    """Observer of every committed write. Jobs: creation and first unsuspension times; an unsuspended
    Job completes after its runtime, as the Job controller would write it once its pod succeeded.
    Workloads: reservations (status.admission with QuotaReserved=True, not Finished) per
    ClusterQueue, and evictions by preemption."""

    def __init__(self, api: ApiServer) -> None:
        self.cluster = api.cluster
        self.costs = api.costs  # with a cost model, a completion is priced as the Job status write it is
        self.tasks: set[asyncio.Task] = set()
        self.loop = asyncio.get_running_loop()
        self.rec = Record()
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.reserved: dict[str, tuple[str, int]] = {}  # Workload key -> (ClusterQueue, milli)
        api.observe(self)

    def __call__(self, w) -> None:
        what = f"{w.verb} {w.resource.storage_key}{'/' + w.subresource if w.subresource else ''}"
        self.rec.writes[what] = self.rec.writes.get(what, 0) + 1
        self.rec.stored_bytes[what] = self.rec.stored_bytes.get(what, 0) + len(orjson.dumps(w.new))
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
            self.timers[key] = self.loop.call_later(runtime, self._completion, w.namespace, w.name,
                                                    w.new["metadata"]["uid"])
        elif is_ and not was:
            self.rec.resuspensions += 1
            timer = self.timers.pop(key, None)
            if timer is not None:
                timer.cancel()

    def _completion(self, namespace: str, name: str, uid: str) -> None:
        self.timers.pop(f"{namespace}/{name}", None)
        if self.costs is None:
            self._complete(namespace, name, uid)
            return
        task = self.loop.create_task(self._costed_completion(namespace, name, uid))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _costed_completion(self, namespace: str, name: str, uid: str) -> None:
        """What the real run's driver did over HTTP (a Job status write, as the cluster admin: no
        seat to wait for), priced by the model as such a request."""
        cost = self.costs.model.cost("update", "jobs.batch/status")
        stats = self.costs.stats("update jobs.batch/status (Job completed)")
        stats.cpu += cost.cpu
        stats.etcd += cost.etcd
        t0 = self.loop.time()
        await self.costs.serve(cost)
        rv0 = self.cluster.store.rv
        self._complete(namespace, name, uid)
        await self.costs.stored(cost, stats, self.cluster.store.rv != rv0,
                                len(self.cluster.store.watchers.get(R.JOBS.storage_key, ())))
        stats.requests += 1
        stats.seconds += self.loop.time() - t0

    def _complete(self, namespace: str, name: str, uid: str) -> None:
        key = f"{namespace}/{name}"
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


def _serve(conn, profile: Path | None, cost_model: str | None = None, managed_fields: bool = False) -> None:
    async def main():
        # A large watch window: the controller's watches resume after their timeout without a relist.
        async with ApiServer(history_size=1_000_000, cost_model=MODELS[cost_model] if cost_model else None,
                             managed_fields=managed_fields) as api:
            pace_garbage_collector(api.cluster, 1.0)
            jobs = JobsAndRecorder(api)
            conn.send(api.url)
            loop = asyncio.get_running_loop()
            while True:
                msg = await loop.run_in_executor(None, conn.recv)
                if isinstance(msg, tuple) and msg[0] == "others":
                    if api.costs is not None:
                        api.costs.others_use(msg[1])
                elif msg == "progress":
                    r = jobs.rec
                    conn.send((len(r.created), len(r.admitted), len(r.completed), len(r.wl_created)))
                elif msg == "record":
                    jobs.rec.responses = {f"{m} {c}": n for (m, c), n in sorted(getattr(api, "responses", {}).items())}
                    gets: dict[str, int] = {}
                    for method, path in api.requests:
                        if method == "GET" and "watch=" not in path:
                            what = "GET " + _what(path)
                            gets[what] = gets.get(what, 0) + 1
                    jobs.rec.responses.update(sorted(gets.items(), key=lambda kv: -kv[1]))
                    jobs.rec.traffic = api.traffic
                    if api.costs is not None:
                        jobs.rec.served = {k: (s.requests, s.rejected, s.seconds, s.queued, s.cpu, s.etcd, s.noops)
                                           for k, s in api.costs.served.items()}
                        jobs.rec.model_cpu = api.costs.cpu.delivered
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


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a live process (its peak resident set), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- the driver --------------------------------------------------------------------------------------------

def job_body(ns: str, c: WorkloadClass, n: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": ns, "name": f"{c.name}-{n}",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq", CLASS: c.name},
                         "annotations": {RUNTIME: str(c.runtime)}},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "w", "image": "busybox", "resources": {"requests": {RES: str(c.request)}}}]}}}}


def setup_objects(cfg: Config, hold: bool = False) -> list[tuple[str, dict]]:
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
                     **({"stopPolicy": "Hold"} if hold else {}),
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


async def post(session: aiohttp.ClientSession, url: str, path: str, body: dict, took: list | None = None) -> None:
    t0 = time.monotonic()
    async with session.post(url + path, data=orjson.dumps(body),
                            headers={"Content-Type": "application/json"}) as resp:
        if resp.status != 201:
            raise RuntimeError(f"POST {path}: {resp.status} {await resp.text()}")
        await resp.read()
    if took is not None:
        took.append(time.monotonic() - t0)


async def submit_all(session, url: str, cfg: Config, took: list[float]) -> list[float]:
    """Create every Job at its time; returns how late each creation was sent (`took`: how long
    each took, sent to answered)."""
    lags: list[float] = []
    tasks: set[asyncio.Task] = set()
    t0 = time.monotonic()
    for at, ns, c, n in timeline(cfg):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        lags.append(max(0.0, -delay))
        task = asyncio.create_task(post(session, url, f"/apis/batch/v1/namespaces/{ns}/jobs", job_body(ns, c, n),
                                        took))
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


def controller_command(controller: Path | None, profile: Path | None) -> list[str]:
    """How to start `gpuqueue extender`: this tree's, or `controller` (another install's `gpuqueue`
    executable, e.g. an older commit's worktree venv), whose flags must include what run() passes."""
    if controller is None:
        python = [sys.executable] + (["-m", "cProfile", "-o", str(profile / "controller.prof")] if profile else [])
        return [*python, "-m", "gpuqueue.cli", "extender"]
    if profile is not None:
        sys.exit("--profile and --controller: profile this tree's controller, or run the other one by hand")
    if not os.access(controller, os.X_OK) or controller.is_dir():
        sys.exit(f"--controller {controller}: not an executable (give the path of a gpuqueue executable)")
    return [str(controller), "extender"]


def controller_flags(command: list[str]) -> list[str]:
    """The flags of EXTENDER_FLAGS that this controller knows (older ones lack --metrics-insecure: their
    metrics port was plain HTTP already); exits naming any other flag it lacks."""
    help_text = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60).stdout
    missing = [f for f in EXTENDER_FLAGS if f not in help_text]
    if set(missing) - OPTIONAL_FLAGS:
        sys.exit(f"{' '.join(command)}: lacks {', '.join(sorted(set(missing) - OPTIONAL_FLAGS))}")
    return [f for f in EXTENDER_FLAGS if f not in missing]


EXTENDER_FLAGS = ("--kubeconfig", "--insecure-http", "--host", "--port", "--metrics-port", "--metrics-insecure",
                  "--qps", "--burst")
OPTIONAL_FLAGS = {"--metrics-insecure"}


async def run(cfg: Config, qps: float, burst: int, timeout: float, log_path: Path | None,
              profile: Path | None, cost_model: str | None = None, managed_fields: bool = False,
              hold: bool = False, controller: Path | None = None, share_cores: bool = True) -> dict:
    """`hold`: every ClusterQueue `stopPolicy: Hold` - nothing is admitted, so the controller's only
    work is each Job's Workload (and what it says while pending); the run ends when the last exists."""
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
    parent, child = mp.Pipe()
    server = mp.get_context("fork").Process(
        target=_serve, args=(child, profile / "standin.prof" if profile else None, cost_model, managed_fields),
        daemon=True)
    server.start()
    url = await asyncio.get_running_loop().run_in_executor(None, parent.recv)
    tmp = Path(tempfile.mkdtemp(prefix="kueue-realtime-"))
    kubeconfig = tmp / "kubeconfig"
    _kubeconfig(url, kubeconfig)
    metrics_port = _free_port()
    log_file = open(log_path or tmp / "extender.log", "w")
    command = controller_command(controller, profile)
    values = {"--kubeconfig": [str(kubeconfig)], "--insecure-http": [], "--host": ["127.0.0.1"],
              "--port": [str(_free_port())], "--metrics-port": [str(metrics_port)], "--metrics-insecure": [],
              "--qps": [str(qps)], "--burst": [str(burst)]}
    flags = controller_flags(command) if controller is not None else list(EXTENDER_FLAGS)
    ctl = subprocess.Popen([*command, *(x for f in flags for x in (f, *values[f]))],
                           cwd=ROOT if controller is None else tmp, stdout=log_file,
                           stderr=subprocess.STDOUT)
    total = len(namespaces(cfg)) * sum(c.count for c in cfg.classes)
    try:
        conn = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=conn) as session:
            for path, body in setup_objects(cfg, hold):
                await post(session, url, path, body)
            await wait_ready(metrics_port, ctl)
            cpu0 = {"controller": bench_env.cpu_seconds(ctl.pid), "stand-in": bench_env.cpu_seconds(server.pid),
                    "driver": time.process_time()}
            start = time.monotonic()
            took: list[float] = []
            lags = await submit_all(session, url, cfg, took)
        deadline = start + timeout
        sampled = (time.monotonic(), bench_env.cpu_seconds(ctl.pid))
        while True:
            if cost_model and share_cores:  # the controller's CPU comes out of the modelled cores, as on one machine
                now, used = time.monotonic(), bench_env.cpu_seconds(ctl.pid)
                parent.send(("others", (used - sampled[1]) / max(now - sampled[0], 1e-3)))
                sampled = (now, used)
            created, admitted, completed, workloads = await ask(parent, "progress")
            if (workloads if hold else completed) >= total:
                break
            if time.monotonic() > deadline or ctl.poll() is not None:
                raise TimeoutError(f"after {time.monotonic() - start:.0f} s: {created} created, {admitted} admitted, "
                                   f"{completed} of {total} completed (controller "
                                   f"{'exited' if ctl.poll() is not None else 'running'})")
            await asyncio.sleep(0.5)
        cpu = {"controller": bench_env.cpu_seconds(ctl.pid) - cpu0["controller"],
               "stand-in": bench_env.cpu_seconds(server.pid) - cpu0["stand-in"],
               "driver": time.process_time() - cpu0["driver"]}
        rss = peak_rss_mb(ctl.pid)
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
    out = summarize(cfg, rec, cpu, lags, passes, hold)
    took.sort()
    out.update(controller_rss=rss, create_took=(took[len(took) // 2], took[int(0.99 * (len(took) - 1))]))
    return out


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


def summarize(cfg: Config, rec: Record, cpu: dict, lags: list[float], passes=None, hold: bool = False) -> dict:
    first = min(rec.created.values())
    end = max((rec.wl_created if hold else rec.completed).values())
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
    to_workload = sorted(rec.wl_created[k] - rec.created[k] for k in rec.created if k in rec.wl_created)
    large = handoffs(cfg, rec, cfg.classes[-1].name)
    totals = sorted(sum(h) for h in large)
    return {
        "handoff": {"class": cfg.classes[-1].name, "n": len(large),
                    "mean": [sum(x) / len(x) for x in zip(*large)] if large else [float("nan")] * 3,
                    "p50": totals[len(totals) // 2] if totals else float("nan"),
                    "p90": totals[int(0.9 * (len(totals) - 1))] if totals else float("nan")},
        "wall": end - first,
        "to_workload": {"p50": _pct(to_workload, 0.5), "p99": _pct(to_workload, 0.99),
                        "max": to_workload[-1] if to_workload else float("nan"),
                        "mean": sum(to_workload) / len(to_workload) if to_workload else float("nan")},
        "jobs": len(rec.created),
        "traffic": rec.traffic,
        "stored_bytes": rec.stored_bytes,
        "served": rec.served,
        "model_cpu": rec.model_cpu,
        "model_api_etcd": (sum(v[4] for v in rec.served.values()), sum(v[5] for v in rec.served.values())),
        "avg_wait": {k: (sum(v) / len(v) if v else float("nan")) for k, v in waits.items()},
        "stages": {k: [sum(x) / len(x) if x else float("nan") for x in v] for k, v in stages.items()},
        "max_wait": {k: max(v, default=float("nan")) for k, v in waits.items()},
        "admitted": len(rec.admitted),
        "completed": len(rec.completed),
        "min_usage": min(per_cq),
        "usage_quartiles": [sorted(per_cq)[int(q * (len(per_cq) - 1))] for q in (0.25, 0.5, 0.75)],
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


def _pct(values: list[float], q: float) -> float:
    return values[int(q * (len(values) - 1))] if values else float("nan")


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


def arrival_budget(cfg: Config, model) -> dict:
    """What creating the Jobs and their Workloads alone asks of the modelled server, whatever the
    controller does: the k-th Job sent (at a_k) has its Workload only once the server has done, at
    the least, the k Job creations and k Workload creations up to it, so send -> Workload >=
    k * (job + workload CPU) / cores - a_k (from an idle server; nothing else served). Returns the
    peak one-second demand of those creations in cores and that bound's worst case."""
    per = sum(c.cpu + c.etcd for c in (model.cost("create", "jobs.batch"), model.cost("create", "workloads.kueue.x-k8s.io")))
    sends = [at for at, *_ in timeline(cfg)]
    by_second: dict[int, int] = {}
    for at in sends:
        by_second[int(at)] = by_second.get(int(at), 0) + 1
    floors, busy = [], 0.0
    for at in sends:  # busy: when the server, doing only creations, finishes this Job's pair
        busy = max(busy, at) + per / model.cores
        floors.append((busy - at, at))
    worst, worst_at = max(floors)
    floors.sort()
    return {"cpu_per_job": per, "peak_cores": max(by_second.values()) * per, "bound": worst, "bound_at": worst_at,
            "p99": _pct([f for f, _ in floors], 0.99), "over_2s": sum(f > 2.0 for f, _ in floors) / len(floors),
            "cores": model.cores}


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
    ap.add_argument("--cost-model", choices=sorted(MODELS), default=None,
                    help="the stand-in answers with a real API server's costs (tests/standin/costs.py)")
    ap.add_argument("--hold", action="store_true",
                    help="every ClusterQueue stopPolicy: Hold: nothing is admitted; measures the Workload creations alone")
    ap.add_argument("--managed-fields", action="store_true",
                    help="the stand-in keeps metadata.managedFields as a real API server does")
    ap.add_argument("--controller", type=Path, default=None,
                    help="run this gpuqueue executable's extender (e.g. an older commit's worktree "
                         "venv/bin/gpuqueue) instead of this tree's; the stand-in and driver stay this tree's")
    ap.add_argument("--own-cores", action="store_true",
                    help="with --cost-model: the modelled server keeps its cores (by default the controller's "
                         "CPU, sampled every 0.5 s, comes out of them, as when both share one machine)")
    args = ap.parse_args()
    if args.controller is not None:
        controller_command(args.controller, args.profile)  # one line and out if it cannot be
    base = CONFIGS[args.config]
    cfg = scaled(base, args.scale, args.cohorts, args.queues)
    total = cfg.cohorts * cfg.queues_per_cohort * sum(c.count for c in cfg.classes)
    print(f"{args.config} x{args.scale:g}: {cfg.cohorts} cohorts x {cfg.queues_per_cohort} ClusterQueues, "
          f"{total} Jobs; controller --qps {args.qps:g} --burst {args.burst}; API costs: "
          f"{args.cost_model or 'none (the stand-in answers at once)'}; managedFields "
          f"{'kept' if args.managed_fields else 'not kept'}{'; ClusterQueues held' if args.hold else ''}; "
          f"controller {args.controller or 'this tree'}", flush=True)
    model = MODELS[args.cost_model] if args.cost_model else None
    if model is not None:
        print(f"  cost profile {model.name}: {model.summary}; "
              f"{'the modelled cores are its own' if args.own_cores else 'the controller CPU comes out of them'}",
              flush=True)
    if args.cost_model:
        b = arrival_budget(cfg, MODELS[args.cost_model])
        print(f"  the model's budget: a Job's and its Workload's creation take {b['cpu_per_job'] * 1000:.1f} ms of its "
              f"CPU (server and etcd); the arrivals' peak second asks {b['peak_cores']:.2f} cores of {b['cores']:g}; so, whatever the "
              f"controller does, some Job sent at {b['bound_at']:.1f} s gets its Workload >= {b['bound']:.1f} s later "
              f"(the server doing nothing but these creations); that floor's p99 is {b['p99']:.1f} s, "
              f"{b['over_2s'] * 100:.0f}% of the Jobs above 2 s", flush=True)
    r = asyncio.run(run(cfg, args.qps, args.burst, args.timeout, args.controller_log, args.profile, args.cost_model,
                        args.managed_fields, args.hold, args.controller, not args.own_cores))
    cpu = r["cpu"]
    if model is not None:
        api, etcd = r["model_api_etcd"]
        print(f"  cost profile {model.name}; the model's kube-apiserver CPU "
              f"{api + model.idle_cpu * r['wall']:.1f} s, etcd CPU {etcd + model.idle_etcd * r['wall']:.1f} s "
              f"(requests {api:.1f} + {etcd:.1f} s, idle rates over the wall "
              f"{model.idle_cpu * r['wall']:.1f} + {model.idle_etcd * r['wall']:.1f} s)")
    print(f"  wall {r['wall']:.1f} s (first Job created -> last completed); admitted {r['admitted']}, "
          f"completed {r['completed']}")
    print(f"  CPU: controller {cpu['controller']:.1f} s, API stand-in (+ Job completion, recorder) "
          f"{cpu['stand-in']:.1f} s, driver {cpu['driver']:.1f} s; peak RSS driver "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, controller {r['controller_rss']:.0f} MB")
    tw = r["to_workload"]
    print(f"  Job -> Workload created: p50 {tw['p50']:.2f} s, p99 {tw['p99']:.2f} s, max {tw['max']:.2f} s, "
          f"mean {tw['mean']:.2f} s; the driver's Job POSTs took p50 {r['create_took'][0] * 1000:.0f} ms, "
          f"p99 {r['create_took'][1] * 1000:.0f} ms")
    print(f"  preemptions {r['preemptions']} (Jobs re-suspended {r['resuspensions']}); ClusterQueue usage "
          f"min {r['min_usage']:.1f}%, mean {r['mean_usage']:.1f}% (quartiles "
          f"{' / '.join(f'{u:.1f}' for u in r['usage_quartiles'])}%)")
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
    print_traffic(r)
    print(f"  Job creation sent late by p99 {r['lag_p99'] * 1000:.0f} ms, max {r['lag_max'] * 1000:.0f} ms")
    if base.published and args.scale == 1.0 and cfg.cohorts == base.cohorts and cfg.queues_per_cohort == base.queues_per_cohort:
        p = base.published
        print(f"  Kueue published: wall {p['wall']} s; small {p['small']} s, medium {p['medium']} s, "
              f"large {p['large']} s; usage {p['usage']}%")


def print_traffic(r: dict) -> None:
    """Requests per Job and the bytes they carried, by kind; the objects written, per write."""
    jobs = max(r["jobs"], 1)
    rows = sorted(r["traffic"].items(), key=lambda kv: -kv[1][0])
    print(f"  API traffic per kind (per Job of {jobs}; bytes per request sent / answered; WATCH: events, bytes each):")
    for key, (n, inb, outb) in rows:
        print(f"    {key:42} {n:7} ({n / jobs:5.2f}/Job)  {inb / n:7.0f} B / {outb / n:7.0f} B")
    stored = r["stored_bytes"]
    print("  objects written (bytes per write, as stored): " + ", ".join(
        f"{k} {stored[k] / v:.0f}" for k, v in sorted(r["writes"].items(), key=lambda kv: -kv[1]) if k in stored))
    if r["served"]:
        print(f"  cost model: {r['model_cpu']:.1f} s of CPU served in all; per kind: requests, 429s, "
              "mean seconds (of which queued for a seat), server CPU s, etcd CPU s, writes that changed nothing:")
        for key, (n, rejected, secs, queued, cpu, etcd, noops) in sorted(r["served"].items(), key=lambda kv: -kv[1][0]):
            if n:
                print(f"    {key:48} {n:7} {rejected:5}  {secs / n * 1000:7.1f} ms ({queued / n * 1000:6.1f} ms)"
                      f"  {cpu:7.1f} {etcd:6.1f} {noops:6}")


if __name__ == "__main__":
    main()
