"""The Kueue v1beta2 CRDs: current with their generator, structural, and validating what Kueue's do."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from manifests.tools import crd_validate, gen_crds
from tests.shared_fixtures import k8s_recording

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "manifests" / "examples"
KINDS = {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "Workload", "WorkloadPriorityClass", "Topology"}


def kueue_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("apiVersion") == "kueue.x-k8s.io/v1beta2"]


def cluster_queue(quota) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu-cluster-queue"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gpu-flavor", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": quota}]}]}
            ],
        },
    }


@pytest.mark.parametrize("plural", sorted(gen_crds.BUILDERS))
def test_committed_crd_is_what_the_generator_prints(plural):
    assert gen_crds.path_for(plural).read_text() == gen_crds.render(plural), "run: python manifests/tools/gen_crds.py"


def test_every_kind_gpuqueue_serves_has_a_crd():
    crds = crd_validate.load_crds()
    assert set(crds) == KINDS
    for crd in crds.values():
        assert crd["spec"]["group"] == "kueue.x-k8s.io"
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta2"]


# --- structural schema rules kube-apiserver enforces on apiextensions.k8s.io/v1 ---------------


def structural_problems(node: dict, path: str = "", in_int_or_string: bool = False) -> list[str]:
    problems = []
    if "type" not in node and not (node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields") or in_int_or_string):
        problems.append(f"{path or '<root>'}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    for key in ("anyOf", "allOf", "oneOf"):
        for i, sub in enumerate(node.get(key, [])):
            forbidden = {"description", "default", "additionalProperties", "nullable"} | {k for k in sub if k.startswith("x-kubernetes-")}
            if not node.get("x-kubernetes-int-or-string"):
                forbidden.add("type")
            for bad in forbidden & set(sub):
                problems.append(f"{path}.{key}[{i}]: {bad} not allowed inside {key}")
    if node.get("x-kubernetes-list-type") == "map":
        items = node["items"]
        if items.get("type") != "object":
            problems.append(f"{path}: map list items must be objects")
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in items.get("required", []) and "default" not in items["properties"].get(key, {}):
                problems.append(f"{path}: map key {key} must be required or defaulted")
    if "default" in node:
        try:
            jsonschema.Draft7Validator(crd_validate.to_json_schema(node)).validate(node["default"])
        except jsonschema.ValidationError as e:
            problems.append(f"{path}: default {node['default']!r} invalid: {e.message}")
    for rule in node.get("x-kubernetes-validations", []):
        if not rule.get("rule") or not rule.get("message"):
            problems.append(f"{path}: CEL rule without rule or message")
    for name, child in node.get("properties", {}).items():
        problems += structural_problems(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        if not isinstance(node["items"], dict):
            problems.append(f"{path}: items must be one schema")
        else:
            problems += structural_problems(node["items"], f"{path}[]")
    return problems


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schema_is_structural(kind):
    schema = crd_validate.openapi_schema(crd_validate.load_crds()[kind])
    assert schema["type"] == "object"
    assert schema["properties"]["metadata"] == {"type": "object"}, "root metadata may not be restricted beyond name"
    assert structural_problems(schema) == []


def test_structural_check_catches_a_bad_schema():
    bad = {"type": "object", "properties": {"a": {"description": "no type"}, "q": {"anyOf": [{"type": "string", "description": "x"}]}}}
    assert sorted(structural_problems(bad)) == sorted([
        ".a: no type",
        ".q: no type",
        ".q.anyOf[0]: description not allowed inside anyOf",
        ".q.anyOf[0]: type not allowed inside anyOf",
    ])


# --- names, status subresources, printer columns ------------------------------------------


def test_short_names_scope_and_status_subresources():
    crds = crd_validate.load_crds()
    expect = {
        "ResourceFlavor": ("Cluster", ["flavor", "flavors", "rf"], False),
        "Cohort": ("Cluster", None, True),
        "ClusterQueue": ("Cluster", ["cq"], True),
        "LocalQueue": ("Namespaced", ["queue", "queues", "lq"], True),
        "Workload": ("Namespaced", ["wl"], True),
        "WorkloadPriorityClass": ("Cluster", None, False),
    }
    for kind, (scope, short, status) in expect.items():
        spec = crds[kind]["spec"]
        assert spec["scope"] == scope, kind
        assert spec["names"].get("shortNames") == short, kind
        assert ("status" in spec["versions"][0].get("subresources", {})) is status, kind


# Kueue's v1beta2 additionalPrinterColumns (config/components/crd/bases, v0.18): name, type,
# jsonPath and priority, in order. priority 1 shows only with `kubectl get -o wide`. Kinds not
# listed have none. Descriptions are the project's own words and are not compared.
KUEUE_COLUMNS = {
    "ClusterQueue": [
        ("Cohort", "string", ".spec.cohortName", 0),
        ("Strategy", "string", ".spec.queueingStrategy", 1),
        ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
        ("Admitted Workloads", "integer", ".status.admittedWorkloads", 1),
    ],
    "LocalQueue": [
        ("ClusterQueue", "string", ".spec.clusterQueue", 0),
        ("Pending Workloads", "integer", ".status.pendingWorkloads", 0),
        ("Admitted Workloads", "integer", ".status.admittedWorkloads", 0),
    ],
    "Workload": [
        ("Queue", "string", ".spec.queueName", 0),
        ("Reserved in", "string", ".status.admission.clusterQueue", 0),
        ("Admitted", "string", ".status.conditions[?(@.type=='Admitted')].status", 0),
        ("Finished", "string", ".status.conditions[?(@.type=='Finished')].status", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
    ],
    "WorkloadPriorityClass": [("Value", "integer", ".value", 0)],
}


def columns(kind):
    version = crd_validate.load_crds()[kind]["spec"]["versions"][0]
    return [(c["name"], c["type"], c["jsonPath"], c.get("priority", 0)) for c in version.get("additionalPrinterColumns", [])]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_printer_columns_are_kueues(kind):
    assert columns(kind) == KUEUE_COLUMNS.get(kind, [])


def test_kubectl_get_clusterqueues_shows_admitted_workloads_only_wide():
    narrow = [name for name, _, _, priority in columns("ClusterQueue") if not priority]
    assert narrow == ["Cohort", "Pending Workloads"]


# --- Kueue's defaults and CEL rules are declared where Kueue has them ---------------------


def spec_props(kind):
    return crd_validate.openapi_schema(crd_validate.load_crds()[kind])["properties"]["spec"]["properties"]


def test_kueue_defaults():
    cq = spec_props("ClusterQueue")
    assert cq["queueingStrategy"]["default"] == "BestEffortFIFO"
    assert cq["stopPolicy"]["default"] == "None"
    assert cq["preemption"]["default"] == {}
    assert cq["preemption"]["properties"]["reclaimWithinCohort"]["default"] == "Never"
    assert cq["preemption"]["properties"]["withinClusterQueue"]["default"] == "Never"
    assert cq["preemption"]["properties"]["borrowWithinCohort"]["properties"]["policy"]["default"] == "Never"
    assert cq["flavorFungibility"]["properties"]["whenCanBorrow"]["default"] == "MayStopSearch"
    assert cq["flavorFungibility"]["properties"]["whenCanPreempt"]["default"] == "TryNextFlavor"
    assert cq["fairSharing"]["properties"]["weight"]["default"] == 1
    wl = spec_props("Workload")
    assert wl["active"]["default"] is True
    assert wl["podSets"]["items"]["properties"]["name"]["default"] == "main"
    assert wl["podSets"]["items"]["properties"]["count"]["default"] == 1


def test_cel_rules_where_kueue_has_them():
    def messages(node):
        return {r["message"] for r in node.get("x-kubernetes-validations", [])}

    cq_spec = crd_validate.openapi_schema(crd_validate.load_crds()["ClusterQueue"])["properties"]["spec"]
    assert "borrowingLimit must be nil when cohort is empty" in messages(cq_spec)
    group = cq_spec["properties"]["resourceGroups"]["items"]
    assert "flavors must have the same number of resources as the coveredResources" in messages(group)
    assert messages(spec_props("LocalQueue")["clusterQueue"]) == {"field is immutable"}
    wl = crd_validate.openapi_schema(crd_validate.load_crds()["Workload"])
    assert "queueName is immutable while workload quota reserved" in messages(wl)
    assert "supported toleration values: 'Equal'(default), 'Exists'" in messages(spec_props("ResourceFlavor")["tolerations"])


def test_condition_reason_may_not_be_empty():
    # Kueue writes an empty reason for "resource not covered" and its own CRD refuses it; ours too,
    # so the controller must always give a reason.
    cq = cluster_queue(8)
    cq["status"] = {"conditions": [{"type": "Active", "status": "True", "reason": "", "message": "", "lastTransitionTime": "2026-12-02T11:14:15Z"}]}
    assert any("reason" in e for e in crd_validate.errors(cq))


# --- the seeds' objects validate; bad ones do not ------------------------------------------


EXAMPLE_FILES = sorted(EXAMPLES.rglob("*.yaml")) + sorted((ROOT / "extender" / "simulate" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_objects_validate(path):
    docs = kueue_docs(path)
    for doc in docs:
        assert crd_validate.errors(doc) == [], f"{path}: {doc['kind']}/{doc['metadata']['name']}"


def test_examples_hold_the_seed_quota_and_the_flame_cohort():
    together = {(d["kind"], d["metadata"]["name"]) for d in kueue_docs(EXAMPLES / "together" / "kueue-quota.yaml")}
    assert together == {("ResourceFlavor", "gpu-flavor"), ("ClusterQueue", "gpu-cluster-queue"), ("LocalQueue", "gpu-queue")}
    flame = kueue_docs(EXAMPLES / "flame" / "quota.yaml")
    cohort = next(d for d in flame if d["kind"] == "Cohort")
    assert cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 2
    assert {d["spec"]["cohortName"] for d in flame if d["kind"] == "ClusterQueue"} == {"flame"}


def test_the_seed_quota_is_verbatim_from_the_guide():
    seed = Path("/work/shared/seeds/together-queue-gpu-jobs-with-kueue.txt")
    text = seed.read_text() if seed.exists() else None
    ours = (EXAMPLES / "together" / "kueue-quota.yaml").read_text()
    body = ours[ours.index("apiVersion:") :]
    if text is None:  # CI clone without shared/: the guide's numbers still have to be there
        assert "nominalQuota: 512Gi" in body and "nominalQuota: 8" in body
    else:
        assert body.strip() in text


def test_fixture_objects_from_a_real_apiserver_validate():
    review = json.loads(k8s_recording("admission", "validating-review-request.clusterqueue-create.json").read_text())
    assert crd_validate.errors(review["request"]["object"]) == []
    stored = json.loads(k8s_recording("api", "clusterqueue.get-after-status-patches.200.json").read_text())
    assert crd_validate.errors(stored) == []


@pytest.mark.parametrize("quota", [8, "8", "512Gi", "1.5", "100m", 0])
def test_quantities_accepted(quota):
    assert crd_validate.errors(cluster_queue(quota)) == []


@pytest.mark.parametrize("quota", ["abc", "8 GPUs", "", "1.2.3", True, None, [8]])
def test_bad_nominal_quota_rejected(quota):
    errs = crd_validate.errors(cluster_queue(quota))
    assert errs and errs[0].startswith("spec.resourceGroups.0.flavors.0.resources.0.nominalQuota")


def test_misspelled_or_invalid_fields_rejected():
    cq = cluster_queue(8)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuata"] = 8
    assert any("nominalQuata" in e for e in crd_validate.errors(cq))
    cq = cluster_queue(8)
    cq["spec"]["queueingStrategy"] = "FIFO"
    assert any(e.startswith("spec.queueingStrategy") for e in crd_validate.errors(cq))
    cq = cluster_queue(8)
    cq["spec"]["resourceGroups"][0]["coveredResources"] = []
    assert any(e.startswith("spec.resourceGroups.0.coveredResources") for e in crd_validate.errors(cq))
    cq = cluster_queue(8)
    cq["spec"]["resourceGroups"] = [copy.deepcopy(cq["spec"]["resourceGroups"][0]) for _ in range(17)]
    assert any(e.startswith("spec.resourceGroups") for e in crd_validate.errors(cq))
    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q"}, "spec": {"clusterQueue": "Not_A_Name"}}
    assert any(e.startswith("spec.clusterQueue") for e in crd_validate.errors(lq))


def test_workload_as_the_controller_writes_it_validates():
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-gpu-job-a-272f3", "namespace": "default"},
        "spec": {
            "queueName": "gpu-queue",
            "priority": 0,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "worker", "image": "x"}]}}}],
        },
        "status": {
            "admission": {
                "clusterQueue": "gpu-cluster-queue",
                "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "gpu-flavor"}, "resourceUsage": {"nvidia.com/gpu": "6"}}],
            },
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-flavor, 4 more needed",
                    "lastTransitionTime": "2026-12-02T11:14:15Z",
                }
            ],
        },
    }
    assert crd_validate.errors(wl) == []
    wl["spec"]["podSets"][0]["count"] = -1
    assert crd_validate.errors(wl) == ["spec.podSets.0.count: -1 is less than the minimum of 0"]
