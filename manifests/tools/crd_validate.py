"""Validate objects against the openAPIV3Schema of the CRDs in charts/gpuqueue/files/crds/, offline.

What kube-apiserver does with a structural schema, as far as JSON Schema can say it: types,
enums, patterns (the int-or-string quantity pattern included), limits, required fields, and
unknown fields refused (kubectl's default strict field validation) except under
x-kubernetes-preserve-unknown-fields. CEL rules (x-kubernetes-validations) are not evaluated.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import jsonschema
import yaml

from manifests.tools.gen_crds import CRD_DIR


@lru_cache(maxsize=None)
def load_crds() -> dict[str, dict]:
    """Kind -> CRD object, for every CRD gen_crds.py writes."""
    crds = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        crds[crd["spec"]["names"]["kind"]] = crd
    return crds


def openapi_schema(crd: dict, version: str = "v1beta2") -> dict:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd['metadata']['name']} does not serve {version}")


def to_json_schema(node: dict) -> dict:
    """An OpenAPI v3 CRD schema as a JSON Schema that refuses unknown fields."""
    node = copy.deepcopy(node)

    def walk(n: dict) -> None:
        if n.get("nullable"):
            n["type"] = [n["type"], "null"] if "type" in n else None
        if "properties" in n:
            for child in n["properties"].values():
                walk(child)
            if not n.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in n:
                n["additionalProperties"] = False
        if isinstance(n.get("additionalProperties"), dict):
            walk(n["additionalProperties"])
        if isinstance(n.get("items"), dict):
            walk(n["items"])

    walk(node)
    return node


@lru_cache(maxsize=None)
def _validator(kind: str) -> jsonschema.protocols.Validator:
    schema = to_json_schema(openapi_schema(load_crds()[kind]))
    return jsonschema.Draft7Validator(schema)


def errors(obj: dict) -> list[str]:
    """Problems with a kueue.x-k8s.io object, as 'path: message' strings; [] when it is valid."""
    kind = obj.get("kind")
    if kind not in load_crds():
        return [f"kind {kind!r} has no CRD in {CRD_DIR}"]
    found = []
    for err in sorted(_validator(kind).iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in err.absolute_path) or "<root>"
        found.append(f"{path}: {err.message}")
    return found
