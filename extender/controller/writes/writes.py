"""Writes carried out in an order that keeps the API's record within quota at every instant:

- writes for one workload run one after another (a chain per key);
- a write that frees quota in the API's record (Finished, a deleted Workload, an eviction that
  has seen its pods gone) is a *release*; an admission waits for every release that was under
  way when it was decided, so it never lands in the record before the room it uses is freed
  (releases.py).

Only a replica that leads writes, and a write that fails for a passing reason is made again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from gpuqueue.extender.controller.client.kubeapi import CALL_CLASS, ORDINARY, URGENT, is_status
from gpuqueue.extender.controller.options import Options
from gpuqueue.extender.controller.writes.releases import Barrier, Releases, Scope

log = logging.getLogger("gpuqueue.controller")


class Writes:
    def __init__(self, leading: Callable[[], bool], options: Options,
                 scope_of: Callable[[str | None], Scope] = lambda cluster_queue: None) -> None:
        """`scope_of`: the cohort tree a ClusterQueue's quota lives in (the scope of its releases
        and admissions, see releases.py)."""
        self.leading = leading
        self.options = options
        self.scope_of = scope_of
        self._chains: dict[str, asyncio.Future] = {}
        self._background: set[asyncio.Task] = set()
        self.releases = Releases()

    def spawn(self, coro: Awaitable) -> asyncio.Future:
        if not self.leading():  # a replica that no longer leads must not write, not even late
            if asyncio.iscoroutine(coro):
                coro.close()
            fut = asyncio.get_running_loop().create_future()
            fut.cancel()
            return fut
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def chain(self, key: str, make: Callable[[], Awaitable], release: int | None = None,
              call_class: int = ORDINARY) -> asyncio.Future:
        """Run make() after every earlier write for this key has ended (whatever its outcome).

        `release`: a release (see release()) this write carries out. It is marked done when the
        write succeeds. If the write is given up (a permanent error, or `write_retries` spent) or
        cancelled (this replica stopped leading), the release is abandoned: the room was not freed
        in the API's record, so whatever waits on it does not write either.

        A release goes before other calls waiting for a connection (kubeapi.CALL_CLASS); so does an
        admission, given `call_class=URGENT`."""
        prev = self._chains.get(key)

        async def run():
            CALL_CLASS.set(URGENT if release is not None else call_class)  # this task's context only
            try:
                if prev is not None and not prev.done():
                    try:
                        await asyncio.shield(prev)
                    except asyncio.CancelledError:
                        if asyncio.current_task().cancelling():
                            raise  # this write is cancelled (the replica stopped), not only the earlier one
                    except BaseException:  # noqa: BLE001 - the earlier write's failure is logged there
                        pass
                try:
                    o = self.options
                    await _retrying(make, key, o.write_retries, o.write_backoff_initial, o.write_backoff_max)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001
                    log.exception("giving up on a write for %s", key)
                    if release is not None:
                        self.abandon(release)
                    return
            except asyncio.CancelledError:
                if release is not None:
                    self.abandon(release)
                raise
            if release is not None:
                self.released(release)

        task = self.spawn(run())
        if task.done():  # refused: this replica does not lead
            if release is not None:
                self.abandon(release)
            return task
        self._chains[key] = task
        task.add_done_callback(lambda t, k=key: self._chains.pop(k, None) if self._chains.get(k) is t else None)
        return task

    def release(self, cluster_queue: str | None = None) -> int:
        """A release freeing room of `cluster_queue` (None: unknown, every admission waits for it)."""
        return self.releases.start(self.scope_of(cluster_queue))

    def released(self, rid: int) -> None:
        self.releases.end(rid)

    def abandon(self, rid: int) -> None:
        self.releases.end(rid, abandoned=True)

    def barrier(self, cluster_queue: str) -> Barrier | None:
        """What an admission to `cluster_queue` decided now waits for (see wait())."""
        return self.releases.barrier(self.scope_of(cluster_queue))

    async def wait(self, barrier: Barrier) -> bool:
        """False if a release the admission waited for was abandoned: it must not be written."""
        return await self.releases.wait(barrier)

    async def cancel_all(self) -> None:
        """Cancel every write under way (the caller has stopped leading, so none starts anew).
        Cancelled again until it ends: on Python 3.11 a cancellation that arrives as the awaited
        future completes can be lost, and the write would then wait on forever (and this with it)."""
        while self._background:
            tasks = list(self._background)
            for t in tasks:
                t.cancel()
            done, _ = await asyncio.wait(tasks, timeout=0.1)
            for t in done:
                if not t.cancelled():
                    t.exception()  # retrieved: logged where it was raised
        self._chains.clear()
        self.releases.cancel_all()

    async def idle(self) -> None:
        """Wait until no write is under way (tests, benchmarks)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)


async def _retrying(make: Callable[[], Awaitable], key: str, retries: int | None, delay: float,
                    max_delay: float) -> None:
    """Errors other than conflicts (5xx, 429, dropped connections): try again after a pause,
    `retries` times in all (None: without end). The pause is at least the Retry-After the server
    asked for (kube-apiserver's 429 from priority and fairness says 1 s)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            await make()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            if is_status(exc, 400, 403, 404, 422) or (retries is not None and attempt >= retries):
                raise
            pause = max(delay, _retry_after(exc))
            log.log(logging.WARNING if attempt % 10 == 0 else logging.INFO, "write for %s failed %d times (%s), "
                    "retrying in %.2fs", key, attempt, _short(exc), pause)
            await asyncio.sleep(pause)
            delay = min(delay * 2, max_delay)


def _retry_after(exc: BaseException, most: float = 60.0) -> float:
    """Seconds the server asked to wait (Retry-After in seconds, as kube-apiserver sends it); 0 if none."""
    value = (getattr(exc, "headers", None) or {}).get("Retry-After")
    try:
        return min(most, max(0.0, float(value))) if value is not None else 0.0
    except ValueError:
        return 0.0


def _short(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return f"HTTP {status} {getattr(exc, 'reason', '')}" if status else f"{type(exc).__name__}: {exc}"
