"""`gpuqueue explain` on Topology Aware Scheduling (issue 25, part 3): for a Job admitted to a TAS
flavor, the domains its pods were given; for one that fits no domain, what it asks of the topology
beside Kueue's message saying why. On the API server stand-in with the controller and extender,
on the issue's Topology of 2 blocks x 2 racks x 2 nodes x 4 GPUs."""

from __future__ import annotations

from gpuqueue.extender.controller.explain.explain import explain_job
from gpuqueue.extender.controller.explain.explain_tas import topology_lines
from tests.controller_support import eventually
from tests.test_tas_admission import BLOCK, RACK, TAS_WORLD, job, running


async def test_explain_shows_the_assigned_block_and_why_a_rack_job_does_not_fit(tmp_path):
    async with running(tmp_path, TAS_WORLD, scheduler=False) as c:
        await c.h.submit(job("block", 4, 4, {"kueue.x-k8s.io/podset-required-topology": BLOCK}))
        await c.h.submit(job("rack", 4, 4, {"kueue.x-k8s.io/podset-required-topology": RACK}))
        await eventually(lambda: c.condition("block", "Admitted").get("status") == "True", what="block Job admitted")
        await eventually(lambda: "topology" in (c.condition("rack", "QuotaReserved").get("message") or ""),
                         what="rack Job pending on the topology")
        text, code = await explain_job(c.h.client, "team-a/block")
        assert code == 0
        assert "  Topology:     pod set main: b1-r1-n1×1, b1-r1-n2×1, b1-r2-n1×1, b1-r2-n2×1 (kubernetes.io/hostname)" in text
        text, code = await explain_job(c.h.client, "team-a/rack")
        assert code == 1
        assert ("  Message:      couldn't assign flavors to pod set main: topology \"default\" allows to fit only 2 "
                "out of 4 pod(s)") in text
        assert f"  Topology:     pod set main asks for 4 pod(s) in one {RACK} (required)" in text


def test_the_other_requests_are_said_in_their_own_words():
    def wl(annotations: dict) -> dict:
        return {"spec": {"podSets": [{"name": "workers", "count": 8, "template": {"metadata": {"annotations": annotations}}}]}}

    assert topology_lines(wl({"kueue.x-k8s.io/podset-preferred-topology": RACK})) == [
        f"  Topology:     pod set workers asks for 8 pod(s) in one {RACK} if one holds them, else as few as can (preferred)"]
    assert topology_lines(wl({"kueue.x-k8s.io/podset-unconstrained-topology": "true",
                              "kueue.x-k8s.io/podset-slice-required-topology": RACK,
                              "kueue.x-k8s.io/podset-slice-size": "4"})) == [
        f"  Topology:     pod set workers asks for 8 pod(s) wherever there is room (unconstrained), in slices of 4 "
        f"pod(s) each in one {RACK}"]
    assert topology_lines(wl({})) == []  # asks nothing, was given nothing
