"""Plain REST calls through kubernetes_asyncio's ApiClient: JSON dicts in and out, every write
paced by one token bucket and bounded in concurrency, so a deep queue cannot flood the API."""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import os
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
from yarl import URL
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuqueue.extender.controller.client.kinds import Kind
from gpuqueue.kube import TokenBucket

JSON = "application/json"
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")
MERGE_PATCH = "application/merge-patch+json"


# Which calls take a free connection first, set per task (a contextvar): the Lease and the writes
# that move quota (admissions, releases), then the rest (Workload creations, ...), and last those
# that only inform (pending messages, queue status, Events). A deep queue of the last delays
# neither an admission nor a renewal.
URGENT, ORDINARY, INFORM = 0, 1, 2
CALL_CLASS = contextvars.ContextVar("gpuqueue_call_class", default=ORDINARY)
# A name for the task's calls, so a waiting call can be moved up a class (Slots.promote) or
# withdrawn (Slots.withdraw): a Job's Workload creation moves up once the engine has admitted the
# Job, its pending message is dropped - both are chained before its admission.
CALL_TAG: contextvars.ContextVar[str | None] = contextvars.ContextVar("gpuqueue_call_tag", default=None)


class Slots:
    """At most n calls at once; a waiting call of a more urgent class goes first, FIFO within one.
    (Serving a class by the Jobs' priority instead was tried for issue 16: the low-priority Jobs'
    Workload creations then waited until their admission moved them up - Job -> Workload p99 192 s
    against 40 s FIFO - while the high-priority ones gained nothing, their wait being for quota.)"""

    def __init__(self, n: int) -> None:
        self._free = n
        # per class a heap of [arrival, future]; an entry moved or given up is left behind with its
        # future set to None (promote, withdraw: no search through thousands of waiting calls)
        self._waiting: tuple[list[list], ...] = tuple([] for _ in (URGENT, ORDINARY, INFORM))
        self._arrivals = itertools.count()
        self._ahead = itertools.count(-(1 << 62))  # arrivals of calls moved to the front of a class
        self._class_of: dict[asyncio.Future, int] = {}  # the futures waiting, and their class now
        self._queued = [0, 0, 0]  # how many wait, per class
        self._tagged: dict[str, tuple[int, list]] = {}  # tag -> (class, heap entry) of a waiting call

    def waiting(self, cls: int = INFORM) -> int:
        """Calls waiting for a slot in class `cls` or a more urgent one."""
        return sum(self._queued[:cls + 1])

    async def take(self, cls: int = ORDINARY, tag: str | None = None) -> None:
        if self._free > 0 and not self._class_of:
            self._free -= 1
            return
        fut = asyncio.get_running_loop().create_future()
        entry = [next(self._arrivals), fut]
        heapq.heappush(self._waiting[cls], entry)
        self._class_of[fut] = cls
        self._queued[cls] += 1
        if tag is not None:
            self._tagged[tag] = (cls, entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.give()  # handed a slot just as we were cancelled: pass it on
            else:
                self._queued[self._class_of.pop(fut)] -= 1  # its entry stays in the heap, skipped as done
            raise
        finally:
            if tag is not None and tag in self._tagged and self._tagged[tag][1][1] is fut:
                del self._tagged[tag]

    def promote(self, tag: str, cls: int = URGENT, front: bool = False) -> bool:
        """Move the waiting call tagged `tag` to the back of the more urgent class `cls` (to its
        front, after the calls moved there before, with `front`)."""
        found = self._tagged.get(tag)
        if found is None or found[0] <= cls or found[1][1] is None or found[1][1].done():
            return False
        old, entry = found
        moved = [next(self._ahead if front else self._arrivals), entry[1]]
        entry[1] = None
        heapq.heappush(self._waiting[cls], moved)
        self._class_of[moved[1]] = cls
        self._queued[old] -= 1
        self._queued[cls] += 1
        self._tagged[tag] = (cls, moved)
        return True

    def withdraw(self, tag: str) -> bool:
        """The call tagged `tag`, if still waiting for a slot, is given up: it raises
        CancelledError in its task, never having been sent."""
        found = self._tagged.get(tag)
        if found is None or found[1][1] is None or found[1][1].done():
            return False
        found[1][1].cancel()
        return True

    def give(self) -> None:
        for heap in self._waiting:
            while heap:
                fut = heapq.heappop(heap)[1]
                if fut is not None and not fut.done():
                    self._queued[self._class_of.pop(fut)] -= 1
                    fut.set_result(None)
                    return
        self._free += 1


class KubeApi:
    def __init__(self, api: client.ApiClient, *, qps: float = 100.0, burst: int = 200, concurrency: int = 16,
                 request_timeout: float = 30.0):
        self.api = api
        self.request_timeout = request_timeout
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self.limiter = TokenBucket(qps, burst)
        self._slots = Slots(concurrency)
        self.writes = 0

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = JSON,
                      query: list[tuple[str, str]] | None = None) -> dict:
        if method != "GET":
            await self.limiter.acquire()
            self.writes += 1
        await self._slots.take(CALL_CLASS.get(), CALL_TAG.get())
        try:
            status, reason, data, retry_after = await self._send(method, path, body, content_type, query or [])
        finally:
            self._slots.give()
        if not 200 <= status <= 299:
            exc = ApiException(status=status, reason=reason)
            exc.body = data.decode(errors="replace")
            exc.headers = {"Retry-After": retry_after} if retry_after is not None else {}
            raise exc
        return orjson.loads(data) if data else {}

    async def _send(self, method: str, path: str, body: Any, content_type: str,
                    query: list[tuple[str, str]]) -> tuple[int, str, bytes, str | None]:
        """One call on the ApiClient's own session, TLS, proxy and credentials (refreshed tokens
        included), with the body encoded by orjson: the generated client's recursive sanitizing and
        json.dumps were about a seventh of the controller's CPU (bench/kueue_realtime.py)."""
        api, rest = self.api, self.api.rest_client
        headers = {**api.default_headers, "Content-Type": content_type, "Accept": JSON}
        if api.cookie:
            headers["Cookie"] = api.cookie
        query = list(query)
        await api.update_params_for_auth(headers, query, ["BearerToken"])
        # Object names and namespaces are DNS labels and the query is urlencoded: already encoded,
        # so yarl need not parse and re-encode every URL (a few % of the controller's CPU).
        url = URL(api.configuration.host + path + ("?" + urlencode(query) if query else ""), encoded=True)
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.proxy_headers:
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        data = orjson.dumps(body) if body is not None else None
        async with rest.pool_manager.request(method, url, data=data, headers=headers, timeout=self._timeout,
                                             **extra) as resp:
            return resp.status, resp.reason or "", await resp.read(), resp.headers.get("Retry-After")

    def promote(self, tag: str, cls: int = URGENT, front: bool = False) -> bool:
        """A waiting call tagged `tag` (CALL_TAG) goes with class `cls` (the urgent ones) from now
        on: last of them, or first with `front`."""
        return self._slots.promote(tag, cls, front)

    def waiting(self, cls: int = INFORM) -> int:
        """Calls waiting for a connection in class `cls` or a more urgent one (writes behind)."""
        return self._slots.waiting(cls)

    def withdraw(self, tag: str) -> bool:
        """A call tagged `tag` (CALL_TAG) still waiting for a connection is not sent (its task
        gets CancelledError)."""
        return self._slots.withdraw(tag)

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
