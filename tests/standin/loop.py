"""A stand-in controller's loop: a task started with the stand-in and cancelled when it stops."""
from __future__ import annotations

import asyncio


class BackgroundLoop:
    _task: asyncio.Task | None = None

    async def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancelled until it ends: on Python 3.11 asyncio.wait_for can swallow a cancellation that
        arrives as the awaited future completes, and a loop around it then runs on."""
        task = self._task
        if task is None:
            return
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
