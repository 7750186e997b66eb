"""`gpuqueue simulate` with Kueue's Topology Aware Scheduling: Topology objects, TAS flavors, nodes
with topology labels and pod sets that ask for a domain. The engine's own TAS admission decides
(its nodes are the simulator's), the output shows each admitted pod set's topology assignment, a
workload that does not fit pends with Kueue's message, and the pods land only in the assignment."""

from __future__ import annotations

import io
from pathlib import Path

from gpuqueue.extender.simulate.output import render
from gpuqueue.extender.simulate.scenario import load_scenario

import orjson

EXAMPLE = Path(__file__).resolve().parent.parent / "extender" / "simulate" / "examples" / "tas.yaml"

QUOTA = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: gh200, resources: [{name: nvidia.com/gpu, nominalQuota: 64}]}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ns, name: lq}
spec: {clusterQueue: cq}
"""


def flavor(topology: str | None = None, annotations: str = "") -> str:
    spec = f"{{topologyName: {topology}}}" if topology else "{}"
    meta = f"{{name: gh200{', annotations: ' + annotations if annotations else ''}}}"
    return f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {meta}\nspec: {spec}\n"


def topology(name: str, *levels: str) -> str:
    items = ", ".join(f"{{nodeLabel: {lv}}}" for lv in levels)
    return f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {{name: {name}}}\nspec: {{levels: [{items}]}}\n"


def node(name: str, gpus: int, rack: str | None = None, hostname: bool = True) -> str:
    labels = {"kubernetes.io/hostname": name} if hostname else {}
    if rack:
        labels["example.com/rack"] = rack
    lbl = ", ".join(f"{k}: {v}" for k, v in labels.items())
    return (f"apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{lbl}}}}}\n"
            f"status: {{allocatable: {{nvidia.com/gpu: \"{gpus}\"}}}}\n")


def job(name: str, pods: int, gpus: int, annotation: str = "") -> str:
    ann = f"metadata: {{annotations: {{{annotation}}}}}, " if annotation else ""
    return (f"apiVersion: batch/v1\nkind: Job\nmetadata: {{namespace: ns, name: {name}, labels: {{kueue.x-k8s.io/queue-name: lq}}}}\n"
            f"spec: {{parallelism: {pods}, template: {{{ann}spec: {{restartPolicy: Never, containers: "
            f"[{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]}}}}}}\n")


def run(*docs: str, mode: str = "json") -> list[dict] | str:
    out = io.StringIO()
    render(load_scenario("---\n".join(docs), "t.yaml"), mode, None, None, out)
    return out.getvalue() if mode == "text" else [orjson.loads(ln) for ln in out.getvalue().splitlines()]


def events(lines: list[dict], kind: str) -> dict[str, dict]:
    return {e["job"]: e for s in lines if "events" in s for e in s["events"] if e["kind"] == kind}


def test_the_issues_cluster_a_rack_job_waits_with_kueues_message_and_a_block_job_gets_one_block():
    lines = run(EXAMPLE.read_text())
    admitted = events(lines, "Admitted")
    block = admitted["research/llm-block"]
    ta = block["topologyAssignment"]["main"]
    assert ta["levels"] == ["kubernetes.io/hostname"]
    hosts = [d["values"][0] for d in ta["domains"]]
    assert sum(d["count"] for d in ta["domains"]) == 4
    assert len({h.split("-")[0] for h in hosts}) == 1  # one block
    assert block["nodes"] == {d["values"][0]: d["count"] for d in ta["domains"]}  # the pods went there
    pending = events(lines, "Pending")["research/llm-rack"]
    assert pending["message"].startswith('couldn\'t assign flavors to pod set main: topology "gh200-pods" '
                                         "allows to fit only 2 out of 4 pod(s)")
    assert "research/llm-rack" not in admitted


def test_a_pod_lands_only_in_its_assigned_domain_even_where_the_extender_would_pack_it_elsewhere():
    # Levels without the hostname: the assignment names a rack. r1-a sorts first and has room for
    # one pod; only rack r2 holds both, so both pods must go there.
    lines = run(topology("racks", "example.com/rack"), flavor("racks"), QUOTA,
                node("r1-a", 4, "r1"), node("r2-a", 4, "r2"), node("r2-b", 4, "r2"),
                job("pair", 2, 4, "kueue.x-k8s.io/podset-required-topology: example.com/rack"))
    ev = events(lines, "Admitted")["ns/pair"]
    assert ev["topologyAssignment"] == {"main": {"levels": ["example.com/rack"], "domains": [{"values": ["r2"], "count": 2}]}}
    assert ev["nodes"] == {"r2-a": 1, "r2-b": 1}


def test_a_node_added_later_lets_a_waiting_tas_workload_in():
    scenario = "\n".join([
        "apiVersion: gpuqueue.io/v1alpha1", "kind: Scenario", "events:", "- at: 30", "  apply:",
        *("    " + ln for ln in node("n2", 4, "r1").splitlines())])
    lines = run(topology("t", "example.com/rack", "kubernetes.io/hostname"), flavor("t"), QUOTA,
                node("n1", 4, "r1"),
                job("two", 2, 4, "kueue.x-k8s.io/podset-required-topology: example.com/rack"), scenario)
    assert lines[0]["events"] == [{"kind": "Pending", "job": "ns/two", "clusterQueue": "cq",
                                   "message": 'couldn\'t assign flavors to pod set main: topology "t" allows to fit '
                                              'only 1 out of 2 pod(s)'}]
    assert lines[1]["time"] == 30.0
    assert lines[1]["events"][0]["topologyAssignment"]["main"]["domains"] == [
        {"values": ["n1"], "count": 1}, {"values": ["n2"], "count": 1}]


def test_a_topology_applied_after_its_flavor_is_read_by_the_flavor():
    scenario = "\n".join(["apiVersion: gpuqueue.io/v1alpha1", "kind: Scenario", "events:", "- at: 5", "  apply:",
                          *("    " + ln for ln in topology("late", "kubernetes.io/hostname").splitlines())])
    lines = run(flavor("late"), QUOTA, node("n1", 8), job("j", 2, 4), scenario)
    assert events(lines[:1], "Pending")["ns/j"]["message"] == \
        'couldn\'t assign flavors to pod set main: topology "late" doesn\'t exist'
    assert lines[1]["time"] == 5.0 and events(lines[1:2], "Admitted")["ns/j"]["topologyAssignment"]["main"]["domains"] \
        == [{"values": ["n1"], "count": 2}]


def test_a_placement_aware_flavor_keeps_the_fragmented_job_pending_in_the_simulator_too():
    nodes = [node(f"n{i}", 4) for i in range(4)]
    fillers = [job(f"fill-{i}", 1, 3) for i in range(4)]  # 3 of each node's 4 GPUs: 1+1+1+1 free
    aware = run(flavor(annotations="{gpuqueue.io/placement-aware: \"true\"}"), QUOTA, *nodes, *fillers, job("big", 2, 2))
    pending = events(aware, "Pending")["ns/big"]["message"]
    assert pending == ('couldn\'t assign flavors to pod set main: the free capacity of flavor "gh200" doesn\'t hold any '
                       'of 2 pod(s) now. Total nodes: 4; excluded: resource "nvidia.com/gpu": 4')
    plain = run(flavor(), QUOTA, *nodes, *fillers, job("big", 2, 2))
    assert "ns/big" in events(plain, "Admitted") and "ns/big" in events(plain, "Unschedulable")


def test_a_topology_without_nodes_fits_nothing():
    lines = run(topology("t", "kubernetes.io/hostname"), flavor("t"), QUOTA, job("j", 1, 1))
    assert lines[-1]["final"]["pending"] == [
        {"job": "ns/j", "message": "couldn't assign flavors to pod set main: no topology domains at level: "
                                   "kubernetes.io/hostname"}]


def test_the_text_output_shows_the_assignment_under_the_admission():
    text = run(EXAMPLE.read_text(), mode="text")
    assert ("  Admitted     research/llm-block in training (nvidia.com/gpu: gh200) on b1-r1-n1×1, b1-r1-n2×1, "
            "b1-r2-n1×1, b1-r2-n2×1\n"
            "               topology of main (kubernetes.io/hostname): b1-r1-n1×1, b1-r1-n2×1, b1-r2-n1×1, b1-r2-n2×1\n") in text
