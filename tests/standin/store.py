"""Objects, one resourceVersion counter (etcd's revision), a bounded per-kind event history (the watch
cache window) and the open watches. No HTTP and no Kubernetes semantics beyond MVCC live here."""
from __future__ import annotations

import asyncio
import copy
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import orjson

Key = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class StoredEvent:
    rv: int
    type: str  # ADDED / MODIFIED / DELETED
    key: Key
    obj: dict  # state after the write (the last state for DELETED); never mutated once stored
    old: dict | None


@dataclass(eq=False)
class Watcher:
    storage_key: str
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    closed: bool = False


class Store:
    def __init__(self, history_size: int = 1000):
        self.rv = 0
        self.history_size = history_size
        self.objects: dict[str, dict[Key, dict]] = {}
        self.history: dict[str, deque[StoredEvent]] = {}
        # Watches may start from any resourceVersion >= window_start: all later events are retained.
        self.window_start: dict[str, int] = {}
        self.watchers: dict[str, set[Watcher]] = {}
        self.by_uid: dict[str, tuple[str, Key]] = {}

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def kind(self, storage_key: str) -> dict[Key, dict]:
        return self.objects.setdefault(storage_key, {})

    def get(self, storage_key: str, key: Key) -> dict | None:
        return self.objects.get(storage_key, {}).get(key)

    def commit(self, storage_key: str, type_: str, key: Key, obj: dict, old: dict | None, rv: int) -> StoredEvent:
        objects = self.kind(storage_key)
        uid = obj["metadata"].get("uid")
        if type_ == "DELETED":
            objects.pop(key, None)
            self.by_uid.pop(uid, None)
        else:
            objects[key] = obj
            if uid:
                self.by_uid[uid] = (storage_key, key)
        event = StoredEvent(rv, type_, key, obj, old)
        history = self.history.setdefault(storage_key, deque())
        history.append(event)
        while len(history) > self.history_size:
            evicted = history.popleft()
            self.window_start[storage_key] = evicted.rv
        for watcher in self.watchers.get(storage_key, ()):
            watcher.queue.put_nowait(event)
        return event

    def compact(self, storage_key: str | None = None) -> None:
        """Forget the event history, as a restarted kube-apiserver's watch cache does (fixture 410 recordings)."""
        for sk in [storage_key] if storage_key else set(self.history) | set(self.objects):
            self.history[sk] = deque()
            self.window_start[sk] = self.rv

    def too_old(self, storage_key: str, rv: int) -> int | None:
        start = self.window_start.get(storage_key, 0)
        return start if rv < start else None

    def events_after(self, storage_key: str, rv: int) -> list[StoredEvent]:
        return [e for e in self.history.get(storage_key, ()) if e.rv > rv]

    def snapshot(self, storage_key: str, rv: int) -> dict[Key, dict]:
        """The objects as they were at resourceVersion rv (caller checks the window first)."""
        state = dict(self.kind(storage_key))
        for event in reversed(self.history.get(storage_key, ())):
            if event.rv <= rv:
                break
            if event.type == "ADDED":
                state.pop(event.key, None)
            elif event.old is not None:
                state[event.key] = event.old
        return state

    def add_watcher(self, storage_key: str) -> Watcher:
        watcher = Watcher(storage_key)
        self.watchers.setdefault(storage_key, set()).add(watcher)
        return watcher

    def remove_watcher(self, watcher: Watcher) -> None:
        self.watchers.get(watcher.storage_key, set()).discard(watcher)


_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def json_copy(obj):
    """A deep copy of JSON data (objects as they cross the API), several times faster than
    copy.deepcopy; anything else (a datetime, a non-string key, a huge int) gets copy.deepcopy."""
    try:
        return orjson.loads(orjson.dumps(obj, option=_STRICT))
    except TypeError:
        return copy.deepcopy(obj)


def frozen_copy(obj: dict) -> dict:
    return json_copy(obj)


Matcher = Callable[[dict], bool]
