"""An in-process Kubernetes API server stand-in: real HTTP on 127.0.0.1 (aiohttp), the REST and watch
protocol of kube-apiserver 1.24 for the kinds gpuqueue uses (see docs/apiserver-standin.md).

    async with ApiServer() as api:
        config = api.client_configuration()       # kubernetes_asyncio.client.Configuration
        ...
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Callable

import orjson
from aiohttp import web

from . import resources as R
from . import managedfields
from . import status as S
from .auth import Authn, subject_access_review
from .costs import MUTATING, CostedServer, CostModel, verb_of
from .faults import EXEMPT_HEADER, Faults
from .registry import CURRENT_USER, Cluster, Write
from .resources import ResourceType

log = logging.getLogger(__name__)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_JSON = "application/json"


def _dumps(body, sort: bool) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS if sort else 0) + b"\n"


def _json_response(code: int, body, *, sort: bool = False) -> web.Response:
    return web.Response(status=code, body=_dumps(body, sort), content_type=_JSON,
                        headers={"Cache-Control": "no-cache, private"})


def _too_many_requests(retry_after: int = 1) -> web.Response:
    """kube-apiserver 1.24's 429 from max-in-flight and from priority and fairness (filters.tooManyRequests):
    plain text, a fixed Retry-After of one second."""
    return web.Response(status=429, text="Too many requests, please try again later.\n", content_type="text/plain",
                        charset="utf-8", headers={"Cache-Control": "no-cache, private", "Retry-After": str(retry_after),
                                                  "X-Content-Type-Options": "nosniff"})


def _error_response(err: S.ApiError) -> web.Response:
    if err.text is not None:
        return web.Response(status=err.code, text=err.text, content_type="text/plain", charset="utf-8",
                            headers={"Cache-Control": "no-cache, private", "X-Content-Type-Options": "nosniff"})
    return _json_response(err.code, err.body)


class _Route:
    def __init__(self, rt: ResourceType, namespace: str | None, name: str | None, subresource: str | None):
        self.rt, self.namespace, self.name, self.subresource = rt, namespace, name, subresource


def _route(path: str, by_path: dict) -> _Route:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise S.page_not_found()
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        rt = by_path.get((group, version, rest[2]))
        if rt is not None and rt.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest:
        raise S.page_not_found()
    rt = by_path.get((group, version, rest[0]))
    if rt is None or (rt.namespaced and namespace is None and len(rest) > 1) or len(rest) > 3:
        raise S.page_not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and (sub != "status" or not rt.status_subresource):
        raise S.page_not_found()
    return _Route(rt, namespace, name, sub)


class _Watch:
    """One open watch stream."""

    def __init__(self, request: web.Request, rt: ResourceType):
        self.request, self.rt = request, rt
        self.bookmark_now = asyncio.Event()
        self.dropped = False


class ApiServer:
    def __init__(self, *, history_size: int = 1000, bookmark_interval: float = 60.0,
                 pod_deletion_delay: float | None = 0.0, job_controller: bool = False,
                 namespaces: tuple[str, ...] = SYSTEM_NAMESPACES, kubernetes_minor: int = 24,
                 cost_model: CostModel | None = None, managed_fields: bool = False):
        """`kubernetes_minor`: which release's Job update rules to apply (24 by default, the
        recordings'; see rules.job_update_errors for what later releases let change)."""
        self.cluster = Cluster(history_size=history_size, pod_deletion_delay=pod_deletion_delay,
                               kubernetes_minor=kubernetes_minor, managed_fields=managed_fields)
        self.faults = Faults()
        self.bookmark_interval = bookmark_interval
        self.requests: list[tuple[str, str]] = []  # (method, path?query) of every request, for assertions
        self.internal_errors: list[BaseException] = []
        self.responses: collections.Counter[tuple[str, int]] = collections.Counter()  # (method, status) -> count
        # "METHOD resource[/subresource]" (+ " (list)", or "WATCH resource") -> [requests, bytes in, bytes out]
        self.traffic: dict[str, list[int]] = {}
        # What a real server's answers cost (tests/standin/costs.py); None: answers at once.
        self.costs = CostedServer(cost_model) if cost_model is not None else None
        self._watches: set[_Watch] = set()
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.port = 0
        for ns in namespaces:
            self.cluster.create(R.NAMESPACES, None, {"metadata": {"name": ns}})
        self.authn = Authn()  # the tokens TokenReview knows, and who a proxied request's caller is
        self.aggregator = None
        self.job_controller = None
        if job_controller:
            from .jobcontroller import JobController
            self.job_controller = JobController(self.cluster)

    def version(self) -> dict:
        """GET /version as kube-apiserver answers it (the recorded 1.24 reports v1.24.0+0)."""
        minor = self.cluster.kubernetes_minor
        return {"major": "1", "minor": str(minor), "gitVersion": f"v1.{minor}.0+0", "gitCommit": "", "gitTreeState": "clean",
                "buildDate": "2022-05-03T13:36:49Z", "goVersion": "go1.18.1", "compiler": "gc", "platform": "linux/amd64"}

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sock = site._server.sockets[0]  # the bound port when port=0
        self.port = sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        if self.job_controller is not None:
            self.job_controller.start()
        return self.url

    async def stop(self) -> None:
        """Close the port and every connection; the store stays, so `start(port=api.port)`
        brings the same cluster back (an API server outage)."""
        if self.job_controller is not None:
            await self.job_controller.stop()
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "ApiServer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def client_configuration(self):
        from kubernetes_asyncio.client import Configuration
        config = Configuration(host=self.url)
        return config

    # --- test hooks ----------------------------------------------------------------------------------

    def install_crds(self, *names: str) -> None:
        """Create the published CRDs `names` (`plural.group`, shared/fixtures/crds), as
        `kubectl create -f` would: their kinds are served from then on."""
        from . import crds
        for name in names:
            self.cluster.create(R.CUSTOM_RESOURCE_DEFINITIONS, None, crds.fixture(name), owned=True)

    def enable_aggregation(self):
        """Proxy requests for APIServices that name a Service (kube-aggregator); returns the
        Aggregator, whose `endpoints` map a Service port to where it listens."""
        if self.aggregator is None:
            from .aggregator import Aggregator
            self.aggregator = Aggregator(self.cluster, self.authn)
        return self.aggregator

    def observe(self, fn: Callable[[Write], None]) -> None:
        """Call fn(write) after every committed write (clients', the GC's, the job controller's)."""
        self.cluster.observers.append(fn)

    @property
    def observer_errors(self) -> list[BaseException]:
        return self.cluster.observer_errors

    def drop_watches(self, resource: ResourceType | None = None) -> int:
        """Cut open watch connections mid-stream (no terminating chunk), as a network failure would."""
        dropped = 0
        for w in list(self._watches):
            if resource is None or w.rt.storage_key == resource.storage_key:
                w.dropped = True
                transport = w.request.transport
                if transport is not None:
                    transport.abort()
                w.bookmark_now.set()
                dropped += 1
        return dropped

    def compact(self, resource: ResourceType | None = None) -> None:
        """Forget the watch history: watches from any older resourceVersion now get 410 Expired."""
        self.cluster.store.compact(resource.storage_key if resource else None)

    def send_bookmarks(self) -> None:
        for w in self._watches:
            w.bookmark_now.set()

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    # --- HTTP ----------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        resp = await self._answer(request)
        self.responses[(request.method, resp.status)] += 1
        if not isinstance(resp, web.Response):
            return resp  # a watch counts its bytes as it sends them
        by_path = self.cluster.by_path
        counts = self._traffic(f"{request.method} {_what(request.path, by_path)}"
                               + (" (list)" if request.method == "GET" and _is_collection(request.path, by_path)
                                  else ""))
        counts[0] += 1
        counts[1] += request.content_length or 0
        counts[2] += len(resp.body or b"")
        return resp

    def _traffic(self, key: str) -> list[int]:
        counts = self.traffic.get(key)
        if counts is None:
            counts = self.traffic[key] = [0, 0, 0]
        return counts

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        CURRENT_USER.set(request.headers.get("User-Agent"))  # this request's task only
        if request.method == "GET" and request.path.rstrip("/") == "/version":
            return web.json_response(self.version())
        q = request.query
        is_watch = _true(q.get("watch"))
        fault = None if EXEMPT_HEADER in request.headers else self.faults.take(request.method, request.path,
                                                                                 is_watch)
        try:
            if fault is not None:
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.hold is not None:
                    await fault.hold.wait()
                    if request.transport is None or request.transport.is_closing():
                        return web.Response(status=499)  # the client is gone: never handled
                if fault.status == 429 and fault.retry_after is not None:
                    return _too_many_requests(fault.retry_after)
                if fault.status is not None:
                    return _error_response(self._fault_error(fault.status, request.path))
        except Exception as exc:  # noqa: BLE001 - a stand-in bug must show up in the test, not kill the server
            return self._internal(request, exc)
        if self.costs is not None and not is_watch:
            resp = await self._costed(request, q)
        else:
            resp = await self._dispatch(request, q, is_watch, fault)
        if fault is not None and fault.after and not is_watch:
            await asyncio.sleep(fault.after)
        return resp

    async def _costed(self, request: web.Request, q) -> web.StreamResponse:
        """A seat, the request's CPU and etcd's (costs.py), then the answer; a stored write's watch
        events, or a write that changed nothing, priced after it."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        verb, resource, listed, storage_key = "unknown", "unknown", 0, ""
        try:
            route = _route(request.path, self.cluster.by_path)
            verb = verb_of(request.method, route.name is not None)
            resource = route.rt.group_resource + (f"/{route.subresource}" if route.subresource else "")
            storage_key = route.rt.storage_key
            if verb == "list":
                listed = len(self.cluster.store.kind(storage_key))
        except S.ApiError:
            pass
        costs = self.costs
        stats = costs.stats(f"{verb} {resource}")
        ticket, _ = await costs.admit(verb, request.headers)
        if ticket is None:
            stats.rejected += 1
            return _too_many_requests()
        try:
            if self.aggregator is not None:
                apiservice = self.aggregator.apiservice_for(request.path)
                if apiservice is not None:
                    return await self.aggregator.proxy(request, apiservice)
            stats.queued += loop.time() - start
            cost = costs.model.cost(verb, resource, listed, request.content_type if verb == "patch" else "")
            stats.cpu += cost.cpu
            stats.etcd += cost.etcd
            await costs.serve(cost)
            writes = verb in MUTATING and storage_key
            if writes:
                try:  # the body before the handler: then nothing else runs between rv0 and its end
                    await request.read()
                except ConnectionResetError:
                    return web.Response(status=499)
            rv0 = self.cluster.store.rv
            resp = await self._dispatch(request, q, False, None)
            if writes and resp.status < 300:
                await costs.stored(cost, stats, self.cluster.store.rv != rv0,
                                   len(self.cluster.store.watchers.get(storage_key, ())))
        finally:
            costs.release(ticket)
        stats.requests += 1
        stats.seconds += loop.time() - start
        return resp

    def _internal(self, request: web.Request, exc: BaseException) -> web.Response:
        log.exception("API server stand-in failed on %s %s", request.method, request.path_qs)
        self.internal_errors.append(exc)
        return _error_response(S.internal_error(f"{type(exc).__name__}: {exc}"))

    async def _dispatch(self, request: web.Request, q, is_watch: bool, fault) -> web.StreamResponse:
        if self.cluster.managed_fields and request.method != "GET":
            managedfields.MANAGER.set(managedfields.manager_from(request.headers.get("User-Agent"),
                                                                 q.get("fieldManager")))
        try:
            if self.aggregator is not None:
                apiservice = self.aggregator.apiservice_for(request.path)
                if apiservice is not None:
                    return await self.aggregator.proxy(request, apiservice)
            route = _route(request.path, self.cluster.by_path)
            if route.rt.create_only:
                if request.method != "POST" or route.name is not None:
                    raise S.method_not_allowed()
                return self._reply(route.rt, 201, self._review(route.rt, await self._body(request)))
            if request.method == "GET":
                if route.name is None and is_watch:
                    return await self._watch(request, route, fault)
                if route.name is None:
                    return self._list(route, q)
                return self._reply(route.rt, 200, self.cluster.get(route.rt, route.namespace, route.name))
            if request.method == "POST" and route.name is None:
                body = await self._body(request)
                return self._reply(route.rt, 201, self.cluster.create(route.rt, route.namespace, body,
                                                                     dry_run=_dry_run(q), owned=True))
            if request.method == "PUT" and route.name:
                body = await self._body(request)
                return self._reply(route.rt, 200, self.cluster.update(
                    route.rt, route.namespace, route.name, body, subresource=route.subresource, dry_run=_dry_run(q),
                    owned=True))
            if request.method == "PATCH" and route.name:
                body = await self._body(request)
                return self._reply(route.rt, 200, self.cluster.patch(
                    route.rt, route.namespace, route.name, request.content_type, body,
                    subresource=route.subresource, dry_run=_dry_run(q)))
            if request.method == "DELETE" and route.name and route.subresource is None:
                options = await self._body(request, optional=True) or {}
                return self._reply(route.rt, 200, self._delete(route, q, options))
            raise S.method_not_allowed()
        except S.ApiError as err:
            return _error_response(err)
        except ConnectionResetError:
            # the client went away before its body was read (with a cost model, while it waited to be
            # served): nothing to answer, and no fault of the server's
            return web.Response(status=499)
        except Exception as exc:  # noqa: BLE001 - a stand-in bug must show up in the test, not kill the server
            return self._internal(request, exc)

    def _review(self, rt: ResourceType, body) -> dict:
        if not isinstance(body, dict):
            raise S.bad_request(f"the body of the request could not be decoded as a {rt.kind}")
        if rt is R.TOKEN_REVIEWS:
            return self.authn.token_review(body)
        return subject_access_review(self.cluster.store, body)

    def _fault_error(self, code: int, path: str) -> S.ApiError:
        try:
            route = _route(path, self.cluster.by_path)
            rt, name = route.rt, route.name or ""
        except S.ApiError:
            rt, name = None, ""
        if code == 409 and rt is not None:
            return S.conflict(rt, name)
        if code == 404 and rt is not None:
            return S.not_found(rt, name)
        if code == 410:
            return S.expired("The resourceVersion for the provided watch is too old.")
        if code == 429:
            return S.ApiError(429, S.status_body(429, "TooManyRequests", "the server has received too many "
                                                 "requests and has asked us to try again later", {}))
        if code == 500:
            return S.internal_error("injected fault")
        return S.ApiError(code, S.status_body(code, "", f"injected fault {code}"))

    async def _body(self, request: web.Request, optional: bool = False):
        raw = await request.read()
        if not raw:
            if optional:
                return None
            raise S.bad_request("the request body is empty")
        if request.content_type == "application/apply-patch+yaml":
            raise S.unsupported_media_type(request.content_type)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise S.bad_request(f"the request body is not valid JSON: {exc}")

    def _reply(self, rt: ResourceType, code: int, obj: dict) -> web.Response:
        return _json_response(code, obj, sort=rt.custom)

    def _list(self, route: _Route, q) -> web.Response:
        limit = q.get("limit")
        try:
            limit_n = int(limit) if limit else None
        except ValueError:
            raise S.bad_request(f'invalid limit: "{limit}"')
        body = self.cluster.list(route.rt, route.namespace, label_selector=q.get("labelSelector"),
                                 field_selector=q.get("fieldSelector"), limit=limit_n,
                                 continue_token=q.get("continue"), resource_version=q.get("resourceVersion"),
                                 resource_version_match=q.get("resourceVersionMatch"))
        return _json_response(200, body, sort=route.rt.custom)

    def _delete(self, route: _Route, q, options) -> dict:
        if not isinstance(options, dict):
            raise S.bad_request("the body of the request could not be decoded as DeleteOptions")
        propagation = q.get("propagationPolicy") or options.get("propagationPolicy")
        orphan = q.get("orphanDependents") or options.get("orphanDependents")
        if propagation is None and orphan is not None:
            propagation = "Orphan" if str(orphan).lower() == "true" else "Background"
        grace = q.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        try:
            grace_n = int(grace) if grace is not None else None
        except ValueError:
            raise S.bad_request(f'invalid gracePeriodSeconds: "{grace}"')
        dry_run = _dry_run(q) or options.get("dryRun") == ["All"]
        return self.cluster.delete(route.rt, route.namespace, route.name, propagation=propagation,
                                   grace_period=grace_n, preconditions=options.get("preconditions"),
                                   dry_run=dry_run)

    # --- watch ---------------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, route: _Route, fault=None) -> web.StreamResponse:
        q = request.query
        rt = route.rt
        match = self.cluster.matcher(rt, route.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        store = self.cluster.store
        rv_param = q.get("resourceVersion") or ""
        try:
            timeout = float(q["timeoutSeconds"]) if "timeoutSeconds" in q else None
            start_rv = int(rv_param) if rv_param not in ("", "0") else None
        except ValueError:
            raise S.bad_request(f'invalid resourceVersion or timeoutSeconds: "{rv_param}"')
        bookmarks = _true(q.get("allowWatchBookmarks"))
        # Everything up to registering the watcher happens without awaiting, so no write slips between
        # the initial state and the live events.
        initial: list[tuple[str, dict]] = []
        error = None
        if start_rv is None:
            objects = store.kind(rt.storage_key)
            initial = [("ADDED", objects[k]) for k in sorted(objects) if match(objects[k])]
        else:
            oldest = store.too_old(rt.storage_key, start_rv)
            if oldest is not None:
                error = S.status_body(410, "Expired", f"too old resource version: {start_rv} ({oldest})")
            else:
                initial = [ev for e in store.events_after(rt.storage_key, start_rv)
                           for ev in self._filtered(e.type, e.obj, e.old, match)]
        watcher = store.add_watcher(rt.storage_key) if error is None else None
        w = _Watch(request, rt)
        sent = 0

        async def send(type_: str, obj: dict) -> None:
            nonlocal sent
            await self._send(resp, rt, type_, obj)
            sent += 1
            if fault is None:
                return
            if fault.stall_after is not None and sent == fault.stall_after:
                await asyncio.sleep(fault.stall)
            if fault.drop_after is not None and sent >= fault.drop_after:
                w.dropped = True
                if request.transport is not None:
                    request.transport.abort()
                raise ConnectionResetError("injected: watch stream cut")

        resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON, "Cache-Control": "no-cache, private"})
        resp.enable_chunked_encoding()
        self._watches.add(w)
        try:
            await resp.prepare(request)  # headers go out at once, before any event (fact 20)
            if error is not None:
                await self._send(resp, rt, "ERROR", error)
                await resp.write_eof()
                return resp
            for type_, obj in initial:
                await send(type_, obj)
            await self._pump(resp, w, watcher, match, timeout, bookmarks, send if fault is not None else None)
            if not w.dropped:
                await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError, RuntimeError):
            if not w.dropped and not request.transport:
                pass
        finally:
            self._watches.discard(w)
            if watcher is not None:
                store.remove_watcher(watcher)
        return resp

    async def _pump(self, resp, w: _Watch, watcher, match, timeout: float | None, bookmarks: bool, send) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        # A bookmark shortly before the deadline, as kube-apiserver does (fact 21: at 18.8 s of 20 s).
        final_bookmark = deadline - min(2.0, timeout * 0.1) if deadline is not None else None
        next_bookmark = loop.time() + self.bookmark_interval
        while not w.dropped:
            now = loop.time()
            if deadline is not None and now >= deadline:
                return
            wake = [t for t in (deadline, next_bookmark if bookmarks else None,
                                final_bookmark if bookmarks else None) if t is not None and t > now]
            wait = min(wake) - now if wake else None
            get = asyncio.ensure_future(watcher.queue.get())
            poke = asyncio.ensure_future(w.bookmark_now.wait())
            done, _ = await asyncio.wait({get, poke}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                get.cancel()
            if poke not in done:
                poke.cancel()
            if w.dropped:
                return
            if get in done:
                # everything queued meanwhile goes out with it, in one write when no fault counts
                # events one by one (under load: fewer wake-ups and socket sends for both sides)
                events = [get.result()]
                while not watcher.queue.empty():
                    events.append(watcher.queue.get_nowait())
                out = [ev for e in events for ev in self._filtered(e.type, e.obj, e.old, match)]
                if send is None:
                    if out:  # (an empty chunk would end the stream)
                        await self._write(resp, w.rt, b"".join(self._line(w.rt, type_, obj) for type_, obj in out),
                                          len(out))
                else:
                    for type_, obj in out:
                        await send(type_, obj)
                continue
            now = loop.time()
            if bookmarks and (poke in done or now >= next_bookmark
                              or (final_bookmark is not None and now >= final_bookmark)):
                if final_bookmark is not None and now >= final_bookmark:
                    final_bookmark = None
                w.bookmark_now.clear()
                next_bookmark = now + self.bookmark_interval
                await self._send_bookmark(resp, w.rt)
            elif poke in done:
                w.bookmark_now.clear()

    @staticmethod
    def _filtered(type_: str, obj: dict, old: dict | None, match) -> list[tuple[str, dict]]:
        """A watch with a selector sees an object enter (ADDED) or leave (DELETED) the selection."""
        now_in = match(obj)
        if type_ != "MODIFIED":
            return [(type_, obj)] if now_in else []
        was_in = old is not None and match(old)
        if now_in and was_in:
            return [("MODIFIED", obj)]
        if now_in:
            return [("ADDED", obj)]
        if was_in:
            return [("DELETED", obj)]
        return []

    async def _send(self, resp, rt: ResourceType, type_: str, obj: dict) -> None:
        await self._write(resp, rt, self._line(rt, type_, obj), 1)

    async def _write(self, resp, rt: ResourceType, data: bytes, events: int) -> None:
        counts = self._traffic(f"WATCH {rt.plural}")
        counts[0] += events
        counts[2] += len(data)
        await resp.write(data)

    def _line(self, rt: ResourceType, type_: str, obj: dict) -> bytes:
        payload = obj if type_ == "ERROR" else self.cluster.render(rt, obj)
        return _dumps({"type": type_, "object": payload}, sort=rt.custom and type_ != "ERROR")

    async def _send_bookmark(self, resp, rt: ResourceType) -> None:
        rv = str(self.cluster.store.rv)
        if rt.custom:
            obj = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": {"resourceVersion": rv}}
        else:
            obj = {"kind": rt.kind, "apiVersion": rt.api_version,
                   "metadata": {"resourceVersion": rv, "creationTimestamp": None}, **rt.bookmark_skeleton}
        await resp.write(_dumps({"type": "BOOKMARK", "object": obj}, sort=False))


def _what(path: str, by_path: dict) -> str:
    """`jobs`, `workloads/status`: what a request is about, for the traffic counts."""
    try:
        route = _route(path, by_path)
    except S.ApiError:
        return "unknown"
    return route.rt.plural + (f"/{route.subresource}" if route.subresource else "")


def _is_collection(path: str, by_path: dict) -> bool:
    try:
        return _route(path, by_path).name is None
    except S.ApiError:
        return False


def _true(value: str | None) -> bool:
    """Go's strconv.ParseBool (kubernetes_asyncio sends `watch=True`)."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _dry_run(q) -> bool:
    values = q.getall("dryRun", [])
    if any(v != "All" for v in values):
        raise S.bad_request(f'Invalid dryRun value: {values}')
    return bool(values)
