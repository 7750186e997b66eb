"""A Job's WorkloadPriorityClass label changed after its Workload was made (Kueue's
UpdateWorkloadPriority): the Workload takes the new class and its value, the Job gets an
`UpdatedWorkload` Event, and the engine ranks it by the new priority - a pending Job in its queue
and as a preemptor, an admitted one as a preemption victim."""

from __future__ import annotations

from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from tests.controller_support import Harness, eventually
from tests.test_controller_behaviour import gpu_job, two_pool_objects

CLASSES = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": n}, "value": v}
           for n, v in (("batch", 100), ("normal", 500), ("urgent", 1000))]


def job(name: str, wpc: str) -> dict:
    obj = gpu_job("ml", name)
    obj["metadata"]["labels"][PRIORITY_CLASS_LABEL] = wpc
    return obj


async def relabel(h: Harness, name: str, wpc: str) -> None:
    await h.edit(K.JOBS, "ml", name, lambda j: j["metadata"]["labels"].update({PRIORITY_CLASS_LABEL: wpc}))


def priority(h: Harness, name: str) -> tuple[str, int]:
    spec = h.workload_of("ml", name)["spec"]
    return spec["priorityClassRef"]["name"], spec["priority"]


def events_on(h: Harness, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in h.api.cluster.store.kind("events").values()
            if e["involvedObject"].get("kind") == "Job" and e["involvedObject"].get("name") == name]


async def setup(h: Harness) -> None:
    for obj in two_pool_objects(f2_quota=0) + CLASSES:  # one GPU; withinClusterQueue: LowerPriority
        await h.apply(obj)
    await h.controller()


async def test_a_pending_job_moved_to_a_higher_class_overtakes_and_preempts():
    async with Harness() as h:
        await setup(h)
        await h.submit(job("running", "batch"))
        await eventually(lambda: h.running("ml", "running"), what="the first Job admitted")
        await h.submit(job("first", "batch"))
        await h.submit(job("second", "batch"))
        await eventually(lambda: h.workload_of("ml", "second") is not None, what="its Workload")
        assert priority(h, "second") == ("batch", 100)

        await relabel(h, "second", "urgent")
        await eventually(lambda: priority(h, "second") == ("urgent", 1000), what="the Workload in the new class")
        wl_name = h.workload_of("ml", "second")["metadata"]["name"]
        await eventually(lambda: ("UpdatedWorkload", f"Updated workload priority class: ml/{wl_name}")
                         in events_on(h, "second"), what="the Job's UpdatedWorkload Event")
        # now above the running Job (LowerPriority within the ClusterQueue): it takes its place;
        # the one queued before it at the old priority still waits
        await eventually(lambda: h.running("ml", "second") and W.is_true(h.workload_of("ml", "running"), "Requeued"),
                         what="the relabelled Job admitted in place of the running one")
        assert not h.running("ml", "first") and not h.running("ml", "running")
        assert h.observer.violations == []


async def test_an_admitted_job_moved_to_a_higher_class_is_no_longer_a_victim():
    async with Harness() as h:
        await setup(h)
        await h.submit(job("held", "batch"))
        await eventually(lambda: h.running("ml", "held"), what="admitted")
        await relabel(h, "held", "urgent")  # Kueue allows another class while it runs
        await eventually(lambda: priority(h, "held") == ("urgent", 1000), what="the Workload in the new class")
        assert "admission" in h.workload_of("ml", "held")["status"]

        # a newcomer above its old priority, below its new one: it waits, and says why
        await h.submit(job("newcomer", "normal"))
        await eventually(lambda: "insufficient unused quota" in (
            W.condition(h.workload_of("ml", "newcomer"), "QuotaReserved") or {}).get("message", ""),
            what="the newcomer pending for quota")
        assert h.running("ml", "held") and not W.is_true(h.workload_of("ml", "held"), "Evicted")
        assert not h.running("ml", "newcomer")

        # moved down again below the newcomer: now it is the victim
        await relabel(h, "held", "batch")
        await eventually(lambda: h.running("ml", "newcomer") and W.is_true(h.workload_of("ml", "held"), "Requeued"),
                         what="the newcomer admitted in its place")
        assert priority(h, "held") == ("batch", 100)
        assert h.observer.violations == []


async def test_a_class_that_does_not_exist_changes_nothing_until_it_is_created():
    async with Harness() as h:
        await setup(h)
        await h.submit(job("running", "batch"))
        await eventually(lambda: h.running("ml", "running"), what="admitted")
        await h.submit(job("waiting", "batch"))
        await eventually(lambda: h.workload_of("ml", "waiting") is not None, what="its Workload")
        await relabel(h, "waiting", "critical")
        await h.submit(job("sync", "batch"))  # a later Job's Workload: the relabel was seen before it
        await eventually(lambda: h.workload_of("ml", "sync") is not None, what="a later Workload")
        assert priority(h, "waiting") == ("batch", 100)
        await h.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                       "metadata": {"name": "critical"}, "value": 2000})
        await eventually(lambda: priority(h, "waiting") == ("critical", 2000), what="the class once it exists")
        await eventually(lambda: h.running("ml", "waiting"), what="then above the running Job")


async def test_a_class_changed_while_no_controller_led_is_followed_by_the_next():
    async with Harness() as h:
        for obj in two_pool_objects(f2_quota=0) + CLASSES:
            await h.apply(obj)
        first = await h.controller(identity="first")
        await h.submit(job("held", "batch"))
        await eventually(lambda: h.running("ml", "held"), what="admitted")
        await h.submit(job("waiting", "batch"))
        await eventually(lambda: h.workload_of("ml", "waiting") is not None, what="its Workload")
        await h.kill(first)
        await relabel(h, "held", "urgent")
        await relabel(h, "waiting", "normal")
        await h.controller(identity="second")
        await eventually(lambda: priority(h, "held") == ("urgent", 1000) and priority(h, "waiting") == ("normal", 500),
                         what="both Workloads in their new classes")
        assert h.running("ml", "held") and not h.running("ml", "waiting")  # 500 < 1000: no preemption
        assert h.observer.violations == []
