"""The API server's release, as the pod integration needs it: scheduling gates are beta and on by
default from Kubernetes 1.27, and Kueue refuses its pod integration below (its message is
TOO_OLD_FOR_PODS). GET /version may be read by every user (system:public-info-viewer)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

log = logging.getLogger("gpuqueue.kube")

GATES_MINOR = 27
TOO_OLD_FOR_PODS = "pod integration only supported in Kubernetes 1.27 or newer"


def minor_of(version: Mapping[str, Any]) -> int | None:
    """The minor release of a /version answer ("27", or "27+" on some providers); None if unreadable."""
    digits = "".join(ch for ch in str(version.get("minor") or "") if ch.isdigit())
    return int(digits) if digits and str(version.get("major")) == "1" else None


def too_old_for_gates(version: Mapping[str, Any] | None) -> bool:
    """The server surely drops scheduling gates (an unreadable version counts as new enough)."""
    minor = minor_of(version) if version else None
    return minor is not None and minor < GATES_MINOR


async def server_version(api, timeout: float) -> Mapping[str, Any] | None:
    """GET /version; None when it cannot be read (said in a log line)."""
    import orjson
    from kubernetes_asyncio import client

    try:
        resp = await asyncio.wait_for(client.VersionApi(api).get_code(_preload_content=False), timeout)
    except Exception as exc:  # noqa: BLE001 - any failure: the version is unknown
        log.warning("cannot read the API server's version: %s", exc)
        return None
    try:
        return orjson.loads(await resp.read()) if resp.status == 200 else None
    finally:
        resp.release()
