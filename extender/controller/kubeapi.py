"""Plain REST calls through kubernetes_asyncio's ApiClient: JSON dicts in and out, every write
paced by one token bucket and bounded in concurrency, so a deep queue cannot flood the API."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from extender.controller.kinds import Kind
from extender.kube import TokenBucket

JSON = "application/json"
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")
MERGE_PATCH = "application/merge-patch+json"


class KubeApi:
    def __init__(self, api: client.ApiClient, *, qps: float = 100.0, burst: int = 200, concurrency: int = 16):
        self.api = api
        self.limiter = TokenBucket(qps, burst)
        self._slots = asyncio.Semaphore(concurrency)
        self.writes = 0

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = JSON,
                      query: list[tuple[str, str]] | None = None) -> dict:
        if method != "GET":
            await self.limiter.acquire()
            self.writes += 1
        async with self._slots:
            resp = await self.api.call_api(
                path, method, query_params=query or [], header_params={"Content-Type": content_type,
                                                                          "Accept": JSON},
                body=body, auth_settings=["BearerToken"], _preload_content=False, _request_timeout=30)
            data = await resp.read()
        if not 200 <= resp.status <= 299:  # not raised by the client when content is not preloaded
            exc = ApiException(status=resp.status, reason=resp.reason)
            exc.body = data.decode(errors="replace")
            raise exc
        return orjson.loads(data) if data else {}

    async def get(self, kind: Kind, namespace: str | None, name: str) -> dict:
        return await self.request("GET", kind.path(namespace, name))

    async def create(self, kind: Kind, namespace: str | None, body: dict) -> dict:
        return await self.request("POST", kind.path(namespace), body)

    async def replace(self, kind: Kind, body: dict, subresource: str | None = None) -> dict:
        meta = body["metadata"]
        return await self.request("PUT", kind.path(meta.get("namespace"), meta["name"], subresource), body)

    async def merge_patch(self, kind: Kind, namespace: str | None, name: str, patch: dict,
                          subresource: str | None = None) -> dict:
        return await self.request("PATCH", kind.path(namespace, name, subresource), patch, content_type=MERGE_PATCH)

    async def delete(self, kind: Kind, namespace: str | None, name: str, *, uid: str | None = None) -> dict | None:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            return await self.request("DELETE", kind.path(namespace, name), body)
        except ApiException as exc:
            if exc.status in (404, 409):  # gone already, or a newer object of that name
                return None
            raise


def skip_environment_lookups(api: client.ApiClient) -> bool:
    """kubernetes_asyncio opens its aiohttp session with trust_env=True, so aiohttp looks up the proxy
    environment variables and ~/.netrc in a worker thread before *every* request: two thread
    hand-offs, about half of the client's CPU per call (bench/kueue_realtime.py). With no proxy
    variable set they find nothing (a bearer token or client certificate is what authenticates to
    kube-apiserver, never .netrc), so they are turned off; with one set, nothing changes."""
    if any(os.environ.get(v) or os.environ.get(v.upper()) for v in _PROXY_VARIABLES):
        return False
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if session is None or not hasattr(session, "_trust_env"):
        return False
    session._trust_env = False
    return True


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiException) and exc.status in codes
