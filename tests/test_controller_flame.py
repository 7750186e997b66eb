"""The FLAME walkthrough on a live API (the stand-in): borrowing, reclaim, automatic resume."""

from __future__ import annotations

from gpuqueue.extender.controller.core import workload as W
from tests.controller_support import Harness, eventually, flame_running, job_key, scenario

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}


async def test_flame_borrow_reclaim_resume():
    _, _, later = scenario("flame.yaml")
    async with Harness(pod_deletion_delay=0.2) as h:
        # 1. B runs its 2 guaranteed GPUs, C borrows 4 (2 of A's idle ones, the cohort's 2)
        ctl, keys = await flame_running(h)
        b_keys = [k for k in keys if k[0] == "team-b"]
        c_keys = [k for k in keys if k[0] == "team-c"]

        for ns, name in keys:
            job = h.job(ns, name)
            assert job["spec"]["template"]["spec"]["nodeSelector"] == GH200
            wl = h.workload_of(ns, name)
            cq = "group-b" if ns == "team-b" else "group-c"
            reserved = W.condition(wl, "QuotaReserved")
            assert reserved["status"] == "True" and reserved["message"] == f"Quota reserved in ClusterQueue {cq}"
            assert W.is_true(wl, "Admitted")
            assert wl["status"]["admission"]["podSetAssignments"] == [
                {"name": "main", "flavors": {"nvidia.com/gpu": "gh200"}, "resourceUsage": {"nvidia.com/gpu": "1"},
                 "count": 1}]
            owner = wl["metadata"]["ownerReferences"][0]
            assert owner["uid"] == job["metadata"]["uid"] and owner["controller"] is True
            assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == job["metadata"]["uid"]
            assert wl["spec"]["queueName"] == "default"
            assert wl["spec"]["podSets"][0]["count"] == 1
            assert "nodeSelector" not in wl["spec"]["podSets"][0]["template"]["spec"]  # the Job's own template

        await eventually(lambda: (h.cluster_queue("group-c").get("status") or {}).get("reservingWorkloads") == 4,
                         what="group-c status shows 4 reserving")
        c_status = h.cluster_queue("group-c")["status"]
        assert c_status["flavorsReservation"] == [
            {"name": "gh200", "resources": [{"name": "nvidia.com/gpu", "total": "4", "borrowed": "4"}]}]
        assert W.is_true(h.cluster_queue("group-c"), "Active")

        # 2. A reclaims its 4: two of C's jobs are suspended and requeued; B is never touched
        a_jobs = {}
        for job in later:
            created = await h.submit(job)
            a_jobs[job_key(job)] = created
        await eventually(lambda: all(h.running(*k) for k in a_jobs), what="A's four jobs unsuspended")
        suspended = [k for k in c_keys if not h.running(*k)]
        assert len(suspended) == 2
        assert all(h.running(*k) for k in b_keys)
        # never more than 8 GPUs' worth of pods at once: the victims' pods were gone before A's started
        for ns, name in suspended:
            await eventually(lambda: W.is_true(h.workload_of(ns, name), "Requeued"), what="victim requeued")
            wl = h.workload_of(ns, name)
            evicted, preempted = W.condition(wl, "Evicted"), W.condition(wl, "Preempted")
            assert evicted["status"] == "True" and evicted["reason"] == "Preempted"
            assert preempted["status"] == "True" and preempted["reason"] == "InCohortReclamation"
            preemptor_uid = preempted["message"].split("UID: ")[1].split(",")[0]
            preemptors = [h.workload_of(*k) for k in a_jobs]
            preemptor = next(p for p in preemptors if p["metadata"]["uid"] == preemptor_uid)
            job_uid = preemptor["metadata"]["labels"]["kueue.x-k8s.io/job-uid"]
            assert preempted["message"] == (
                f"Preempted to accommodate a workload (UID: {preemptor_uid}, JobUID: {job_uid}) due to "
                f"reclamation within the cohort; preemptor path: /flame/group-a; preemptee path: /flame/group-c")
            assert W.condition(wl, "QuotaReserved")["status"] == "False"
            assert "admission" not in wl["status"]
            job = h.job(ns, name)
            assert job["spec"]["suspend"] is True
            # 1.24 keeps a re-suspended Job's startTime, so its pod template cannot be restored: it keeps
            # the GH200 selector (and the record of its own template) until it runs again there
            assert job["status"].get("startTime")
            assert job["spec"]["template"]["spec"]["nodeSelector"] == GH200
            assert W.ORIGINAL_SCHEDULING_ANNOTATION in job["metadata"]["annotations"]
            assert not any(c.get("type") == "Failed" for c in (job.get("status") or {}).get("conditions") or ())

        def counts(cq):
            s = h.cluster_queue(cq).get("status") or {}
            return s.get("pendingWorkloads"), s.get("reservingWorkloads"), s.get("admittedWorkloads")

        await eventually(lambda: counts("group-a") == (0, 4, 4) and counts("group-c") == (2, 2, 2)
                         and counts("group-b") == (0, 2, 2), what="queue status after reclaim")

        # 3. A's jobs complete: C's two requeued jobs come back by themselves
        for ns, name in a_jobs:
            await h.finish_job(ns, name)
        await eventually(lambda: all(W.is_true(h.workload_of(*k), "Finished") for k in a_jobs),
                         what="A's workloads finished")
        await eventually(lambda: all(h.running(*k) for k in c_keys), what="C's jobs resumed")
        for ns, name in suspended:
            wl = h.workload_of(ns, name)
            assert W.is_true(wl, "QuotaReserved") and W.is_true(wl, "Admitted")
            assert W.condition(wl, "Evicted")["status"] == "False"
            assert h.job(ns, name)["spec"]["template"]["spec"]["nodeSelector"] == GH200
        await eventually(lambda: counts("group-c") == (0, 4, 4) and counts("group-a") == (0, 0, 0),
                         what="queue status after resume")

        assert h.observer.violations == []
        assert h.observer.checks > 20
        assert not h.api.internal_errors
        def reasons():
            return {e["reason"] for e in h.api.cluster.store.kind("events").values()}

        await eventually(lambda: {"CreatedWorkload", "Started", "Preempted", "Resumed"} <= reasons(),
                         what="events on the Jobs")
        assert ctl.ready


