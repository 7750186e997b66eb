"""What the API server said, as one line a person can act on."""

from __future__ import annotations

import json


def api_error_line(exc: BaseException) -> str | None:
    """`the API server answered 403 Forbidden: <its message>` for an ApiException; None otherwise."""
    from kubernetes_asyncio.client.exceptions import ApiException

    if not isinstance(exc, ApiException):
        return None
    message = ""
    try:
        body = json.loads(exc.body) if exc.body else {}
        message = body.get("message", "") if isinstance(body, dict) else ""
    except (TypeError, ValueError):
        message = str(exc.body or "")
    text = f"the API server answered {exc.status} {exc.reason or ''}".rstrip()
    if message:
        text += f": {message}"
    return " ".join(text.split())
