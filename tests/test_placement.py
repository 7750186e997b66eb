"""Placement core: toleration semantics, filter reasons, free-GPU arithmetic with bound and
in-flight pods, packing scores, place() for the simulator, and the preemption veto."""

from __future__ import annotations

import pytest

from gpuqueue.extender.placement import (FlavorSelector, NodeCache, NodeInfo, NodeVictims, PodRequest, Taint,
                                Toleration, cache_of, extender_score, filter_nodes, place, rank_nodes,
                                score_nodes, summarize, veto)
from gpuqueue.extender.placement.score import MAX_EXTENDER_PRIORITY, PACKING_WEIGHT, SAME_NODE_BONUS
from gpuqueue.extender.placement.kube import node_info_from_dict
from gpuqueue.extender.scheduler.view import controller_uid
from gpuqueue.api.base import ObjectMeta
from gpuqueue.api.core import PodSpec
from gpuqueue.api.podrequests import engine_pod_requests

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
GH = FlavorSelector.of("gh200", GH200)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gh_node(name: str, gpus: int = 4, **kw) -> NodeInfo:
    return NodeInfo(name, dict(GH200, **kw.pop("labels", {})), allocatable={"nvidia.com/gpu": gpus}, **kw)


def flame_cache(**kw) -> NodeCache:
    return cache_of([gh_node("gh200-node-1"), gh_node("gh200-node-2"),
                     NodeInfo("h100-node-3", H100, allocatable={"nvidia.com/gpu": 8})], **kw)


def gpu_pod(uid: str, gpus: int, job: str | None = "team-a/train", **kw) -> PodRequest:
    return PodRequest(uid, gpus, flavor=kw.pop("flavor", GH), job_key=job, **kw)


# -- tolerations: Kubernetes' ToleratesTaint ----------------------------------------

TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize("tol, expected", [
    (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), True),
    (Toleration("nvidia.com/gpu", "", "present", "NoSchedule"), True),  # "" is Equal
    (Toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule"), False),
    (Toleration("nvidia.com/gpu", "Equal", "", "NoSchedule"), False),
    (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), True),
    (Toleration("nvidia.com/gpu", "Exists", "", ""), True),  # empty effect matches all effects
    (Toleration("nvidia.com/gpu", "Exists", "", "NoExecute"), False),
    (Toleration("", "Exists", "", ""), True),  # empty key + Exists tolerates everything
    (Toleration("", "Exists", "", "NoExecute"), False),
    (Toleration("other", "Exists", "", ""), False),
    (Toleration("nvidia.com/gpu", "Gt", "present", "NoSchedule"), False),  # unknown operator
])
def test_toleration_semantics(tol, expected):
    assert tol.tolerates(TAINT) is expected


# -- filter --------------------------------------------------------------------------

def test_non_gh200_node_is_refused_as_unresolvable_with_flavor_reason():
    cache = flame_cache()
    r = filter_nodes(gpu_pod("p", 4), ["gh200-node-2", "h100-node-3", "gh200-node-1"], cache)
    assert r.passed == ["gh200-node-2", "gh200-node-1"]
    assert r.unresolvable == {"h100-node-3": "node is not of flavor gh200 (needs nvidia.com/gpu.product=NVIDIA-GH200-480GB)"}
    assert r.failed == {}


def test_flavor_membership_follows_node_label_changes():
    cache = flame_cache()
    pod = gpu_pod("p", 1)
    assert filter_nodes(pod, ["h100-node-3"], cache).passed == []
    cache.upsert_node(NodeInfo("h100-node-3", GH200, allocatable={"nvidia.com/gpu": 8}))  # relabelled
    assert filter_nodes(pod, ["h100-node-3"], cache).passed == ["h100-node-3"]
    cache.upsert_node(NodeInfo("gh200-node-1", H100, allocatable={"nvidia.com/gpu": 4}))
    assert "gh200-node-1" in filter_nodes(pod, ["gh200-node-1"], cache).unresolvable
    cache.remove_node("gh200-node-2")
    assert filter_nodes(pod, ["gh200-node-2"], cache).failed == {"gh200-node-2": "node is not in gpuqueue's node cache yet"}


