"""The simulator's pictures: the text grid's letters a reader can map, and `--plot`."""

from __future__ import annotations

import re
from pathlib import Path

from gpuqueue.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "extender" / "simulate" / "examples"

TWO_QUEUES = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: f}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: zeta-queue}
spec:
  namespaceSelector: {}
  resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: f, resources: [{name: nvidia.com/gpu, nominalQuota: 2}]}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ns, name: lq}
spec: {clusterQueue: zeta-queue}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ns, name: lq2}
spec: {clusterQueue: alpha-queue}
---
apiVersion: batch/v1
kind: Job
metadata: {namespace: ns, name: j, labels: {kueue.x-k8s.io/queue-name: lq}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]}}}
---
apiVersion: gpuqueue.io/v1alpha1
kind: Scenario
events:
- at: 10
  apply:
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: alpha-queue}
    spec:
      namespaceSelector: {}
      resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: f, resources: [{name: nvidia.com/gpu, nominalQuota: 1}]}]}]
- at: 10
  submit:
    apiVersion: batch/v1
    kind: Job
    metadata: {namespace: ns, name: k, labels: {kueue.x-k8s.io/queue-name: lq2}}
    spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]}}}
"""


def run_text(tmp_path, capsys, text: str, *args: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["simulate", str(path), *args]) == 0
    return capsys.readouterr().out


def test_letters_follow_the_names_of_all_the_scenarios_cluster_queues(tmp_path, capsys):
    out = run_text(tmp_path, capsys, TWO_QUEUES)
    # zeta-queue is B from the start, because alpha-queue (defined later, at t=10) sorts first
    first, second = out.split("\nt=10s\n")
    assert "│ B │ · │" in first
    assert "B = zeta-queue  · = idle" in first
    assert "A = alpha-queue  B = zeta-queue  · = idle" in second
    assert "│ A │ B │ · │" in second


def test_a_queue_is_never_drawn_by_the_last_character_of_its_name(tmp_path, capsys):
    out = run_text(tmp_path, capsys, (EXAMPLES / "together-quota.yaml").read_text())
    assert "│ A │ A │ A │ A │ A │ A │ · │ · │" in out  # gpu-job-a's 6 GPUs, not E for ...queue
    assert "A = gpu-cluster-queue  · = idle" in out


def test_plot_shows_each_queue_against_its_quota_over_the_until_span(tmp_path, capsys):
    svg = tmp_path / "flame.svg"
    assert main(["simulate", "--until", "300", "--plot", str(svg), "--output", "json"]) == 0
    capsys.readouterr()
    text = svg.read_text()
    for title in ("flavor gh200: nvidia.com/gpu in use, every ClusterQueue stacked",
                  "ClusterQueue group-a, flavor gh200: nominal quota 4",
                  "ClusterQueue group-b, flavor gh200: nominal quota 2",
                  "ClusterQueue group-c, flavor gh200: nominal quota 0; above it is borrowed",
                  "jobs pending, every ClusterQueue stacked"):
        assert title in text, title
    ticks = {int(t) for t in re.findall(r">(\d+)</text>", text)}
    assert 300 in ticks and 250 in ticks  # the axis runs to --until, past the last event at 200
    png = tmp_path / "flame.png"
    assert main(["simulate", "--plot", str(png), "--output", "json"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_of_a_scenario_without_cluster_queues(tmp_path, capsys):
    # the Job waits for a LocalQueue that does not exist: nothing to stack, still a picture
    scenario = tmp_path / "s.yaml"
    scenario.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {namespace: ns, name: j, labels: "
                        "{kueue.x-k8s.io/queue-name: lq}}\nspec: {template: {spec: {restartPolicy: Never, "
                        "containers: [{name: c, image: x}]}}}\n")
    svg = tmp_path / "s.svg"
    assert main(["simulate", str(scenario), "--output", "json", "--plot", str(svg)]) == 0
    assert "no job waits in a ClusterQueue" in svg.read_text()
