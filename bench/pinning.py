"""Pin a benchmark process to one CPU, so that "per core" figures mean one core: the server
measured on one, the load generator on another, and neither migrates (on 2 cores, a server
moved between them pays for cold caches on every move)."""

from __future__ import annotations

import os

SERVER_CPU, LOAD_CPU = 0, 1


def pin(cpu: int) -> None:
    """Run this process on the ``cpu``-th CPU it may use (wrapping around); a no-op where
    affinity cannot be set."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[cpu % len(cpus)]})
    except (AttributeError, OSError):
        pass