def test_cordoned_node_refused_unless_pod_tolerates_unschedulable_taint():
    cache = cache_of([gh_node("gh200-node-1", unschedulable=True)])
    assert filter_nodes(gpu_pod("p", 1), ["gh200-node-1"], cache).unresolvable == {"gh200-node-1": "node is cordoned"}
    tol = (Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),)
    assert filter_nodes(gpu_pod("p", 1, tolerations=tol), ["gh200-node-1"], cache).passed == ["gh200-node-1"]


def test_taints_need_a_matching_toleration_from_pod_or_flavor():
    tainted = gh_node("gh200-node-1", taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))
    soft = gh_node("gh200-node-2", taints=(Taint("busy", "", "PreferNoSchedule"),))
    noexec = gh_node("gh200-node-3", taints=(Taint("maint", "", "NoExecute"),))
    cache = cache_of([tainted, soft, noexec])
    names = ["gh200-node-1", "gh200-node-2", "gh200-node-3"]
    r = filter_nodes(gpu_pod("p", 1), names, cache)
    assert r.passed == ["gh200-node-2"]  # PreferNoSchedule does not filter
    assert r.unresolvable == {
        "gh200-node-1": "node has taint nvidia.com/gpu=present:NoSchedule that the pod does not tolerate",
        "gh200-node-3": "node has taint maint:NoExecute that the pod does not tolerate",
    }
    flavor = FlavorSelector.of("gh200", GH200, (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),))
    r = filter_nodes(gpu_pod("p", 1, flavor=flavor), names, cache)
    assert r.passed == ["gh200-node-1", "gh200-node-2"]
    r = filter_nodes(gpu_pod("p", 1, tolerations=(Toleration("", "Exists"),)), names, cache)
    assert r.passed == names


def test_free_gpus_count_bound_and_in_flight_pods_exactly():
    clock = Clock()
    cache = flame_cache(clock=clock, reservation_ttl=10)
    cache.bind("bound-1", "gh200-node-1", 1, job_key="team-b/b-1")
    cache.reserve("flying-1", "gh200-node-1", 2, job_key="team-c/c-1")
    names = ["gh200-node-1", "gh200-node-2"]
    r = filter_nodes(gpu_pod("p", 2), names, cache)
    assert r.failed == {"gh200-node-1": "node has 1 GPU free, pod needs 2"}
    assert r.passed == ["gh200-node-2"]
    assert filter_nodes(gpu_pod("p", 1), names, cache).passed == names
    # the in-flight pod's own retry does not count against itself
    assert filter_nodes(gpu_pod("flying-1", 3), names, cache).passed == names
    # bound elsewhere: the reservation moves with it
    cache.bind("flying-1", "gh200-node-2", 2)
    assert filter_nodes(gpu_pod("p", 3), names, cache).passed == ["gh200-node-1"]
    assert filter_nodes(gpu_pod("p", 3), names, cache).failed == {"gh200-node-2": "node has 2 GPUs free, pod needs 3"}
    cache.release("flying-1")
    cache.release("bound-1")
    assert filter_nodes(gpu_pod("p", 4), names, cache).passed == names


def test_reservation_expires_after_ttl_but_a_binding_does_not():
    clock = Clock()
    cache = flame_cache(clock=clock, reservation_ttl=10)
    cache.reserve("a", "gh200-node-1", 4)
    cache.bind("b", "gh200-node-2", 4)
    names = ["gh200-node-1", "gh200-node-2"]
    clock.now += 9.9
    assert filter_nodes(gpu_pod("p", 1), names, cache).passed == []
    clock.now += 0.2
    assert filter_nodes(gpu_pod("p", 1), names, cache).passed == ["gh200-node-1"]
    assert cache.pod_node("a") is None and cache.pod_node("b") == ("gh200-node-2", True)
    # a reservation does not demote a bound pod; re-reserving restarts the clock
    cache.reserve("b", "gh200-node-1", 4)
    assert cache.pod_node("b") == ("gh200-node-2", True)
    cache.reserve("c", "gh200-node-1", 4)
    clock.now += 8
    cache.reserve("c", "gh200-node-1", 4)
    clock.now += 8
    assert filter_nodes(gpu_pod("p", 1), ["gh200-node-1"], cache).failed


