"""Kueue's TAS assignment algorithm (BestFit) on the nodes as they are, and the v1beta2 encoding of
a topologyAssignment: pure, table-style."""

from __future__ import annotations

import pytest

from gpuqueue.api.scheduling import Taint, Toleration
from gpuqueue.api.topology import HOSTNAME_LABEL, TopologyAssignment, from_v1beta2, to_v1beta2
from gpuqueue.extender.quota.tas.request import TopologyRequest, from_annotations
from gpuqueue.extender.quota.tas.snapshot import NodeCapacity, Placed, PodSetToPlace, TopologySnapshot

GPU = "nvidia.com/gpu"
LEVELS = ("block", "rack", HOSTNAME_LABEL)


def cluster(free: dict[str, int] | None = None, taints: dict[str, tuple] | None = None) -> list[NodeCapacity]:
    """2 blocks x 2 racks x 2 nodes x 4 GPUs; ``free`` overrides a node's free GPUs."""
    nodes = []
    for b in (1, 2):
        for r in (1, 2):
            for n in (1, 2):
                name = f"b{b}-r{r}-n{n}"
                nodes.append(NodeCapacity(name, {"block": f"b{b}", "rack": f"b{b}-r{r}", HOSTNAME_LABEL: name},
                                          {GPU: (free or {}).get(name, 4), "pods": 110}, (taints or {}).get(name, ())))
    return nodes


def place(nodes, count: int, gpus: int, levels=LEVELS, tolerations=(), **request) -> Placed | str:
    return TopologySnapshot("default", levels, nodes).place(
        PodSetToPlace("main", count, {GPU: gpus}, TopologyRequest(**request), tuple(tolerations)))


def hosts(result) -> dict[str, int]:
    assert isinstance(result, Placed), result
    return dict(result.per_node)


@pytest.mark.parametrize("name, count, gpus, request_, free, want", [
    ("required rack: no rack holds 4 x 4 GPUs", 4, 4, {"required": "rack"}, {},
     'topology "default" allows to fit only 2 out of 4 pod(s)'),
    ("required block: one block, whole", 4, 4, {"required": "block"}, {},
     {"b1-r1-n1": 1, "b1-r1-n2": 1, "b1-r2-n1": 1, "b1-r2-n2": 1}),
    ("required block: the tightest block that holds it", 2, 4, {"required": "block"},
     {"b1-r1-n1": 0, "b1-r1-n2": 0}, {"b1-r2-n1": 1, "b1-r2-n2": 1}),
    ("required rack: the tightest rack", 2, 4, {"required": "rack"}, {"b2-r2-n1": 0},
     {"b1-r1-n1": 1, "b1-r1-n2": 1}),
    ("preferred rack falls back to a block", 4, 4, {"preferred": "rack"}, {},
     {"b1-r1-n1": 1, "b1-r1-n2": 1, "b1-r2-n1": 1, "b1-r2-n2": 1}),
    ("preferred rack spreads over blocks at the top", 6, 4, {"preferred": "rack"},
     {"b1-r1-n1": 0, "b2-r1-n1": 0}, {"b1-r1-n2": 1, "b1-r2-n1": 1, "b1-r2-n2": 1, "b2-r1-n2": 1, "b2-r2-n1": 1,
                                      "b2-r2-n2": 1}),
    ("preferred: not even the whole topology", 9, 4, {"preferred": "rack"}, {},
     'topology "default" allows to fit only 8 out of 9 pod(s)'),
    ("unconstrained fills the fullest node first", 3, 2, {"unconstrained": True}, {},
     {"b1-r1-n1": 2, "b1-r1-n2": 1}),
    ("required hostname: a node that takes all", 2, 2, {"required": HOSTNAME_LABEL}, {"b1-r1-n1": 2},
     {"b1-r1-n2": 2}),
    ("no node has the GPUs", 1, 8, {"required": "block"}, {},
     'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 8; excluded: resource "nvidia.com/gpu": 8'),
    ("unknown level", 1, 1, {"required": "zone"}, {}, "no requested topology level: zone"),
    ("slices of 2 on one host each", 4, 2, {"required": "block", "slice_level": HOSTNAME_LABEL, "slice_size": 2},
     {"b1-r1-n1": 3}, {"b1-r2-n1": 2, "b1-r2-n2": 2}),
    ("slice size missing", 4, 2, {"required": "block", "slice_level": "rack"}, {},
     "slice topology requested, but slice size not provided"),
    ("slice level above the pod set's", 4, 2, {"required": "rack", "slice_level": "block", "slice_size": 2}, {},
     "podset slice topology block is above the podset topology rack"),
])
def test_assignment(name, count, gpus, request_, free, want):
    result = place(cluster(free), count, gpus, **request_)
    if isinstance(want, str):
        assert result == want
    else:
        assert hosts(result) == want


