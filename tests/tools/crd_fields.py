"""Regenerate extender/simulate/crd_fields.json: the field names (and CRD defaults) of each workload
kind's published CRD (shared/fixtures/crds beside the checkout, or $GPUQUEUE_SHARED), which
`gpuqueue simulate` reads strictly and defaults as the API server would. Pod templates inside a
CRD are left to the kubernetes_asyncio model (V1PodTemplateSpec), which knows every field
Kubernetes has; a restricted template (TrainJob's runtimePatches) keeps the CRD's own names.

    python -m tests.tools.crd_fields        # rewrites the file; tests/test_simulate_kinds.py checks it
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import shared_fixtures
from tests.standin import crds

OUT = Path(__file__).resolve().parents[2] / "extender" / "simulate" / "crd_fields.json"
# kind -> (CRD, the apiVersion documents use)
KINDS = {
    "JobSet": ("jobsets.jobset.x-k8s.io", "jobset.x-k8s.io/v1alpha2"),
    "PyTorchJob": ("pytorchjobs.kubeflow.org", "kubeflow.org/v1"),
    "MPIJob": ("mpijobs.kubeflow.org", "kubeflow.org/v2beta1"),
    "TrainJob": ("trainjobs.trainer.kubeflow.org", "trainer.kubeflow.org/v1alpha1"),
    "TrainingRuntime": ("trainingruntimes.trainer.kubeflow.org", "trainer.kubeflow.org/v1alpha1"),
    "ClusterTrainingRuntime": ("clustertrainingruntimes.trainer.kubeflow.org", "trainer.kubeflow.org/v1alpha1"),
    "RayJob": ("rayjobs.ray.io", "ray.io/v1"),
    "RayCluster": ("rayclusters.ray.io", "ray.io/v1"),
    "LeaderWorkerSet": ("leaderworkersets.leaderworkerset.x-k8s.io", "leaderworkerset.x-k8s.io/v1"),
}


def _is_pod_template(schema: dict) -> bool:
    props = schema.get("properties") or {}
    spec = (props.get("spec") or {}).get("properties") or {}
    return set(props) == {"metadata", "spec"} and "containers" in spec and "restartPolicy" in spec


def shape(schema: dict) -> Any:
    if schema.get("type") == "object" and _is_pod_template(schema):
        return {"k": "V1PodTemplateSpec"}
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        item = shape(schema["items"])
        return {"l": item} if item is not None else None
    if schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props:
            node: dict[str, Any] = {"o": {name: shape(sub) for name, sub in sorted(props.items())}}
            defaults = {name: sub["default"] for name, sub in sorted(props.items()) if "default" in sub}
            if defaults:
                node["d"] = defaults
            return node
        if isinstance(extra, dict):
            value = shape(extra)
            return {"m": value} if value is not None else None
        return None  # no properties: any contents
    return None


def generate() -> dict[str, Any]:
    out = {}
    for kind, (name, api_version) in KINDS.items():
        crd = crds.fixture(name)
        root = shape(crds.storage_schema(crd))
        fields = root["o"]
        fields.pop("apiVersion", None), fields.pop("kind", None), fields.pop("metadata", None)
        out[kind] = {"apiVersion": api_version, "namespaced": crd["spec"]["scope"] == "Namespaced", "shape": root}
    return out


def render() -> str:
    return json.dumps(generate(), sort_keys=True, separators=(",", ":")) + "\n"


if __name__ == "__main__":
    shared_fixtures.require_for_script("python -m tests.tools.crd_fields")
    OUT.write_text(render())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
