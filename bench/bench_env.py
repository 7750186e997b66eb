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
