"""A reflector + store + handlers for one resource, over kubernetes_asyncio.

List, then watch from the list's resourceVersion with bookmarks. A 410 Gone (an ERROR event in the watch
or an HTTP 410) means the history is gone: list again and reconcile the store with the fresh list, so
handlers see deletes for objects that vanished meanwhile and no duplicate adds. A dropped connection is
retried from the last resourceVersion seen, after an exponential backoff with jitter.

Objects are kept as the JSON dicts the API server sent (no model classes): cheap, and identical for
built-in and custom kinds - less what the informer's `transform` drops on the way in (controller-runtime's
cache transforms: managedFields, fields no reader uses; gpuqueue/kube/transform.py).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import random
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import orjson
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[None] | None]
Transform = Callable[[dict], dict]


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


@dataclass
class _Handlers:
    on_add: Handler | None
    on_update: Handler | None
    on_delete: Handler | None


class _Expired(Exception):
    """The watch cannot resume from our resourceVersion: relist."""


class Informer:
    """`list_func` is a kubernetes_asyncio list call (e.g. `BatchV1Api.list_job_for_all_namespaces`,
    `CustomObjectsApi.list_cluster_custom_object`); `args`/`kwargs` are passed to it on list and watch.
    `transform(obj)` is applied to every object as it arrives (listed or watched), before the store
    and the handlers see it; it may change the object it is given (nobody else holds it) and
    returns what is kept."""

    def __init__(self, list_func: Callable, *args: Any, watch_timeout: int = 300, page_size: int = 500,
                 backoff_initial: float = 0.2, backoff_max: float = 30.0, name: str | None = None,
                 transform: Transform | None = None, **kwargs: Any):
        self.list_func, self.args, self.kwargs = list_func, args, kwargs
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self.name = name or getattr(list_func, "__name__", "informer")
        self.transform = transform
        self.store: dict[str, dict] = {}
        self.synced = asyncio.Event()
        self.resource_version: str | None = None
        self.lists = 0  # how many full lists were made (1 + relists), for tests and metrics
        self.watch_starts = 0
        self._handlers: list[_Handlers] = []
        self._task: asyncio.Task | None = None

    # --- public --------------------------------------------------------------------------------------

    def add_handler(self, on_add: Handler | None = None, on_update: Handler | None = None,
                    on_delete: Handler | None = None) -> None:
        """on_add(obj), on_update(old, new), on_delete(obj); plain functions or coroutines."""
        self._handlers.append(_Handlers(on_add, on_update, on_delete))

    def get(self, key: str) -> dict | None:
        return self.store.get(key)

    def list(self) -> list[dict]:
        return list(self.store.values())

    async def observe(self, obj: dict) -> bool:
        """An object as a write of ours returned it: the store takes it when it is newer than what
        the store holds, and handlers hear of it as of a watch event - so readers of the cache see
        our own write at once, not when a watch that lags brings it (client-go's MutationCache
        does the same). The watch's own copy of that version, or of an older one, arriving later
        changes nothing then (`_apply`). Versions are compared as the integers etcd makes them; an
        object whose version is not one is not taken. Returns whether it was taken."""
        if self.transform is not None:
            obj = self.transform(obj)
        key = object_key(obj)
        old = self.store.get(key)
        if _rv_int(obj) is None or (old is not None and not _newer(obj, old)):
            return False
        self.store[key] = obj
        if old is None:
            await self._dispatch("add", obj)
        else:
            await self._dispatch("update", old, obj)
        return True

    def start(self) -> asyncio.Task:
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"informer:{self.name}")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def run(self) -> None:
        failures = 0
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list_and_replace()
                    need_list = False
                started = asyncio.get_running_loop().time()
                got_events = await self._watch_once()
                if got_events:
                    failures = 0
                elif asyncio.get_running_loop().time() - started < 1.0:
                    # an empty stream that ended at once is a failure too (no hot loop on a sick server)
                    failures += 1
                    await asyncio.sleep(self._backoff(failures))
            except _Expired:
                log.info("%s: resourceVersion %s expired, relisting", self.name, self.resource_version)
                need_list = True
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - connection errors, 5xx, timeouts: retry after a pause
                if isinstance(exc, ApiException) and exc.status == 410:
                    need_list = True
                    continue
                failures += 1
                delay = self._backoff(failures)
                log.warning("%s: %s: %s; retrying in %.2fs", self.name, "list" if need_list else "watch",
                            _describe(exc), delay)
                await asyncio.sleep(delay)

    def _backoff(self, failures: int) -> float:
        cap = min(self.backoff_max, self.backoff_initial * (2 ** (failures - 1)))
        return random.uniform(cap / 2, cap)  # "equal jitter": never zero, never above the cap

    # --- list ----------------------------------------------------------------------------------------

    async def _list_and_replace(self) -> None:
        items: list[dict] = []
        token = None
        while True:
            kwargs = dict(self.kwargs, limit=self.page_size, _preload_content=False)
            if token:
                kwargs["_continue"] = token
            try:
                resp = await self.list_func(*self.args, **kwargs)
                body = orjson.loads(await resp.read())
            except ApiException as exc:
                if exc.status == 410 and token:  # the pages' snapshot expired: start over
                    items, token = [], None
                    continue
                raise
            page = body.get("items") or []
            if self.transform is not None:
                page = [self.transform(o) for o in page]
            items.extend(page)
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        self.lists += 1
        self.resource_version = meta.get("resourceVersion")
        await self._replace(items)
        self.synced.set()

    async def _replace(self, items: list[dict]) -> None:
        """Make the store equal to a fresh list, telling handlers what changed since they last heard."""
        fresh = {object_key(o): o for o in items}
        for key in [k for k in self.store if k not in fresh]:
            await self._dispatch("delete", self.store.pop(key))
        for key, obj in fresh.items():
            old = self.store.get(key)
            self.store[key] = obj
            if old is None:
                await self._dispatch("add", obj)
            elif _rv(old) != _rv(obj):
                await self._dispatch("update", old, obj)

    # --- watch ---------------------------------------------------------------------------------------

    async def _watch_once(self) -> bool:
        """One watch request, until the server ends it. True if any event arrived.

        The stream is read here, one JSON line per event decoded once by orjson: kubernetes_asyncio's
        Watch decodes each line with json, then json.dumps the object and decodes it again (about a
        seventh of the controller's CPU in bench/kueue_realtime.py). Its contract is kept: an ERROR
        event, or a line that is a Status, raises ApiException with its code (410: relist)."""
        self.watch_starts += 1
        got = False
        resp = await self.list_func(*self.args, watch=True, _preload_content=False,
                                    resource_version=self.resource_version, allow_watch_bookmarks=True,
                                    timeout_seconds=self.watch_timeout, **self.kwargs)
        try:
            content = resp.content
            while True:
                line = await content.readline()
                if not line:
                    break  # the server ended the watch (its timeout)
                type_, obj = _decode_event(line)
                got = True
                await self._apply(type_, obj)
                # readline() does not yield while lines are buffered: without this, a batch of
                # events would hold the loop, and an extender /filter or webhook call behind it,
                # until its last one is applied.
                await asyncio.sleep(0)
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired() from exc
            raise
        finally:
            resp.release()
        return got

    async def _apply(self, type_: str, obj: dict) -> None:
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if type_ == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        if self.transform is not None:
            obj = self.transform(obj)
        key = object_key(obj)
        if type_ in ("ADDED", "MODIFIED"):
            old = self.store.get(key)
            if old is not None and not _newer(obj, old):
                self.resource_version = rv or self.resource_version
                return  # a version we already hold (observed from our own write) or an older one
            self.store[key] = obj
            if old is None:
                await self._dispatch("add", obj)
            else:
                await self._dispatch("update", old, obj)
        elif type_ == "DELETED":
            old = self.store.pop(key, None)
            if old is not None:
                await self._dispatch("delete", obj)
        self.resource_version = rv or self.resource_version

    async def _dispatch(self, what: str, *objs: dict) -> None:
        for h in self._handlers:
            fn = getattr(h, f"on_{what}")
            if fn is None:
                continue
            try:
                result = fn(*objs)
                if inspect.isawaitable(result):
                    await result
            except Exception:  # noqa: BLE001 - one failing handler must not stop the cache
                log.exception("%s: %s handler failed", self.name, what)


def _decode_event(line: bytes) -> tuple[str, dict]:
    """One watch line: (type, object). ERROR events and bare Status lines (an HTTP error answer to the
    watch request) raise ApiException with their code, as kubernetes_asyncio's Watch does."""
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"watch stream: a line that is not JSON: {line[:200]!r}") from exc
    if not isinstance(event, dict):
        raise ValueError(f"watch stream: not an event: {line[:200]!r}")
    type_, obj = event.get("type"), event.get("object")
    if type_ is None or obj is None:
        if "code" in event:
            raise ApiException(status=event["code"], reason=f"{event.get('reason')}: {event.get('message')}")
        raise ValueError(f"watch stream: an event without type or object: {line[:200]!r}")
    if type_ == "ERROR":
        raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise ValueError(f"watch stream: a {type_} event without metadata: {line[:200]!r}")
    return type_, obj


def _rv(obj: dict) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _rv_int(obj: dict) -> int | None:
    rv = _rv(obj)
    return int(rv) if isinstance(rv, str) and rv.isdigit() else None


def _newer(obj: dict, than: dict) -> bool:
    """`obj` is a later version than `than` - or they cannot be compared (then the watch is
    believed, as before there was anything to compare)."""
    a, b = _rv_int(obj), _rv_int(than)
    return a is None or b is None or a > b


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
