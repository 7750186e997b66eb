"""Round trips the controller leaves out, and the guarantees that still hold: a workload preempted
before its admission was written leaves nothing to undo; an admission waits only for releases in
its own cohort tree."""

from __future__ import annotations

import asyncio

from gpuqueue.extender.controller.core import workload as W
from tests.standin import resources as R
from tests.controller_support import Harness, eventually
from tests.test_controller_behaviour import gpu_job, two_pool_objects


def workload_writes(h: Harness, ns: str, job: str) -> list[dict]:
    name = W.workload_name(job, h.job(ns, job)["metadata"]["uid"])
    return [w.new for w in h.writes if w.resource is R.WORKLOADS and w.namespace == ns and w.name == name]


async def test_a_job_preempted_before_its_admission_is_written_leaves_nothing_to_undo():
    async with Harness() as h:
        h.writes = []
        h.api.observe(h.writes.append)
        for obj in two_pool_objects(f2_quota=0):  # one GPU in all
            await h.apply(obj)
        ctl = await h.controller()
        await h.submit(gpu_job("ml", "first", priority_class="low"))
        await eventually(lambda: h.running("ml", "first"), what="first admitted")
        await h.submit(gpu_job("ml", "low", priority_class="low"))
        await eventually(lambda: W.condition(h.workload_of("ml", "low"), "QuotaReserved") is not None,
                         what="low waiting")
        # first's Finished write is held: low, admitted by the engine as soon as first completes,
        # waits for that release before its admission is written ...
        gate = asyncio.Event()
        first_wl = h.workload_of("ml", "first")["metadata"]["name"]
        hold = h.api.faults.add(rf"/workloads/{first_wl}/status$", method="PATCH", hold=gate)
        await h.finish_job("ml", "first")
        await eventually(lambda: hold.hits == 1 and ctl.jobs["ml/low"].phase == "admitted", what="low admitted")
        # ... and is preempted by high meanwhile
        await h.submit(gpu_job("ml", "high", priority_class="high"))
        await eventually(lambda: ctl.jobs.get("ml/high") is not None and ctl.jobs["ml/high"].phase == "admitted",
                         what="high admitted")
        assert not h.running("ml", "high")  # not before first's release is written
        gate.set()
        await eventually(lambda: h.running("ml", "high"), what="high running")
        await ctl.writes.idle()
        assert h.job("ml", "low")["spec"]["suspend"] is True
        low = workload_writes(h, "ml", "low")
        assert low and not any((w.get("status") or {}).get("admission") for w in low)
        for cond in ("Evicted", "Preempted", "Requeued", "Admitted"):
            assert not any(W.is_true(w, cond) for w in low), cond
        assert W.is_true(h.workload_of("ml", "first"), "Finished")
        assert h.observer.violations == []


def two_trees() -> list[dict]:
    """ClusterQueues a and b, one GPU each, no cohort: two quota trees."""
    objs: list[dict] = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                         "metadata": {"name": "gpus"}}]
    for q in ("a", "b"):
        objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": q},
                     "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                              "flavors": [{"name": "gpus", "resources": [
                                  {"name": "nvidia.com/gpu", "nominalQuota": 1}]}]}]}})
        objs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"namespace": f"team-{q}", "name": "default"}, "spec": {"clusterQueue": q}})
    return objs


async def test_a_release_under_way_holds_back_admissions_in_its_own_tree_only():
    async with Harness() as h:
        for obj in two_trees():
            await h.apply(obj)
        await h.controller()
        await h.submit(gpu_job("team-a", "a-1"))
        await eventually(lambda: h.running("team-a", "a-1"), what="a-1 admitted")
        await h.submit(gpu_job("team-a", "a-2"))
        gate = asyncio.Event()
        a1 = h.workload_of("team-a", "a-1")["metadata"]["name"]
        hold = h.api.faults.add(rf"/workloads/{a1}/status$", method="PATCH", hold=gate)
        await h.finish_job("team-a", "a-1")
        await eventually(lambda: hold.hits == 1, what="a-1's Finished write held")
        await h.submit(gpu_job("team-b", "b-1"))  # decided while a-1's release is open, in the other tree
        await eventually(lambda: h.running("team-b", "b-1"), what="b-1 admitted")
        await asyncio.sleep(0.2)
        assert not h.running("team-a", "a-2")  # a-1's room is not a-2's until its release is written
        assert W.condition(h.workload_of("team-a", "a-2"), "Admitted") is None or not W.is_true(
            h.workload_of("team-a", "a-2"), "Admitted")
        gate.set()
        await eventually(lambda: h.running("team-a", "a-2"), what="a-2 admitted")
        assert h.observer.violations == []


async def test_status_writes_to_quota_objects_leave_the_engine_alone_and_spec_changes_reach_it():
    from gpuqueue.extender.controller.client import kinds as K
    from gpuqueue.extender.controller.queues.default_queue_label import DEFAULT_LOCAL_QUEUE_LABEL

    async with Harness() as h:
        for obj in two_trees():
            await h.apply(obj)
        ctl = await h.controller()
        await h.submit(gpu_job("team-a", "a-1"))
        await h.submit(gpu_job("team-a", "a-2"))
        await eventually(lambda: h.running("team-a", "a-1"), what="a-1 admitted")
        # the namespace label kept where a LocalQueue "default" is (a namespace change: the engine's too)
        await eventually(lambda: all(
            (ctl.informers["namespaces"].get(ns)["metadata"].get("labels") or {}).get(DEFAULT_LOCAL_QUEUE_LABEL)
            for ns, name in ctl.queue_view.local_queues if name == "default"), what="namespaces labelled")
        epoch = ctl.engine._epoch  # bumped by every spec change the engine is given
        await eventually(lambda: (h.cluster_queue("a").get("status") or {}).get("admittedWorkloads") == 1
                         and (h.cluster_queue("a").get("status") or {}).get("pendingWorkloads") == 1,
                         what="a's status written")
        await asyncio.sleep(0.1)  # its watch event is back
        assert ctl.engine._epoch == epoch  # our own status writes are not spec changes
        await h.edit(K.CLUSTER_QUEUES, None, "a", lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][0][
            "resources"][0].update(nominalQuota=2))
        await eventually(lambda: h.running("team-a", "a-2"), what="a-2 admitted in the larger quota")
        assert ctl.engine._epoch > epoch
        assert h.observer.violations == []


async def test_jobs_made_from_one_template_share_its_model_and_a_bad_template_is_named_from_the_job():
    import pytest
    from kubernetes_asyncio import client
    from gpuqueue.extender.controller.controller import Controller

    async with client.ApiClient(client.Configuration(host="http://127.0.0.1:1")) as api:
        ctl = Controller(api)
        one, two = gpu_job("ml", "one"), gpu_job("ml", "two", gpus=1)
        for n, job in enumerate((one, two)):
            job["metadata"]["uid"] = f"uid-{n}"
        adapter = ctl.kinds_by_kind["Job"]
        (p1,), (p2,) = adapter.pod_sets(one), adapter.pod_sets(two)
        assert p1 is p2  # one model of the shared template, one engine pod set computed from it
        assert adapter.pod_sets(gpu_job("ml", "three", gpus=2))[0] is not p1
        bad = gpu_job("ml", "bad")
        bad["spec"]["template"]["spec"]["containers"][0]["resources"] = "lots"
        with pytest.raises(ValueError) as err:
            adapter.pod_sets(bad)
        assert "spec.template.spec.containers.0.resources" in str(err.value)
