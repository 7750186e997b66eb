"""Watches of one collection kept by the end-to-end tests, on a thread each: list, then watch from
the list's resourceVersion, relist after a 410 or a broken connection (``Watch``). ``Recorder``
keeps every event with the monotonic time it arrived, in the API server's order, so a test can
replay what the cluster went through (the highest admitted total, a workload admitted twice)
rather than only look at where it ended; the harness's fake kubelet is another ``Watch``."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
import urllib.request


class Watch(threading.Thread):
    """Calls ``on_event(arrived, type, object)`` for each object of a listing (as ADDED) and each
    watch event but bookmarks, in order, on its own thread."""

    def __init__(self, api, path: str, name: str | None = None) -> None:
        super().__init__(name=name or f"e2e-watch:{path}", daemon=True)
        self.api, self.path = api, path
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._resp = None

    def on_event(self, arrived: float, typ: str, obj: dict) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Ends the watch under way by shutting its socket down (closing the response from here
        would wait for the read in progress; left open, it holds up the API server's shutdown)."""
        self._stopping.set()
        sock = getattr(getattr(getattr(self._resp, "fp", None), "raw", None), "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.join(timeout=5)

    def run(self) -> None:
        rv = None
        while not self._stopping.is_set():
            try:
                if rv is None:
                    listing = self.api.get(self.path)
                    now = time.monotonic()
                    for o in listing["items"]:
                        self.on_event(now, "ADDED", o)
                    rv = listing["metadata"]["resourceVersion"]
                rv = self._watch(rv)
            except Exception as e:   # noqa: BLE001 - a broken watch is relisted
                if self._stopping.is_set():
                    return
                self.errors.append(repr(e))
                rv = None
                time.sleep(0.2)

    def _watch(self, rv: str) -> str | None:
        q = urllib.parse.urlencode({"watch": "1", "resourceVersion": rv, "timeoutSeconds": "240",
                                    "allowWatchBookmarks": "true"})
        req = urllib.request.Request(f"{self.api.server}{self.path}?{q}", headers={"Accept": "application/json"})
        with self.api.opener.open(req, timeout=300) as resp:
            self._resp = resp
            for line in resp:
                if self._stopping.is_set():
                    return rv
                ev = json.loads(line)
                if ev["type"] == "ERROR":
                    return None   # 410 Gone: relist
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] != "BOOKMARK":
                    self.on_event(time.monotonic(), ev["type"], obj)
        return rv


class Recorder(Watch):
    def __init__(self, api, path: str) -> None:
        super().__init__(api, path)
        self.events: list[tuple[float, str, dict]] = []   # (monotonic time, type, object); a relist as ADDED

    def on_event(self, arrived: float, typ: str, obj: dict) -> None:
        self.events.append((arrived, typ, obj))
