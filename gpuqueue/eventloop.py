"""The servers' event loop: uvloop's where it is installed, else asyncio's.

uvloop's TLS transport is compiled where asyncio's (3.11) is Python: over HTTPS the extender's
HTTP layer costs about a third less per request on it (bench/http_layer_bench.py).
``GPUQUEUE_EVENT_LOOP=asyncio`` keeps asyncio's loop (e.g. to compare, or to debug with
asyncio's debug mode)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Coroutine


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop``, or None (asyncio's default) where uvloop is missing (it
    has no Windows build) or ``GPUQUEUE_EVENT_LOOP=asyncio``."""
    if os.environ.get("GPUQUEUE_EVENT_LOOP", "uvloop") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(main)`` on the loop ``loop_factory`` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
