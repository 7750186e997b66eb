"""`gpuqueue simulate` takes every workload kind gpuqueue queues: read strictly with the field names
of the kind's published CRD, defaulted as the API server would, admitted with the pod sets, counts
and requests its integration reads; several pod sets are each reported with their flavors. An
unsupported kind is an invalid scenario (exit 2)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from tests.scenarios.sim import run, run_text
from tests.tools import crd_fields
from tests.workload_kinds import (DEPLOYMENT, JOBSET, LWS, MPIJOB, POD, PYTORCHJOB, RAYCLUSTER, RAYJOB, STATEFULSET,
                                  TORCH_RUNTIME, TRAINJOB)

QUOTA = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gh200}
spec: {nodeLabels: {nvidia.com/gpu.product: GH200}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {nvidia.com/gpu.product: H100}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gh200
      resources: [{name: cpu, nominalQuota: 100}, {name: memory, nominalQuota: 1Ti}, {name: nvidia.com/gpu, nominalQuota: 16}]
    - name: h100
      resources: [{name: cpu, nominalQuota: 100}, {name: memory, nominalQuota: 1Ti}, {name: nvidia.com/gpu, nominalQuota: 64}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-a, name: default}
spec: {clusterQueue: cq}
"""


def scenario(*docs: dict, head: str = QUOTA) -> str:
    return head + "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)


