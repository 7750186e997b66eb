"""The three PATCH flavours kube-apiserver applies: JSON merge patch (RFC 7386), strategic merge patch
(built-in kinds only; list merge keys from the 1.24 Go struct tags of the fields in use) and JSON patch
(RFC 6902, via the `jsonpatch` package)."""
from __future__ import annotations

import copy

import jsonpatch

from .status import bad_request, generic_invalid

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# patchMergeKey of the list fields that carry `patchStrategy:"merge"` in the 1.24 API types. Lists not
# named here (tolerations, containerStatuses, args, ...) are replaced wholesale, as Kubernetes does.
LIST_MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "volumeMounts": "mountPath", "env": "name", "ports": "containerPort",
    "imagePullSecrets": "name", "hostAliases": "ip", "podIPs": "ip",
    "conditions": "type", "addresses": "type", "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
}
# Primitive lists with patchStrategy merge (set union).
PRIMITIVE_MERGE_LISTS = {"finalizers"}


def strategic_merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    deletions = {k.split("/", 1)[1]: v for k, v in patch.items() if k.startswith("$deleteFromPrimitiveList/")}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys: ordering hints we do not need
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in LIST_MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, LIST_MERGE_KEYS[key])
        elif isinstance(value, list) and key in PRIMITIVE_MERGE_LISTS and isinstance(result.get(key), list):
            result[key] = result[key] + [v for v in value if v not in result[key]]
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    for key, removed in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [v for v in result[key] if v not in removed]
    return result


def _merge_list(current: list, patch: list, merge_key: str) -> list:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    result = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {merge_key}")
        idx = next((i for i, cur in enumerate(result)
                    if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
        elif idx is None:
            result.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            result[idx] = strategic_merge_patch(result[idx], item)
    return result


def json_patch(target: dict, operations) -> dict:
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        return jsonpatch.JsonPatch(operations).apply(target)
    except jsonpatch.JsonPatchTestFailed:
        raise generic_invalid()
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, IndexError, TypeError) as exc:
        # kube-apiserver wraps any failure to apply a JSON patch in the same generic 422.
        raise generic_invalid() from exc