def test_fragmented_free_gpus_hold_no_4_gpu_pod():
    nodes = cluster({n.name: 2 for n in cluster()})
    assert place(nodes, 2, 4, required="block") == (
        'topology "default" doesn\'t allow to fit any of 2 pod(s). Total nodes: 8; excluded: resource "nvidia.com/gpu": 8')


def test_taints_and_cordons_exclude_nodes_unless_tolerated():
    nope = Taint("gpu", "broken", "NoSchedule")
    cordon = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
    taints = {n.name: (nope,) for n in cluster() if n.name.startswith("b1")}
    taints.update({n.name: (cordon,) for n in cluster() if n.name.startswith("b2-r1")})
    assert place(cluster(taints=taints), 4, 4, required="block") == (
        'topology "default" allows to fit only 2 out of 4 pod(s). Total nodes: 8; excluded: '
        'taint "gpu=broken:NoSchedule": 4, taint "node.kubernetes.io/unschedulable:NoSchedule": 2')
    tolerated = place(cluster(taints=taints), 4, 4, tolerations=[Toleration("gpu", "Equal", "broken")], required="block")
    assert set(hosts(tolerated)) == {"b1-r1-n1", "b1-r1-n2", "b1-r2-n1", "b1-r2-n2"}


def test_a_topology_without_hostname_counts_pods_per_node_and_assigns_by_its_lowest_level():
    # Kueue would sum a rack's free GPUs (2 + 2 = 4) and count a 4-GPU pod there; the pod fits no node
    nodes = cluster({"b1-r1-n1": 2, "b1-r1-n2": 2})
    result = place(nodes, 2, 4, levels=("block", "rack"), required="rack")
    assert isinstance(result, Placed)
    assert result.assignment == TopologyAssignment(("block", "rack"), ((("b1", "b1-r2"), 2),))


def test_nodes_without_a_level_label_are_not_in_the_topology():
    nodes = [n for n in cluster()] + [NodeCapacity("stray", {HOSTNAME_LABEL: "stray"}, {GPU: 8})]
    assert place(nodes, 1, 8, required="block") == (
        'topology "default" doesn\'t allow to fit any of 1 pod(s). Total nodes: 8; excluded: resource "nvidia.com/gpu": 8')


def test_pod_set_annotations_are_read_as_kueue_reads_them():
    assert from_annotations({}) is None
    assert from_annotations({"kueue.x-k8s.io/podset-required-topology": "rack"}) == TopologyRequest(required="rack")
    assert from_annotations({"kueue.x-k8s.io/podset-preferred-topology": "block"}) == TopologyRequest(preferred="block")
    assert from_annotations({"kueue.x-k8s.io/podset-unconstrained-topology": "true"}).is_unconstrained
    assert from_annotations({"kueue.x-k8s.io/podset-slice-required-topology": "rack",
                             "kueue.x-k8s.io/podset-slice-size": "2"}) == TopologyRequest(slice_level="rack", slice_size=2)


def test_v1beta2_encoding_round_trips_and_reads_prefixes():
    ta = TopologyAssignment(("block", "rack"), ((("b1", "r1"), 4), (("b1", "r2"), 2)))
    raw = to_v1beta2(ta)
    assert raw == {"levels": ["block", "rack"], "slices": [{"domainCount": 2, "valuesPerLevel": [
        {"universalValue": "b1"}, {"roots": ["r1", "r2"]}], "podCounts": [4, 2]}]}
    assert from_v1beta2(raw) == ta
    assert from_v1beta2({"levels": [HOSTNAME_LABEL], "slices": [{"domainCount": 2, "valuesPerLevel": [
        {"prefix": "node-", "suffix": ".gpu", "roots": ["1", "2"]}], "universalPodCount": 1}]}) == TopologyAssignment(
        (HOSTNAME_LABEL,), (((("node-1.gpu",), 1)), (("node-2.gpu",), 1)))
    with pytest.raises(ValueError, match=r"slices\[0\]: exactly one of podCounts"):
        from_v1beta2({"levels": ["rack"], "slices": [{"domainCount": 2, "valuesPerLevel": [{"roots": ["a", "b"]}],
                                                     "podCounts": [1]}]})
