"""Careful writes: retry a read-modify-write on 409 Conflict from a fresh read (bounded), and a token
bucket so a burst of decisions cannot flood the API server."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from kubernetes_asyncio.client.exceptions import ApiException


class ConflictRetriesExhausted(Exception):
    def __init__(self, attempts: int, last: ApiException):
        super().__init__(f"still conflicting after {attempts} attempts: {last.reason}")
        self.attempts, self.last = attempts, last


class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up. `acquire()` waits for a token."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.updated = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def try_take(self) -> bool:
        """A token now, or False (never waits): for what is dropped or refused over budget."""
        self._refill()
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    async def acquire(self) -> None:
        if not self._lock.locked():  # nobody waiting: no lock to take (one per write adds up)
            self._refill()
            if self.tokens >= 1:
                self.tokens -= 1
                return
        async with self._lock:  # FIFO among waiters
            self._refill()
            while self.tokens < 1:
                await asyncio.sleep((1 - self.tokens) / self.rate)
                self._refill()
            self.tokens -= 1


async def retry_on_conflict(read: Callable[[], Awaitable[Any]], change: Callable[[Any], Any],
                            send: Callable[[Any], Awaitable[Any]], *, attempts: int = 5,
                            limiter: TokenBucket | None = None) -> Any:
    """Read-modify-write that survives concurrent writers.

    read() fetches the current object; change(current) returns what to send (a full object carrying the
    resourceVersion it was computed from, or a patch that includes metadata.resourceVersion), or None when
    nothing needs writing; send(body) writes it. On 409 Conflict read again and recompute, `attempts`
    times in all. Returns send's result, or None if no write was needed."""
    last: ApiException | None = None
    for _ in range(attempts):
        body = change(await read())
        if body is None:
            return None
        if limiter is not None:
            await limiter.acquire()
        try:
            return await send(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            last = exc
    assert last is not None
    raise ConflictRetriesExhausted(attempts, last)
