"""Values computed from JSON-shaped input, remembered by the input's exact JSON.

The pods of a Job share their containers byte for byte, so what is read from them (the
resources they request, after pydantic has checked their shape) is worked out once per Job
rather than once per pod and per call. An entry is found only through identical JSON, so it
never stands for other input; a computation that raises remembers nothing, and the same input
raises again. Bounded: past ``size`` entries the oldest goes.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

import orjson

T = TypeVar("T")


class JsonMemo(Generic[T]):
    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._entries: dict[bytes, T] = {}

    def __call__(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()``, or what it gave before for input whose JSON is ``key``'s."""
        try:
            raw = orjson.dumps(key)
        except TypeError:  # not JSON (a caller's own objects): nothing to find it by
            return compute()
        entries = self._entries
        if raw in entries:
            return entries[raw]
        value = compute()
        if len(entries) >= self.size:
            del entries[next(iter(entries))]  # the oldest
        entries[raw] = value
        return value

    def __len__(self) -> int:
        return len(self._entries)
