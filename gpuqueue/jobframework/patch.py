"""The RFC 6902 JSONPatch that turns an object into its edited copy, as the webhook answers it.

The integrations edit objects by returning a new copy (``suspend``, ``marked``, ``gated``); the
webhook answers with the difference. The API server applies the patch to the object as it
serialised it for the review, where an empty or null map is left out (Go's omitempty): adding a
key under such a map would fail ("doc is missing path"), so a map that is absent, null or empty
is added whole. Lists are replaced whole (an "add" of an existing member replaces it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def escape_json_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def json_patch(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """The ops turning ``before`` into ``after`` (both JSON objects at ``path``)."""
    ops: list[dict[str, Any]] = []
    for key, value in after.items():
        here = f"{path}/{escape_json_pointer(key)}"
        old = before.get(key)
        if old == value and key in before:
            continue
        if isinstance(value, Mapping) and isinstance(old, Mapping) and old:
            ops += json_patch(old, value, here)
        else:
            ops.append({"op": "add", "path": here, "value": value})
    for key in before:
        if key not in after:
            ops.append({"op": "remove", "path": f"{path}/{escape_json_pointer(key)}"})
    return ops