def test_other_resources_are_checked_only_where_the_node_declares_them():
    cache = cache_of([NodeInfo("n1", GH200, allocatable={"nvidia.com/gpu": 4, "cpu": 4000}),
                      NodeInfo("n2", GH200, allocatable={"nvidia.com/gpu": 4})])
    cache.bind("x", "n1", 0, {"cpu": 3000})
    r = filter_nodes(gpu_pod("p", 1, requests={"cpu": 2000, "memory": 1 << 30}), ["n1", "n2"], cache)
    assert r.failed == {"n1": "node has 1 cpu free, pod needs 2"}
    assert r.passed == ["n2"]


def test_summary_reads_like_kube_scheduler():
    msg = summarize(3, {"a": "node is cordoned", "b": "node has 0 GPUs free, pod needs 4", "c": "node is cordoned"})
    assert msg == "0/3 nodes are available: 1 node has 0 GPUs free, pod needs 4, 2 node is cordoned."


# -- scores --------------------------------------------------------------------------

def test_most_allocated_node_scores_highest():
    cache = flame_cache()
    cache.bind("x", "gh200-node-1", 3, job_key="team-b/other")
    scores = dict(score_nodes(gpu_pod("p", 1), ["gh200-node-1", "gh200-node-2"], cache))
    assert scores == {"gh200-node-1": 7, "gh200-node-2": 2}  # 4/4 and 1/4 of the packing weight
    assert all(0 <= s <= 10 for s in scores.values())


def test_siblings_pull_pods_of_the_same_job_to_their_node_then_their_domain():
    nodes = [gh_node(f"n{i}", 8, labels={"rack": "r1" if i < 2 else "r2"}) for i in range(4)]
    cache = cache_of(nodes, topology_label="rack")
    cache.bind("sib", "n1", 1, job_key="team-a/train")
    cache.bind("other", "n2", 1, job_key="team-b/x")
    ranked = dict(rank_nodes(gpu_pod("p", 1), ["n0", "n1", "n2", "n3"], cache))
    assert ranked["n1"] > ranked["n0"] > ranked["n2"] > ranked["n3"]
    assert dict(score_nodes(gpu_pod("p", 1), ["n0", "n1", "n2", "n3"], cache)) == {"n0": 2, "n1": 5, "n2": 2, "n3": 1}
    assert extender_score(99) == 10 and extender_score(-1) == 0
    # the extender rounds rank values inline, relying on them staying within 0..10
    assert PACKING_WEIGHT + SAME_NODE_BONUS <= MAX_EXTENDER_PRIORITY


# -- place(), as the simulator uses it -------------------------------------------------

def test_flame_eight_one_gpu_pods_fill_one_node_before_the_other():
    cache = flame_cache()
    seq = []
    for i in range(8):  # 8 single-pod Jobs, admitted one after another
        placed = place(gpu_pod(f"job-{i}", 1, job=f"team-a/job-{i}"), 1, cache)
        assert not placed.unschedulable
        seq += placed.sequence
    assert seq == ["gh200-node-1"] * 4 + ["gh200-node-2"] * 4
    one_job = place(gpu_pod("j", 1), 8, flame_cache())
    assert one_job.nodes == {"gh200-node-1": 4, "gh200-node-2": 4}
    assert one_job.sequence == ["gh200-node-1"] * 4 + ["gh200-node-2"] * 4


def test_packing_keeps_a_whole_node_for_a_four_gpu_job_where_spreading_blocks_it():
    packed = flame_cache()
    for i in range(4):
        place(gpu_pod(f"small-{i}", 1, job=f"team-b/small-{i}"), 1, packed)
    big = place(gpu_pod("big", 4, job="team-a/big"), 1, packed)
    assert big.nodes == {"gh200-node-2": 1}

    spread = flame_cache()  # what least-allocated spreading does with the same four pods
    for i, node in enumerate(["gh200-node-1", "gh200-node-2", "gh200-node-1", "gh200-node-2"]):
        spread.bind(f"small-{i}", node, 1)
    blocked = place(gpu_pod("big", 4, job="team-a/big"), 1, spread)
    assert blocked.unschedulable
    assert blocked.message == ("0/3 nodes are available: 1 node is not of flavor gh200 "
                               "(needs nvidia.com/gpu.product=NVIDIA-GH200-480GB), "
                               "2 node has 2 GPUs free, pod needs 4.")