def cli(text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return subprocess.run([sys.executable, "-m", "gpuqueue.cli", "simulate", str(path), "--output", "json"],
                          capture_output=True, text=True, timeout=120)


# -- FLAME with other kinds -------------------------------------------------------------------------

def _shape(r):
    """Every admission and preemption: when, whom, where (flavors, nodes), why."""
    out = []
    for step in r.steps:
        for ev in step["events"]:
            if ev["kind"] in ("Admitted", "Preempted", "Finished"):
                out.append((step["time"], ev["kind"], ev["job"], ev.get("flavors"), ev.get("nodes"), ev.get("reason"),
                            ev.get("preemptor")))
    return out


def test_flame_with_pytorchjob_borrowers_and_jobset_reclaimers_is_flame():
    jobs = run_text(open("extender/simulate/examples/flame.yaml").read(), source="flame.yaml")
    kinds = run("flame-kinds.yaml")
    assert _shape(kinds) == _shape(jobs)
    assert kinds.final == jobs.final
    assert kinds.preempted_at(100.0) == [("team-c/c-4", "InCohortReclamation"), ("team-c/c-3", "InCohortReclamation")]
    # a PyTorchJob's pod set is its replica type: Kueue's message names it
    assert kinds.events("Pending", "team-c/c-4")[0]["message"] == (
        "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu in flavor gh200, "
        "1 more needed")


def test_one_jobset_of_two_pod_sets_reclaims_as_four_jobs_do():
    text = open("tests/scenarios/flame-kinds.yaml").read()
    head, events = text.split("events:\n", 1)
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"namespace": "team-a", "name": "a", "annotations": {"gpuqueue.io/runtime-seconds": "100"}},
              "spec": {"replicatedJobs": [
                  {"name": "driver", "template": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                      {"name": "d", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}},
                  {"name": "workers", "replicas": 3, "template": {"spec": {"template": {"spec": {
                      "restartPolicy": "Never", "containers": [
                          {"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}]}}
    r = run_text(head + "events:\n" + yaml.safe_dump([{"at": 100, "submit": jobset}], sort_keys=False))
    assert r.preempted_at(100.0) == [("team-c/c-4", "InCohortReclamation"), ("team-c/c-3", "InCohortReclamation")]
    (adm,) = r.admissions("team-a/a")
    assert adm["flavors"] == {"nvidia.com/gpu": "gh200"}
    assert adm["podSets"] == {"driver": {"count": 1, "flavors": {"nvidia.com/gpu": "gh200"}},
                              "workers": {"count": 3, "flavors": {"nvidia.com/gpu": "gh200"}}}
    assert adm["nodes"] == {"gh200-node-2": 4}
    assert r.usage_at(100.0)["group-a"] == {"gh200": {"nvidia.com/gpu": "4"}}


# -- every kind --------------------------------------------------------------------------------------

def _unsuspended(doc: dict) -> dict:
    """As a user writes it: the webhook is the one that suspends."""
    doc = copy.deepcopy(doc)
    spec = doc.get("spec", {})
    spec.pop("suspend", None)
    spec.get("runPolicy", {}).pop("suspend", None)
    return doc


@pytest.mark.parametrize("sample,related,keys,gpus", [
    (JOBSET, [], ["team-a/train"], "8"),
    (PYTORCHJOB, [], ["team-a/bert"], "8"),
    (MPIJOB, [], ["team-a/allreduce"], "8"),
    (TRAINJOB, [TORCH_RUNTIME], ["team-a/llama"], "16"),
    (RAYJOB, [], ["team-a/tune"], "16"),
    (RAYCLUSTER, [], ["team-a/serve"], "16"),
    (LWS, [], ["team-a/vllm-0", "team-a/vllm-1"], "26"),
    (DEPLOYMENT, [], ["team-a/infer-0", "team-a/infer-1", "team-a/infer-2"], "3"),
    (STATEFULSET, [], ["team-a/shard"], "4"),
    (POD, [], ["team-a/notebook"], "1"),
], ids=lambda v: v.kind if hasattr(v, "kind") else None)
def test_each_kind_is_admitted_with_what_its_integration_reads(sample, related, keys, gpus):
    r = run_text(scenario(*related, _unsuspended(sample.obj)))
    assert sorted(r.final["admitted"]) == keys
    total = {}
    for flavor, usage in r.final["usage"]["cq"].items():
        total[flavor] = usage.get("nvidia.com/gpu")
    assert sum(int(v) for v in total.values() if v) == int(gpus)


def test_a_multi_pod_set_workload_reports_each_pod_sets_flavor():
    job = _unsuspended(PYTORCHJOB.obj)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "H100"}
    (adm,) = run_text(scenario(job)).admissions("team-a/bert")
    assert adm["flavors"] == {"nvidia.com/gpu": "gh200,h100"}
    assert adm["podSets"] == {"master": {"count": 1, "flavors": {"nvidia.com/gpu": "h100"}},
                              "worker": {"count": 3, "flavors": {"nvidia.com/gpu": "gh200"}}}


def test_a_pod_group_is_admitted_once_all_its_pods_are_there():
    def pod(name, gpus):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "namespace": "team-a", "name": name, "labels": {"kueue.x-k8s.io/pod-group-name": "sweep"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "3"}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
    events = {"apiVersion": "gpuqueue.io/v1alpha1", "kind": "Scenario", "events": [
        {"at": 10, "submit": pod("sweep-b", 1)}, {"at": 20, "submit": pod("sweep-c", 4)}]}
    r = run_text(scenario(pod("sweep-a", 1), events))
    assert r.admitted_at(0.0) == [] and r.admitted_at(10.0) == []
    (adm,) = r.admissions("team-a/sweep")
    assert adm["time"] == 20.0 and sorted(p["count"] for p in adm["podSets"].values()) == [1, 2]
    assert r.final["usage"]["cq"]["gh200"]["nvidia.com/gpu"] == "6"


def test_the_crds_defaults_apply_as_the_api_server_would():
    cluster = _unsuspended(RAYCLUSTER.obj)
    del cluster["spec"]["workerGroupSpecs"][0]["replicas"]  # the CRD defaults it to 0 (and numOfHosts to 1)
    r = run_text(scenario(cluster))
    assert r.final["usage"]["cq"] == {"gh200": {"cpu": "2"}}  # the head alone


def test_a_kind_not_enabled_is_not_queued():
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
              "integrations": {"frameworks": ["batch/job", "kubeflow.org/pytorchjob"]}}
    r = run_text(scenario(config, _unsuspended(JOBSET.obj), _unsuspended(PYTORCHJOB.obj)))
    assert r.events("Ignored") == [{"kind": "Ignored", "job": "team-a/train", "time": 0.0, "message":
                                    "not managed by gpuqueue: integration jobset.x-k8s.io/jobset is not enabled "
                                    "(integrations.frameworks)"}]
    assert r.final["admitted"] == ["team-a/bert"]


# -- invalid scenarios: exit 2, one line --------------------------------------------------------------

@pytest.mark.parametrize("doc,error", [
    ({**JOBSET.obj, "spec": {**JOBSET.obj["spec"], "replicatedJob": []}},
     "document 5 (JobSet team-a/train): spec.replicatedJob: unknown field (did you mean replicatedJobs?)"),
    ({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "x"}, "spec": {}},
     "document 5 (TFJob x): kind: unknown kind 'TFJob'"),
    ({**PYTORCHJOB.obj, "apiVersion": "kubeflow.org/v2"},
     "document 5 (PyTorchJob team-a/bert): apiVersion: PyTorchJob must be kubeflow.org/v1, got 'kubeflow.org/v2'"),
    ({**MPIJOB.obj, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": -1, "template": MPIJOB.obj["spec"][
        "mpiReplicaSpecs"]["Worker"]["template"]}}}},
     "document 5 (MPIJob team-a/allreduce): spec.mpiReplicaSpecs[Worker].replicas: must be a non-negative integer, "
     "got -1"),
    (TRAINJOB.obj, "TrainJob team-a/llama: spec.runtimeRef: ClusterTrainingRuntime torch-distributed is never defined "
                   "in the scenario"),
    ({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
      "integrations": {"frameworks": ["batch/job", "kubeflow.org/tfjob"]}},
     'integrations.frameworks[1]: Unsupported value: "kubeflow.org/tfjob": supported values: "batch/job", '),
    ({**DEPLOYMENT.obj, "spec": {**DEPLOYMENT.obj["spec"], "replicas": 10**9}},
     "document 5 (Deployment team-a/infer): spec.replicas: 1000000000 Workloads (one per pod), more than the "
     "simulator's limit of 1000000"),
], ids=["unknown field", "unsupported kind", "wrong version", "bad count", "missing runtime", "bad framework",
        "a billion pods"])
def test_an_invalid_scenario_exits_2_naming_the_field(tmp_path, doc, error):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": "team-a", "name": "j"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
    proc = cli(scenario(doc, job), tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and error in proc.stderr, proc.stderr


def test_the_field_names_are_the_published_crds():
    """extender/simulate/crd_fields.json is generated from shared/fixtures/crds: regenerate it with
    `python -m tests.tools.crd_fields` when a CRD changes."""
    assert crd_fields.OUT.read_text() == crd_fields.render()
