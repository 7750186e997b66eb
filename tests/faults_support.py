"""Shared pieces of the fault-injection tests: the FLAME walkthrough in phases, invariants checked
on every write the stand-in commits, the API's final state as one comparable value, a fault-free
baseline of it, and the time to converge once faults stop."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from gpuqueue.extender.controller.core import workload as W
from tests.standin import Write
from tests.standin import resources as R
from tests.standin.faults import EXEMPT_HEADER
from tests.controller_support import FAST, Harness, eventually, job_key, scenario

# The controller as in the other end-to-end tests, with its retry pauses scaled down like the rest.
OPTS = dataclasses.replace(FAST, watch_backoff_max=0.5, write_backoff_max=0.2)


class StateObserver:
    """On every committed write: no Job has more than one Workload, or more than one holding a
    reservation; every pod that has not ended belongs to a Job whose Workload holds a reservation
    (so the pods never use more than the record's quota); no Job failed or vanished."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.violations: list[str] = []
        self.checks = 0
        h.api.observe(self)

    def __call__(self, write: Write) -> None:
        if write.resource not in (R.WORKLOADS, R.JOBS, R.PODS):
            return
        self.checks += 1
        store = self.h.api.cluster.store
        if write.resource is R.JOBS and write.type == "DELETED":
            self.violations.append(f"rv {write.rv}: Job {write.namespace}/{write.name} deleted")
        per_job: dict[str, list[dict]] = {}
        for wl in store.kind(R.WORKLOADS.storage_key).values():
            for ref in wl["metadata"].get("ownerReferences") or ():
                if ref.get("kind") == "Job" and ref.get("controller"):
                    per_job.setdefault(ref["uid"], []).append(wl)
        for uid, wls in per_job.items():
            reserving = [w for w in wls if _reserving(w)]
            if len(wls) > 1 or len(reserving) > 1:
                self.violations.append(f"rv {write.rv}: job uid {uid} has {len(wls)} Workloads, "
                                       f"{len(reserving)} reserving")
        for job in store.kind(R.JOBS.storage_key).values():
            if _has(job, "Failed"):
                self.violations.append(f"rv {write.rv}: Job {job['metadata']['name']} failed")
        for pod in store.kind(R.PODS.storage_key).values():
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for ref in pod["metadata"].get("ownerReferences") or ():
                if ref.get("kind") == "Job" and ref.get("controller"):
                    if not any(_reserving(w) for w in per_job.get(ref["uid"], ())):
                        self.violations.append(
                            f"rv {write.rv} ({write.verb} {write.resource.kind} {write.name}): pod "
                            f"{pod['metadata']['name']} of Job {ref['name']} exists without a reservation "
                            f"(phase {(pod.get('status') or {}).get('phase')}, "
                            f"deleting: {bool(pod['metadata'].get('deletionTimestamp'))}, Workload conditions "
                            f"{[(c['type'], c['status']) for w in per_job.get(ref['uid'], ()) for c in w.get('status', {}).get('conditions', ())]})")


def _reserving(wl: dict) -> bool:
    return bool((wl.get("status") or {}).get("admission")) and W.is_true(wl, "QuotaReserved") and not W.is_true(
        wl, "Finished")


def _has(job: dict, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or ())


def final_state(h: Harness) -> dict:
    """What a user would read back from the API, without timestamps and generated names."""
    out: dict = {}
    for (ns, name), job in sorted(h.api.cluster.store.kind(R.JOBS.storage_key).items()):
        wl = h.workload_of(ns, name)
        adm = ((wl or {}).get("status") or {}).get("admission") or {}
        out[f"job {ns}/{name}"] = {
            "suspend": job["spec"].get("suspend"),
            "nodeSelector": job["spec"]["template"]["spec"].get("nodeSelector"),
            "complete": _has(job, "Complete"), "failed": _has(job, "Failed"),
            "clusterQueue": adm.get("clusterQueue"),
            **{c: W.is_true(wl, c) for c in ("QuotaReserved", "Admitted", "Finished", "Evicted")},
        }
    for (_, name), cq in sorted(h.api.cluster.store.kind(R.CLUSTER_QUEUES.storage_key).items()):
        s = cq.get("status") or {}
        out[f"cq {name}"] = {k: s.get(k) for k in ("pendingWorkloads", "reservingWorkloads", "admittedWorkloads",
                                                   "flavorsReservation", "flavorsUsage")}
    live = [p for p in h.api.cluster.store.kind(R.PODS.storage_key).values()
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    out["live pods"] = len(live)
    out["workloads"] = len(h.api.cluster.store.kind(R.WORKLOADS.storage_key))
    return out


class Flame:
    """The FLAME walkthrough in three phases, each waited for: C borrows, A reclaims, C resumes."""

    def __init__(self, h: Harness, timeout: float = 15.0) -> None:
        self.h = h
        self.timeout = timeout
        self.objects, self.jobs, self.later = scenario("flame.yaml")
        self.keys = [job_key(j) for j in self.jobs]
        self.a_keys = [job_key(j) for j in self.later]

    async def setup(self) -> None:
        for obj in self.objects:
            await self.h.apply(obj)

    async def borrow(self) -> None:
        for job in self.jobs:
            await self.h.submit(job)
        await self.borrow_done()

    async def borrow_done(self) -> None:
        await eventually(lambda: all(self.h.running(*k) for k in self.keys), self.timeout, "borrowing phase")

    async def reclaim(self) -> None:
        for job in self.later:
            await self.h.submit(job)
        await self.reclaimed()

    async def reclaimed(self) -> None:
        h = self.h
        await eventually(lambda: all(h.running(*k) for k in self.a_keys), self.timeout, "reclaim phase")
        await eventually(lambda: sum(not h.running(*k) for k in self.keys if k[0] == "team-c") == 2,
                         self.timeout, "2 of C out")

    async def resume(self) -> None:
        for k in self.a_keys:
            await self.h.finish_job(*k)
        await eventually(lambda: all(self.h.running(*k) for k in self.keys), self.timeout, "resume phase")


@dataclasses.dataclass
class Run:
    h: Harness
    flame: Flame
    state: StateObserver


class FaultRun:
    """`async with FaultRun() as run:` the stand-in with the FLAME objects applied, both observers
    on, the test's own client exempt from faults, no controller yet."""

    def __init__(self, **server_kw) -> None:
        server_kw.setdefault("pod_deletion_delay", 0.05)
        self.h = Harness(**server_kw)

    async def __aenter__(self) -> Run:
        h = await self.h.__aenter__()
        h.client.set_default_header(EXEMPT_HEADER, "1")
        run = Run(h, Flame(h), StateObserver(h))
        await run.flame.setup()
        return run

    async def __aexit__(self, *exc) -> None:
        self.h.api.faults.clear()
        await self.h.__aexit__(*exc)


_baseline: dict | None = None


async def baseline() -> dict:
    """The final state of a fault-free run, computed once per session."""
    global _baseline
    if _baseline is None:
        async with FaultRun() as run:
            await run.h.controller(OPTS)
            await run.flame.borrow()
            await run.flame.reclaim()
            await run.flame.resume()
            _baseline = await settled(run.h)
    return _baseline


async def settled(h: Harness, timeout: float = 10.0) -> dict:
    """The final state once it has stopped changing (queue status writes come last)."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = final_state(h)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 0.3:
            return now
        await asyncio.sleep(0.02)
    raise AssertionError(f"the API's state never settled: {last}")


async def converge(h: Harness, target: dict, timeout: float = 15.0) -> float:
    """Seconds until the API holds `target`; fails with the difference if it never does."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if final_state(h) == target:
            return time.monotonic() - start
        await asyncio.sleep(0.01)
    now = final_state(h)
    diff = {k: (now.get(k), target.get(k)) for k in set(now) | set(target) if now.get(k) != target.get(k)}
    raise AssertionError(f"not converged within {timeout}s: {diff}")


def assert_clean(run: Run) -> None:
    h = run.h
    assert h.observer.violations == [], h.observer.violations[:5]
    assert run.state.violations == [], run.state.violations[:5]
    assert h.pods.violations == [], h.pods.violations[:5]  # the quota over what runs
    assert h.pods.max_excess == 0  # no tenant here: no pod ever ran beyond a reservation
    assert h.observer.checks > 20 and run.state.checks > 20
    assert not h.api.internal_errors


def report(name: str, h: Harness, **figures) -> None:
    """One line per run for the figures in docs/reliability.md (shown with pytest -s)."""
    injected = dict(sorted(h.api.faults.injected.items()))
    extra = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
    print(f"\n[faults] {name}: injected={injected} requests={len(h.api.requests)} {extra}")
