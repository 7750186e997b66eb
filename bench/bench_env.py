"""Imported first by every bench script (`python bench/NAME.py` from a development install): puts
the repository on sys.path, and says in one line what to do when the installed names cannot be
imported from it.

The import names map onto folders by pyproject.toml (`gpuqueue.extender` is `extender/`, see
docs/architecture.md). A non-editable install does not help here: the repository's own
`gpuqueue/` folder, first on sys.path, shadows the installed package, which alone holds the
mapping."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    import gpuqueue.extender  # noqa: F401
    import gpuqueue.webhook  # noqa: F401
except ImportError as err:
    sys.exit(f"{Path(sys.argv[0]).name}: cannot import {err.name} from {ROOT}: install the repository "
             f"editable (pip install -e '.[test]'), see docs/architecture.md")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_queue_wait(pid: int) -> tuple[float, int]:
    """Seconds the threads of a live process have spent runnable but waiting for a CPU, and the
    times they were put on one (/proc/PID/task/*/schedstat, the kernel's schedstats)."""
    wait, slices = 0.0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            _, waited, ran = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        wait += int(waited) / 1e9
        slices += int(ran)
    return wait, slices
