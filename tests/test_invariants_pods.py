"""Random histories of hostile tenants against the whole loop: the controller on the API server
stand-in, the stand-in's job controller making pods, and a stand-in kube-scheduler that calls the
extender's verbs before it binds anything. The oracle (tests/pod_invariant.py) is over pods, not
records: checked at every write the API commits, no GPU pod runs without an admitted workload,
beyond its admitted count or requests, or over its cohort's quota; and liveness beside it: every
pod an admitted workload is owed is bound within LIVENESS_BOUND of the scheduler's (virtual)
clock, with kube-scheduler's queue (1.24's and current's handling of an extender Error).

A history mixes what tenants do (submit, raise parallelism, drop the queue label, unsuspend by
hand, raise the template's GPUs, create bare GPU pods, call the extender with forged bodies,
finish and delete) with controller restarts between them. Seeds make histories reproducible:
GPUQUEUE_POD_HISTORIES=N runs N more seeds (the long profile), from GPUQUEUE_POD_HISTORIES_FROM
(1000)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import random

import orjson
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.controller import Controller
from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
from gpuqueue.extender.scheduler import verbs
from gpuqueue.extender.scheduler.catchup import WAIT_SECONDS
from tests.controller_support import FAST, Harness, eventually
from tests.pod_invariant import GPU, LIVENESS_BOUND, PodInvariant, PodLiveness
from tests.standin import resources as R
from tests.standin.schedqueue import CURRENT, V1_24
from tests.standin.scheduler import Scheduler

TEAMS = {"team-a": ("group-a", 4), "team-b": ("group-b", 2), "team-c": ("group-c", 0)}
GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
CI_SEEDS = list(range(1, 5))
# histories that once broke an oracle, run every time too: 4074 (a pod ended before it had a node,
# then run by the stand-in), 4184 (pods its owner started during the eviction, parked by
# kube-scheduler after the re-admission: broke the liveness bound in about 1 run in 4)
REGRESSION_SEEDS = [4074, 4184]
LONG = int(os.environ.get("GPUQUEUE_POD_HISTORIES", "0"))
LONG_FROM = int(os.environ.get("GPUQUEUE_POD_HISTORIES_FROM", "1000"))  # the first seed of the long profile


def world() -> list[dict]:
    objs: list[dict] = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                         "metadata": {"name": "gh200"}, "spec": {"nodeLabels": GH200}}]
    for ns, (cq, quota) in TEAMS.items():
        objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
                     "spec": {"cohortName": "flame", "namespaceSelector": {},
                              "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                              "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                                  {"name": "gh200", "resources": [{"name": GPU, "nominalQuota": quota}]}]}]}})
        objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"namespace": ns, "name": "default"}, "spec": {"clusterQueue": cq}})
    for i in range(4):  # 32 GPUs of nodes for 6 of quota: only the quota can stop a pod
        objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"gh200-node-{i}", "labels": GH200},
                     "status": {"allocatable": {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"}}})
    return objs


def job(ns: str, name: str, parallelism: int, completions: int, gpus: int) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": ns, "name": name, "labels": {QUEUE_NAME_LABEL: "default"}},
            "spec": {"parallelism": parallelism, "completions": completions, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "train:1",
                                "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}}}


def bare_pod(ns: str, name: str, gpus: int) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "x", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]}}


async def ask(view: ControllerClusterView, verb: str, body: bytes, cache_wait: float) -> bytes:
    """One call of kube-scheduler to the extender verbs over `view` (in process, without HTTPS)."""
    if verb == "filter":
        answer = verbs.filter_verb(body, view, wait=cache_wait)
        if inspect.isawaitable(answer):
            answer = await answer
    else:
        answer = verbs.prioritize_verb(body, view)
    return answer if isinstance(answer, bytes) else orjson.dumps(answer)


class Loop:
    """The harness, a leading controller with its extender view, and the stand-in scheduler that
    asks that view (in process: the verbs' code, without HTTPS). ``cache_wait``: how long /filter
    waits for its caches (the served extender's, ``catchup.WAIT_SECONDS``; 0: answer at once)."""

    def __init__(self, h: Harness, version: str = V1_24, cache_wait: float = WAIT_SECONDS) -> None:
        self.h = h
        self.ctl: Controller | None = None
        self.view: ControllerClusterView | None = None
        self.up = asyncio.Event()
        self.cache_wait = cache_wait
        self.scheduler = Scheduler(h.api.cluster, self.extender, version=version)

    async def extender(self, verb: str, body: bytes) -> bytes:
        # A restart is one replica's: kube-scheduler's call reaches a replica that serves (a
        # Service's ready endpoints), here once the restarted one is.
        deadline = asyncio.get_running_loop().time() + 10
        while (view := self.view) is None:  # (woken, it may be down again before it runs)
            try:
                await asyncio.wait_for(self.up.wait(), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                return orjson.dumps({"Error": "extender unreachable"})
        return await ask(view, verb, body, self.cache_wait)

    async def start_controller(self) -> None:
        await self.h.namespace("gpuqueue-system")
        ctl = Controller(client.ApiClient(self.h.api.client_configuration()), FAST, identity="test")
        view = ControllerClusterView(ctl)
        self.h.controllers.append(ctl)
        await ctl.start()
        self.ctl = ctl
        await ctl.wait_synced()  # ready: a Service sends kube-scheduler's calls only to ready replicas
        self.view = view
        self.up.set()

    async def restart(self) -> None:
        ctl, self.ctl, self.view = self.ctl, None, None
        self.up.clear()
        await self.h.kill(ctl)
        await self.start_controller()


async def tenant_step(rng: random.Random, loop: Loop, jobs: list[tuple[str, str]], n: int) -> None:
    try:
        await _tenant_step(rng, loop, jobs, n)
    except ApiException as exc:
        if exc.status not in (404, 409, 422):  # the API refused the tenant's edit: that is allowed
            raise
    await asyncio.sleep(rng.choice([0.0, 0.02, 0.1, 0.3]))


async def _tenant_step(rng: random.Random, loop: Loop, jobs: list[tuple[str, str]], n: int) -> None:
    h = loop.h
    op = rng.choice(["submit", "submit", "parallelism", "drop-label", "unsuspend", "template", "bare-pod",
                     "forged", "finish", "delete", "restart"])
    live = [k for k in jobs if h.job(*k) is not None]
    target = rng.choice(live) if live else None
    if op == "submit" or target is None and op not in ("bare-pod", "forged", "restart"):
        ns = rng.choice(list(TEAMS))
        p = rng.choice([1, 1, 2, 4])
        await h.submit(job(ns, f"j{n}", p, rng.choice([p, 8]), rng.choice([1, 2])))
        jobs.append((ns, f"j{n}"))
    elif op == "parallelism":
        await h.edit(K.JOBS, *target, lambda j: j["spec"].update(parallelism=rng.choice([2, 4, 8])))
    elif op == "drop-label":
        await h.edit(K.JOBS, *target, lambda j: j["metadata"].get("labels", {}).pop(QUEUE_NAME_LABEL, None))
    elif op == "unsuspend":
        await h.edit(K.JOBS, *target, lambda j: j["spec"].update(suspend=False))
    elif op == "template":
        def more_gpus(j):
            if j["spec"].get("suspend"):  # the API refuses template changes of a started Job
                j["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {GPU: "4"}}
        await h.edit(K.JOBS, *target, more_gpus)
    elif op == "bare-pod":
        ns = rng.choice(list(TEAMS))
        await h.kube.create(K.PODS, ns, bare_pod(ns, f"bare-{n}", rng.choice([1, 8])))
    elif op == "forged" and loop.view is not None:
        pod = bare_pod("team-c", f"forged-{n}", 100000)
        pod["metadata"].update(namespace="team-c", uid=f"made-up-{n}",
                               labels={"job-name": target[1] if target else "x"})
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": [f"gh200-node-{i}" for i in range(4)]})
        verbs.filter_verb(body, loop.view)
        verbs.prioritize_verb(body, loop.view)
    elif op == "finish":
        h.api.job_controller.succeed_pods(*target, bound_only=True)  # a kubelet ends only pods it runs
    elif op == "delete":
        h.api.cluster.delete(R.JOBS, *target, propagation="Background")  # kubectl delete: cascade background
    elif op == "restart":
        await loop.restart()


@contextlib.asynccontextmanager
async def whole_loop(version: str = V1_24, cache_wait: float = WAIT_SECONDS, loop_class: type[Loop] = Loop):
    """`world()` applied, a leading controller, the stand-in scheduler asking its extender view,
    and the oracles on every write (safety, and liveness on the scheduler's clock); checked once
    more at the end. ``loop_class``: another replica set-up (a follower's extender)."""
    async with Harness() as h:
        invariant = PodInvariant(h.api.cluster)
        for obj in world():
            await h.apply(obj)
        loop = loop_class(h, version, cache_wait)
        liveness = PodLiveness(h.api.cluster, loop.scheduler)
        await loop.start_controller()
        loop.scheduler.start()
        try:
            yield h, loop, invariant, liveness
        finally:
            await loop.scheduler.stop()
        invariant.check("at the end")
        liveness.check("at the end")


async def run_history(seed: int, steps: int = 14, version: str = V1_24, cache_wait: float = WAIT_SECONDS,
                      loop_class: type[Loop] = Loop) -> tuple[PodInvariant, PodLiveness]:
    rng = random.Random(seed)
    async with whole_loop(version, cache_wait, loop_class) as (h, loop, invariant, liveness):
        # one Job within team-a's guarantee first, so that every history runs GPU pods
        await h.submit(job("team-a", "first", 1, 2, 1))
        jobs: list[tuple[str, str]] = [("team-a", "first")]
        await eventually(lambda: any(p["spec"].get("nodeName") for p in h.api.cluster.list(R.PODS, "team-a")["items"]),
                         15, "the first Job's pod bound")  # (a loaded machine: not a fixed pause)
        for n in range(steps):
            await tenant_step(rng, loop, jobs, n)
        await asyncio.sleep(1.0)  # let the controller, job controller and scheduler settle
    return invariant, liveness


@pytest.mark.parametrize("seed", CI_SEEDS + REGRESSION_SEEDS + list(range(LONG_FROM, LONG_FROM + LONG)))
async def test_no_gpu_runs_beyond_what_was_admitted_and_what_was_admitted_is_bound(seed):
    version = (V1_24, CURRENT)[seed % 2]  # each kube-scheduler's handling of an Error, over the seeds
    invariant, liveness = await run_history(seed, version=version)
    print(f"seed {seed} ({version}): {len(liveness.waits)} pods owed a node, worst {liveness.worst:.2f} s to bind, "
          f"{loop_stats(liveness)}")
    assert invariant.checks > 0 and invariant.peak_running_gpus > 0, "the history ran no GPU pod at all"
    assert invariant.violations == [], "\n".join(invariant.violations[:10])
    assert liveness.waits, "no admitted pod was owed a node"
    assert liveness.violations == [], "\n".join(liveness.violations[:10])
    assert liveness.worst <= LIVENESS_BOUND


def loop_stats(liveness: PodLiveness) -> str:
    s = liveness.scheduler
    return (f"{s.attempts} attempts, {s.extender_errors} extender Errors, {s.queue.moves} moved by events, "
            f"{s.queue.flushed} flushed, {s.clock.skipped:.1f} s skipped"
            + (f"; the last Errors: {s.extender_error_texts}" if s.extender_error_texts else ""))


async def test_the_liveness_invariant_catches_pods_parked_by_answers_before_the_watch():
    """The same histories with /filter answering before its caches caught up (as main did): on
    kube-scheduler 1.24 some admitted pod waits for the five-minute flush, and the invariant says
    so."""
    late = []
    for seed in CI_SEEDS:
        _, liveness = await run_history(seed, version=V1_24, cache_wait=0.0)
        late += liveness.violations
        if late:
            break
    assert any("after it was owed a node" in v for v in late), late
