"""Workloads carry Kueue's names (`job-<name>-<sha1(Kind, group, name, uid)[:5]>`), and an upgrade
from gpuqueue's earlier names (`job-<name>-<sha256(uid)[:5]>`) keeps every Workload it finds:
found by its owner's UID, not duplicated, its reservation kept."""

from __future__ import annotations

import copy
import hashlib

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.jobframework.names import workload_name
from tests.controller_support import Harness, eventually, flame_running, job_key, scenario

WORKLOADS = "workloads.kueue.x-k8s.io"


def earlier_name(job_name: str, uid: str) -> str:
    return f"job-{job_name[:240]}-{hashlib.sha256(uid.encode()).hexdigest()[:5]}"


def workloads(h: Harness) -> list[dict]:
    return list(h.api.cluster.store.kind(WORKLOADS).values())


async def test_a_jobs_workload_has_kueues_name():
    async with Harness() as h:
        _, keys = await flame_running(h)
        for ns, name in keys:
            uid = h.job(ns, name)["metadata"]["uid"]
            wl = h.api.cluster.store.get(WORKLOADS, (ns, workload_name("Job", "batch", name, uid)))
            assert wl is not None and wl["metadata"]["name"].startswith(f"job-{name}-")
            assert wl["metadata"]["name"] != earlier_name(name, uid)
        assert len(workloads(h)) == len(keys)


async def rename_to_earlier(h: Harness) -> dict[str, str]:
    """Every Workload recreated under its earlier name with its status (as an older gpuqueue left
    them); the Kueue-named ones deleted. Returns owner uid -> earlier name."""
    renamed = {}
    for wl in workloads(h):
        meta = wl["metadata"]
        ref = meta["ownerReferences"][0]
        old = earlier_name(ref["name"], ref["uid"])
        body = {"apiVersion": W.WORKLOAD_API_VERSION, "kind": "Workload",
                "metadata": {"name": old, "namespace": meta["namespace"], "labels": meta.get("labels") or {},
                             "ownerReferences": meta["ownerReferences"]}, "spec": wl["spec"]}
        created = await h.kube.create(K.WORKLOADS, meta["namespace"], body)
        created["status"] = wl.get("status") or {}
        await h.kube.replace(K.WORKLOADS, created, "status")
        await h.kube.delete(K.WORKLOADS, meta["namespace"], meta["name"])
        renamed[ref["uid"]] = old
    return renamed


async def test_workloads_of_earlier_names_are_kept_across_an_upgrade():
    """FLAME's six Jobs admitted and one more (3 GPUs) pending under an older gpuqueue (its names), then a
    controller of Kueue's names started: no second Workload, every reservation kept (the Jobs run
    on, nothing is admitted twice), and the pending one is admitted into its own Workload when
    room is made."""
    _, jobs, _ = scenario("flame.yaml")
    late_job = copy.deepcopy(jobs[-1])
    late_job["metadata"]["name"] = "c-late"
    late_job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3
    async with Harness() as h:
        first, keys = await flame_running(h, identity="first")
        await h.submit(late_job)
        late = job_key(late_job)
        await eventually(lambda: "insufficient" in str((h.workload_of(*late) or {}).get("status")),
                         what="the late Job's Workload pending")
        await h.kill(first)
        renamed = await rename_to_earlier(h)
        assert len(renamed) == len(jobs) + 1
        assert not any(W.is_true(wl, 'QuotaReserved') for wl in workloads(h) if wl['metadata']['name'] ==
                       renamed[h.job(*late)['metadata']['uid']])

        second = await h.controller(identity="second")
        await eventually(lambda: second.recovered, what="rebuilt")
        await eventually(lambda: all(h.running(*k) for k in keys), what="the six Jobs still running")
        for k in [*keys, late]:
            uid = h.job(*k)["metadata"]["uid"]
            assert second.jobs[f"{k[0]}/{k[1]}"].wl_name == renamed[uid]
        names = sorted(wl["metadata"]["name"] for wl in workloads(h))
        assert names == sorted(renamed.values())  # none created under Kueue's names
        for k in keys:
            (wl,) = [w for w in workloads(h) if w["metadata"]["ownerReferences"][0]["uid"] == h.job(*k)["metadata"]["uid"]]
            assert W.is_true(wl, "QuotaReserved") and W.is_true(wl, "Admitted")
        # room is made: the late Job is admitted, into its earlier-named Workload
        for k in keys:
            await h.kube.delete(K.JOBS, *k)
        await eventually(lambda: h.running(*late), timeout=15, what="the late Job admitted")
        uid = h.job(*late)["metadata"]["uid"]
        wl = h.api.cluster.store.get(WORKLOADS, (late[0], renamed[uid]))
        assert wl is not None and W.is_true(wl, "QuotaReserved")
        assert h.api.cluster.store.get(WORKLOADS, (late[0], W.workload_name(late[1], uid))) is None
        assert h.observer.violations == []
