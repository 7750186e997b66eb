"""A user's edits of an admitted Job do not get round the queue (issue 9): the admission stands,
as in Kueue, so a Job suspended by hand is started again with its admitted template, and a
nodeSelector edited while it was suspended does not take it off its flavor's nodes."""

from __future__ import annotations

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from tests.controller_support import Harness, eventually, flame_running

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}


def _still_admitted(h: Harness, ns: str, name: str, admission: dict) -> None:
    wl = h.workload_of(ns, name)
    assert wl["status"]["admission"] == admission
    assert W.is_true(wl, "QuotaReserved") and W.is_true(wl, "Admitted")


async def test_a_job_suspended_by_hand_is_started_again():
    async with Harness() as h:
        _, keys = await flame_running(h)
        ns, name = keys[-1]
        admission = h.workload_of(ns, name)["status"]["admission"]
        await h.edit(K.JOBS, ns, name, lambda job: job["spec"].update(suspend=True))
        await eventually(lambda: h.running(ns, name), what="started again")
        assert h.job(ns, name)["spec"]["template"]["spec"]["nodeSelector"] == GH200
        _still_admitted(h, ns, name, admission)
        assert h.observer.violations == []
        assert all(h.running(*k) for k in keys)


async def test_a_node_selector_edited_while_suspended_does_not_survive():
    # The controller is down while the user suspends the Job and points it at other nodes (a
    # running controller races the user and starts the Job again in between). Kubernetes 1.27+
    # clears startTime on suspension, which lets the template change.
    async with Harness() as h:
        h.api.job_controller.keep_start_time_on_suspend = False
        ctl, keys = await flame_running(h)
        ns, name = keys[-1]
        admission = h.workload_of(ns, name)["status"]["admission"]
        await h.kill(ctl)
        await h.edit(K.JOBS, ns, name, lambda job: job["spec"].update(suspend=True))
        await h.edit(K.JOBS, ns, name, lambda job: job["spec"]["template"]["spec"].update(
            nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
        await h.controller()
        await eventually(lambda: h.running(ns, name), what="started again")
        assert h.job(ns, name)["spec"]["template"]["spec"]["nodeSelector"] == GH200
        _still_admitted(h, ns, name, admission)
        assert h.observer.violations == []
