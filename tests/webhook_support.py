"""Helpers shared by the webhook tests: fixtures loading and a strict JSONPatch applier."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

ADMISSION = Path(__file__).parent / "fixtures" / "k8s-1.24" / "admission"


def load_review(name: str) -> dict[str, Any]:
    return json.loads((ADMISSION / name).read_text())


class PatchError(Exception):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply RFC 6902 add/replace/remove like the API server does: the parent must exist."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        if not tokens:
            raise PatchError("whole-document ops are not used by gpuqueue")
        parent = doc
        for t in tokens[:-1]:
            if isinstance(parent, dict) and t in parent and parent[t] is not None:
                parent = parent[t]
            elif isinstance(parent, list) and t.isdigit() and int(t) < len(parent):
                parent = parent[int(t)]
            else:
                raise PatchError(f"{op['op']} operation does not apply: doc is missing path: {op['path']}")
        last = tokens[-1]
        if not isinstance(parent, dict):
            raise PatchError(f"unsupported parent for {op['path']}")
        if op["op"] == "add":
            parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            if last not in parent:
                raise PatchError(f"replace operation does not apply: doc is missing key: {op['path']}")
            parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if last not in parent:
                raise PatchError(f"remove operation does not apply: doc is missing key: {op['path']}")
            del parent[last]
        else:
            raise PatchError(f"unexpected op {op['op']}")
    return doc
