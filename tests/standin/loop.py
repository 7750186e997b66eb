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
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