async def test_flame_fair_sharing_from_the_configuration():
    """The Configuration's fairSharing reaches the live engine: when D submits, three of C's
    borrowed jobs are preempted for InCohortFairSharing and C and D hold 3 GPUs each."""
    import dataclasses

    from gpuqueue.extender.quota.convert import fair_sharing_spec
    from gpuqueue.extender.simulate.scenario import load_scenario
    from tests.controller_support import EXAMPLES, FAST

    cfg = load_scenario((EXAMPLES / "flame-fair-sharing.yaml").read_text()).configuration
    options = dataclasses.replace(FAST, fair_sharing=fair_sharing_spec(cfg))
    objects, jobs, later = scenario("flame-fair-sharing.yaml")
    objects = [o for o in objects if o["kind"] != "Configuration"]  # the controller's --config, not an API object
    async with Harness(pod_deletion_delay=0.05) as h:
        for obj in objects:
            await h.apply(obj)
        await h.controller(options)
        for job in jobs:
            await h.submit(job)
        keys = [job_key(j) for j in jobs]
        await eventually(lambda: all(h.running(*k) for k in keys), what="B's 2 and C's 6 jobs unsuspended")
        for job in later:
            await h.submit(job)
        d_keys = [job_key(j) for j in later]
        c_keys = [k for k in keys if k[0] == "team-c"]
        await eventually(lambda: sum(h.running(*k) for k in d_keys) == 3, what="three of D's jobs unsuspended")
        assert sum(h.running(*k) for k in c_keys) == 3
        preempted = [h.workload_of(*k) for k in c_keys if not h.running(*k)]
        assert len(preempted) == 3
        for wl in preempted:
            assert W.condition(wl, "Preempted")["reason"] == "InCohortFairSharing"
        await eventually(lambda: (h.cluster_queue("group-c").get("status") or {}).get("fairSharing") == {"weightedShare": 375},
                         what="group-c publishes its share")
