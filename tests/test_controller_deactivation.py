"""`gpuqueue stop workload` / `resume workload` (spec.active, as kueuectl writes it) honoured as Kueue
honours it: an admitted Job is evicted with reason Deactivated - suspended, its quota freed once its
pods are gone - and held out of its queue until resumed; a stopped pending one is never admitted
while stopped. The commands run as a person runs them (gpuqueue.cli.main, its own event loop, in a
thread) against the API stand-in the controller watches."""

from __future__ import annotations

import asyncio

from gpuqueue.cli import main
from gpuqueue.extender.controller.core import workload as W
from tests.controller_support import Harness, eventually, together_one_pending


async def _gq(h: Harness, tmp_path, *args: str) -> int:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: standin, cluster: {{server: "{h.api.url}"}}}}]
users: [{{name: me, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: standin, user: me, namespace: default}}}}]
current-context: c
""")
    return await asyncio.to_thread(main, [*args, "--kubeconfig", str(path)])


def _cond(h: Harness, name: str, type_: str) -> tuple:
    c = W.condition(h.workload_of("default", name), type_) or {}
    return c.get("status"), c.get("reason"), c.get("message")


async def test_stop_an_admitted_workload_frees_its_quota_and_resume_queues_it_again(tmp_path):
    async with Harness() as h:
        await together_one_pending(h)  # gpu-job-a admitted (6 GPUs), gpu-job-b waits for 6 more
        wl_a = h.workload_of("default", "gpu-job-a")["metadata"]["name"]
        assert await _gq(h, tmp_path, "stop", "workload", wl_a) == 0
        await eventually(lambda: h.running("default", "gpu-job-b"), what="b admitted in a's room")
        assert not h.running("default", "gpu-job-a")
        wl = h.workload_of("default", "gpu-job-a")
        assert not wl["status"].get("admission") and not W.is_true(wl, "QuotaReserved")
        assert _cond(h, "gpu-job-a", "Evicted") == ("True", "Deactivated", "The workload is deactivated")
        assert _cond(h, "gpu-job-a", "Requeued") == ("False", "Deactivated", "The workload is deactivated")
        assert h.observer.violations == []

        await h.finish_job("default", "gpu-job-b")  # room again: a stays out while stopped
        await asyncio.sleep(0.5)
        assert not h.running("default", "gpu-job-a")

        assert await _gq(h, tmp_path, "resume", "workload", wl_a) == 0
        await eventually(lambda: h.running("default", "gpu-job-a"), what="a admitted again once resumed")
        assert _cond(h, "gpu-job-a", "Requeued") == ("True", "Reactivated", "The workload was reactivated")
        assert W.is_true(h.workload_of("default", "gpu-job-a"), "Admitted")
        assert h.observer.violations == []


async def test_a_stopped_pending_workload_is_never_admitted_while_stopped(tmp_path):
    async with Harness() as h:
        await together_one_pending(h)
        wl_b = h.workload_of("default", "gpu-job-b")["metadata"]["name"]
        assert await _gq(h, tmp_path, "stop", "workload", wl_b) == 0
        await eventually(lambda: _cond(h, "gpu-job-b", "Requeued")[1] == "Deactivated", what="b told it is held out")
        # as Kueue, admitted or not: Evicted, reason Deactivated
        assert _cond(h, "gpu-job-b", "Evicted") == ("True", "Deactivated", "The workload is deactivated")
        assert _cond(h, "gpu-job-b", "Requeued") == ("False", "Deactivated", "The workload is deactivated")
        await h.finish_job("default", "gpu-job-a")  # its 6 GPUs free
        await asyncio.sleep(0.5)
        assert not h.running("default", "gpu-job-b")
        assert not (h.workload_of("default", "gpu-job-b").get("status") or {}).get("admission")
        assert await _gq(h, tmp_path, "resume", "workload", wl_b) == 0
        await eventually(lambda: h.running("default", "gpu-job-b"), what="b admitted once resumed")
        assert _cond(h, "gpu-job-b", "Evicted") == ("False", "QuotaReserved",
                                                     "Previously: The workload is deactivated")


async def test_an_inactive_workload_stays_inactive_when_a_new_leader_rebuilds(tmp_path):
    async with Harness() as h:
        ctl = await together_one_pending(h)
        wl_a = h.workload_of("default", "gpu-job-a")["metadata"]["name"]
        await h.kill(ctl)  # stopped while no controller runs
        assert await _gq(h, tmp_path, "stop", "workload", wl_a) == 0
        await h.controller()
        await eventually(lambda: h.running("default", "gpu-job-b"), what="b admitted in a's room")
        assert not h.running("default", "gpu-job-a")
        assert _cond(h, "gpu-job-a", "Evicted")[1] == "Deactivated"
        assert h.observer.violations == []
