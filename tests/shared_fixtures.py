"""Files other projects published (their CRDs, wire recordings of a real Kubernetes 1.24), read
where the project is given them: `../shared/fixtures/` beside the checkout, or
`$GPUQUEUE_SHARED/fixtures`. They are never copied into the repository
(tests/test_shared_fixtures.py keeps it so).

Run without them, a test (or a module, when it reads one at import) that reads one is skipped
with one line naming the folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPUQUEUE_SHARED") or REPOSITORY.parent / "shared")
FIXTURES = SHARED / "fixtures"
MISSING = (f"needs the published fixtures in {FIXTURES}, which this checkout does not have beside it "
           f"(set GPUQUEUE_SHARED to the shared/ folder)")


def available() -> bool:
    return FIXTURES.is_dir()


def fixture(*parts: str) -> Path:
    """The published file or folder `parts` under shared/fixtures; in a test run without them, the
    test is skipped."""
    if not available():
        import pytest
        pytest.skip(MISSING, allow_module_level=True)
    return FIXTURES.joinpath(*parts)


def shared_data(name: str) -> Path:
    """A published measurement under shared/data (apiserver-costs.json...); in a test run without
    it, the test is skipped."""
    path = SHARED / "data" / name
    if not path.is_file():
        import pytest
        pytest.skip(f"needs {path}, which this checkout does not have beside it (set GPUQUEUE_SHARED)")
    return path


def k8s_recording(*parts: str) -> Path:
    """A wire recording of a real Kubernetes 1.24 control plane (shared/fixtures/k8s-1.24)."""
    return fixture("k8s-1.24", *parts)


def require_for_script(script: str) -> None:
    """For scripts run outside pytest (benchmarks, tools): one line and exit 2 when absent."""
    if not available():
        sys.exit(f"{script}: {MISSING}")
