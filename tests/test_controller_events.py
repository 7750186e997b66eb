"""Kueue's Events on the Workloads, besides gpuqueue's on the Jobs: QuotaReserved and Admitted when
admitted, Pending with Kueue's message, EvictedDueToPreempted and Preempted with the preemption
message on a victim; out of the one event budget."""

from __future__ import annotations

import re

from gpuqueue.extender.controller.core import workload as W
from tests.controller_support import Harness, eventually, together_one_pending
from tests.metrics_support import flame_reclaimed


def _events(h: Harness, kind: str, name: str) -> dict[str, dict]:
    return {e["reason"]: e for e in h.api.cluster.store.kind("events").values()
            if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name}


async def test_workload_events_through_the_flame_reclaim():
    async with Harness(pod_deletion_delay=0.05) as h:
        ctl, a_keys, c_keys = await flame_reclaimed(h)
        a = h.workload_of(*a_keys[0])
        await eventually(lambda: {"QuotaReserved", "Admitted"} <= set(_events(h, "Workload", a["metadata"]["name"])),
                         what="admission events on A's workload")
        ev = _events(h, "Workload", a["metadata"]["name"])
        assert re.fullmatch(r"Quota reserved in ClusterQueue group-a, wait time since queued was \d+s",
                            ev["QuotaReserved"]["message"])
        assert ev["Admitted"]["message"] == "Admitted by ClusterQueue group-a, wait time since reservation was 0s"
        assert ev["Admitted"]["involvedObject"] == {"kind": "Workload", "namespace": "team-a",
                                                    "name": a["metadata"]["name"], "uid": a["metadata"]["uid"],
                                                    "apiVersion": "kueue.x-k8s.io/v1beta2"}
        victim = next(h.workload_of(*k) for k in c_keys if not h.running(*k))
        name = victim["metadata"]["name"]
        await eventually(lambda: {"EvictedDueToPreempted", "Preempted"} <= set(_events(h, "Workload", name)),
                         what="eviction events on the victim's workload")
        ev = _events(h, "Workload", name)
        message = W.condition(victim, "Preempted")["message"]
        assert ev["Preempted"]["message"] == ev["EvictedDueToPreempted"]["message"] == message
        assert "Preempted" in _events(h, "Job", victim["metadata"]["ownerReferences"][0]["name"])  # and on the Job
        assert ctl.metrics.events_dropped._value.get() == 0


async def test_pending_event_on_the_workload_with_kueues_message():
    async with Harness() as h:
        await together_one_pending(h)
        await eventually(lambda: "Pending" in _events(h, "Workload", (h.workload_of("default", "gpu-job-b") or {})
                                                      .get("metadata", {}).get("name")), what="Pending on b's workload")
        wl = h.workload_of("default", "gpu-job-b")
        ev = _events(h, "Workload", wl["metadata"]["name"])["Pending"]
        assert ev["type"] == "Warning"
        assert ev["message"] == W.condition(wl, "QuotaReserved")["message"] == (
            "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
            "gpu-flavor, 4 more needed")
