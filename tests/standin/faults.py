"""Fault injection for the API server stand-in.

A rule matches requests by method, path and watch-or-not; it applies to the next `times` of them,
each with probability `rate` (a seeded random source, so a run can be replayed). What it does:

- `status`: answer with that HTTP status (a Status body shaped for it) instead of handling;
- `delay`: wait that long first (a slow server);
- `after`: handle the request, then wait that long before answering (a write's watch event
  reaches the watchers before its response reaches the writer, as on a busy real server);
- `hold`: wait until the event is set (a test pins the client between two writes); a request
  whose client went away meanwhile is then dropped unhandled, as a real server would never see it;
- on a watch, `stall_after`/`stall`: pause the stream that long after that many events (a stuck
  stream; events pile up and arrive late), `drop_after`: cut the connection after that many
  events, without the terminating chunk (a network failure mid-stream).

Requests carrying the header `EXEMPT_HEADER` are never faulted (the test's own client, standing
in for a user whose kubectl would simply retry).
"""
from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from dataclasses import dataclass, field

EXEMPT_HEADER = "X-Fault-Exempt"


@dataclass
class Fault:
    method: str | None  # GET/POST/PUT/PATCH/DELETE, None = any
    path: re.Pattern  # searched in the request path (no query string)
    status: int | None  # answer with this HTTP status (a Status body shaped for it); None = only delay
    times: int  # how many more requests this fault applies to
    delay: float = 0.0  # seconds to wait before handling (or failing) the request
    watch: bool | None = None  # only watch requests (True), only non-watch (False), either (None)
    rate: float = 1.0  # the chance that a matching request is hit
    hold: asyncio.Event | None = None
    stall_after: int | None = None
    stall: float = 0.0
    drop_after: int | None = None
    retry_after: int | None = None  # with status 429: kube-apiserver's own throttling answer, this Retry-After
    after: float = 0.0  # seconds to wait between handling the request and answering it
    hits: int = 0
    paths: list[str] = field(default_factory=list)  # the path of each request hit, in order

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        return (self.times > 0 and (self.method is None or self.method == method)
                and (self.watch is None or self.watch == is_watch) and bool(self.path.search(path)))

    @property
    def kind(self) -> str:
        if self.status is not None:
            return str(self.status)
        if self.hold is not None:
            return "hold"
        if self.drop_after is not None:
            return "drop"
        if self.stall_after is not None:
            return "stall"
        if self.after:
            return "late answer"
        return "delay"


@dataclass
class Faults:
    rules: list[Fault] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    injected: Counter = field(default_factory=Counter)  # fault kind -> requests hit, since creation

    def seed(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def add(self, path: str = "", *, method: str | None = None, status: int | None = None, times: int = 1,
            delay: float = 0.0, watch: bool | None = None, rate: float = 1.0, hold: asyncio.Event | None = None,
            stall_after: int | None = None, stall: float = 0.0, drop_after: int | None = None,
            retry_after: int | None = None, after: float = 0.0) -> Fault:
        """`path` is a regular expression searched in the request path, e.g. r"/jobs/train-1$"."""
        if not 0.0 < rate <= 1.0:
            raise ValueError("rate must be in (0, 1]")
        fault = Fault(method.upper() if method else None, re.compile(path), status, times, delay, watch, rate,
                      hold, stall_after, stall, drop_after, retry_after, after)
        self.rules.append(fault)
        return fault

    def take(self, method: str, path: str, is_watch: bool) -> Fault | None:
        for fault in self.rules:
            if fault.matches(method, path, is_watch):
                if fault.rate < 1.0 and self.rng.random() >= fault.rate:
                    continue
                fault.times -= 1
                fault.hits += 1
                fault.paths.append(path)
                self.injected[fault.kind] += 1
                return fault
        return None

    def clear(self) -> None:
        """Stop injecting; held requests are let go."""
        for fault in self.rules:
            if fault.hold is not None:
                fault.hold.set()
        self.rules.clear()
