"""A watch of one collection kept by a test: every event with the monotonic time it arrived, in
the API server's order, so a test can replay what the cluster went through (the highest
admitted total, a workload admitted twice) rather than only look at where it ended."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
import urllib.request


class Recorder(threading.Thread):
    def __init__(self, api, path: str) -> None:
        super().__init__(name=f"e2e-watch:{path}", daemon=True)
        self.api, self.path = api, path
        self.events: list[tuple[float, str, dict]] = []   # (monotonic time, type, object); a relist as ADDED
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._resp = None

    def stop(self) -> None:
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
                    self.events.extend((now, "ADDED", o) for o in listing["items"])
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
                    return None
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] != "BOOKMARK":
                    self.events.append((time.monotonic(), ev["type"], obj))
        return rv
