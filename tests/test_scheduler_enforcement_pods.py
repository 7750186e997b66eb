"""Enforcement over plain pods of the pod integration, through the controller's caches and the
extender over TLS: an admitted pod goes to its flavor's nodes only; a pod its tenant ungated
without an admission (the webhook refuses that edit; here it is made directly, as if the webhook
were bypassed) gets no node, and the controller deletes it."""

from __future__ import annotations

import asyncio
import dataclasses

from gpuqueue.jobframework.unqueued import how_to_queue
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.scheduler.view import ADMITTED
from gpuqueue.jobframework.kinds import pods
from gpuqueue.jobframework.registry import IntegrationsConfig
from tests.controller_support import FAST, Harness, eventually
from tests.test_controller_kinds import quota_objects
from tests.test_controller_pod_group_life import group_pod
from tests.test_controller_pods import plain_pod
from tests.test_scheduler_enforcement_kinds import ALL, GPU_NODES, extender, nodes

OPTIONS = dataclasses.replace(FAST, integrations=IntegrationsConfig(("batch/job", "pod")))


async def test_a_pod_runs_only_when_admitted(tmp_path):
    async with Harness(kubernetes_minor=27) as h:
        for obj in [*quota_objects(8), *nodes()]:
            await h.apply(obj)
        async with extender(h, tmp_path, options=OPTIONS) as c:
            notebook = await h.kube.create(K.PODS, "team-a", plain_pod("notebook", 4))
            uid = notebook["metadata"]["uid"]
            await eventually(lambda: getattr(c.view.workload_owned_by(uid), "state", None) == ADMITTED,
                             what="admitted, as the extender sees it")
            await eventually(lambda: not pods.is_gated(c.pod("team-a", "notebook")), what="ungated")
            await c.known(notebook)
            fits = (await c.filter(c.pod("team-a", "notebook"), ALL))["NodeNames"]
            assert fits and set(fits) <= set(GPU_NODES), fits
            c.bind(c.pod("team-a", "notebook"), fits[0])

            # 8 more GPUs than the quota has left: queued, gated; its tenant lifts the gate itself
            greedy = await h.kube.create(K.PODS, "team-a", plain_pod("greedy", 8))
            await eventually(lambda: c.view.workload_owned_by(greedy["metadata"]["uid"]) is not None,
                             what="queued, as the extender sees it")
            # its pending message is written once it has waited (pending_message_delay)
            await eventually(lambda: "4 more needed" in (getattr(c.view.workload_owned_by(greedy["metadata"]["uid"]),
                                                                 "message", "") or ""), 8, what="its pending message")
            live = c.pod("team-a", "greedy")
            await h.kube.replace(K.PODS, pods.ungated(live, None))
            await c.known(greedy)
            answer = await c.filter(c.pod("team-a", "greedy"), ALL)
            assert answer["NodeNames"] == [], answer
            assert answer["FailedAndUnresolvableNodes"][GPU_NODES[0]] == (
                "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
                "gh200, 4 more needed")
            # the controller stops it: a pod cannot be suspended, so it is deleted - and, never bound
            # (the API server binds no pod being deleted), its finalizer goes with it at once
            await eventually(lambda: c.pod("team-a", "greedy") is None, what="the ungated pod deleted by the controller")
            assert c.pod("team-a", "notebook")["metadata"].get("deletionTimestamp") is None


async def test_a_pod_groups_pods_are_held_to_their_roles_pod_set(tmp_path):
    """A group's Workload is owned by the pods it counts, controlled by none: the extender finds
    each pod's Workload through those ownerReferences and holds it to its role's pod set's flavor.
    A pod beyond the group's total count (three created for two) is not counted, and the
    controller deletes it (Kueue's); ungated by its tenant (the webhook bypassed) before that
    deletion lands, it gets no node."""
    async with Harness(kubernetes_minor=27) as h:
        for obj in [*quota_objects(8), *nodes()]:
            await h.apply(obj)
        deleting = asyncio.Event()  # the controller's deletion of the third pod, held until released
        h.api.faults.add(r"/pods/sweep-2$", method="DELETE", hold=deleting, times=10)
        async with extender(h, tmp_path, options=OPTIONS) as c:
            created = [await h.kube.create(K.PODS, "team-a", group_pod(f"sweep-{i}", "sweep", 2, 2)) for i in range(3)]
            uid = created[0]["metadata"]["uid"]
            await eventually(lambda: getattr(c.view.workload_owned_by(uid), "state", None) == ADMITTED,
                             what="admitted, as the extender sees it")
            await eventually(lambda: not any(pods.is_gated(c.pod("team-a", f"sweep-{i}")) for i in range(2)),
                             what="the two pods it counts ungated")
            wl = c.view.workload_owned_by(uid)
            assert {ps: a.count for ps, a in wl.pod_sets.items()} == {
                created[0]["metadata"]["annotations"][pods.ROLE_HASH]: 2}
            for i, pod in enumerate(created[:2]):
                await c.known(pod)
                fits = (await c.filter(c.pod("team-a", f"sweep-{i}"), ALL))["NodeNames"]
                assert fits and set(fits) <= set(GPU_NODES), fits
                c.bind(c.pod("team-a", f"sweep-{i}"), fits[0])

            extra = c.pod("team-a", "sweep-2")
            assert pods.is_gated(extra), "not counted: left gated"
            await h.kube.replace(K.PODS, pods.ungated(extra, None))
            await c.known(created[2])
            answer = await c.filter(c.pod("team-a", "sweep-2"), ALL)
            assert answer["NodeNames"] == [], answer
            assert set(answer["FailedAndUnresolvableNodes"].values()) == {
                "gpuqueue: pod team-a/sweep-2 requests nvidia.com/gpu but belongs to no admitted workload; "
                f"{how_to_queue('team-a')}"}
            deleting.set()
            await eventually(lambda: c.pod("team-a", "sweep-2") is None, what="the pod beyond the count deleted")
            assert all(c.pod("team-a", f"sweep-{i}") is not None for i in range(2))
