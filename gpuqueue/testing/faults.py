"""Fault injection for the API server stand-in: the next N matching requests fail or are delayed."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Fault:
    method: str | None  # GET/POST/PUT/PATCH/DELETE, None = any
    path: re.Pattern  # searched in the request path (no query string)
    status: int | None  # answer with this HTTP status (a Status body shaped for it); None = only delay
    times: int  # how many more requests this fault applies to
    delay: float = 0.0  # seconds to wait before handling (or failing) the request
    watch: bool | None = None  # only watch requests (True), only non-watch (False), either (None)

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        return (self.times > 0 and (self.method is None or self.method == method)
                and (self.watch is None or self.watch == is_watch) and bool(self.path.search(path)))


class Faults:
    def __init__(self) -> None:
        self.rules: list[Fault] = []

    def add(self, path: str = "", *, method: str | None = None, status: int | None = None, times: int = 1,
            delay: float = 0.0, watch: bool | None = None) -> Fault:
        """`path` is a regular expression searched in the request path, e.g. r"/jobs/train-1$"."""
        fault = Fault(method.upper() if method else None, re.compile(path), status, times, delay, watch)
        self.rules.append(fault)
        return fault

    def take(self, method: str, path: str, is_watch: bool) -> Fault | None:
        for fault in self.rules:
            if fault.matches(method, path, is_watch):
                fault.times -= 1
                return fault
        return None

    def clear(self) -> None:
        self.rules.clear()