def test_place_is_all_or_nothing_by_default():
    cache = flame_cache()
    r = place(gpu_pod("j", 3), 3, cache)  # two fit, the third does not
    assert r.unschedulable and r.nodes == {} and r.pod_uids == []
    assert filter_nodes(gpu_pod("q", 4), ["gh200-node-1", "gh200-node-2"], cache).passed == ["gh200-node-1", "gh200-node-2"]
    partial = place(gpu_pod("j", 3), 3, cache, all_or_nothing=False)
    assert partial.unschedulable and sum(partial.nodes.values()) == 2


# -- preemption veto -----------------------------------------------------------------

def test_veto_drops_a_node_whole_when_any_victim_may_not_go():
    proposed = {"n1": NodeVictims(("free-1", "free-2")), "n2": NodeVictims(("free-3", "guarded"), 1),
                "n3": NodeVictims(())}
    kept = veto(proposed, lambda p: p != "guarded")
    assert kept == {"n1": NodeVictims(("free-1", "free-2")), "n3": NodeVictims(())}


# -- Kubernetes objects --------------------------------------------------------------

def test_pod_requests_follow_kube_scheduler_arithmetic():
    spec = PodSpec.model_validate({
        "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2}, "requests": {"cpu": "500m"}}},
                       {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1", "memory": "1Gi"}}}],
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "4"}}},
                           {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
        "overhead": {"cpu": "50m"},
    })
    assert engine_pod_requests(spec) == {"nvidia.com/gpu": 3, "cpu": 4050, "memory": 1 << 30}


def test_node_from_kubernetes_object_and_a_pods_owner():
    info = node_info_from_dict({
        "metadata": {"name": "n", "labels": GH200},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "71500m", "memory": "480Gi"}},
    })
    assert info.gpus == 4 and info.allocatable["cpu"] == 71500 and info.unschedulable
    assert info.taints == (Taint("k", "", "NoSchedule"),)
    owned = ObjectMeta.model_validate({"namespace": "team-a", "ownerReferences": [
        {"kind": "Job", "name": "train", "uid": "u", "controller": True}]})
    assert controller_uid(owned) == "u"
    # a label is no ownership: only the controller ownerReference's uid is
    assert controller_uid(ObjectMeta.model_validate({"namespace": "ns", "labels": {"job-name": "j"}})) is None
    assert controller_uid(ObjectMeta.model_validate({"namespace": "ns", "ownerReferences": [
        {"kind": "Job", "name": "train", "uid": "not-controller"}]})) is None


def test_engine_flavor_check_and_placement_share_one_toleration_rule():
    """A ResourceFlavor's nodeTaints against a pod template's tolerations: the quota engine's
    flavor check and placement's node filter give the same verdict, from the same rules."""
    from gpuqueue.extender.quota.convert import flavor_spec, pod_set_from_template
    from gpuqueue.extender.quota.flavorassigner import FlavorAssigner
    from gpuqueue.api.core import PodTemplateSpec
    from gpuqueue.api.kueue import ResourceFlavor

    rf = ResourceFlavor.model_validate({"metadata": {"name": "gh200"}, "spec": {
        "nodeLabels": GH200, "nodeTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}})
    flavor = flavor_spec(rf)
    assigner = FlavorAssigner(None, None, {"gh200": flavor}, None)
    node = NodeInfo("gh200-node-1", GH200, flavor.node_taints, allocatable={"nvidia.com/gpu": 4})

    def template(tolerations):
        return PodTemplateSpec.model_validate({"spec": {"containers": [{"name": "c"}], "tolerations": tolerations}})

    for tolerations, ok in (([], False),
                            ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}], False),
                            ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], True),
                            ([{"operator": "Exists"}], True)):
        ps = pod_set_from_template("main", 1, template(tolerations))
        engine = assigner._check_flavor("gh200", ps)
        placed = filter_nodes(gpu_pod("p", 1, tolerations=ps.tolerations), [node.name], cache_of([node]))
        if ok:
            assert engine is None and placed.passed == [node.name]
        else:
            assert engine == "untolerated taint nvidia.com/gpu=present:NoSchedule in flavor gh200"
            assert placed.unresolvable == {
                node.name: "node has taint nvidia.com/gpu=present:NoSchedule that the pod does not tolerate"}
