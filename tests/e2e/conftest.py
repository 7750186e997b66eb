"""The end-to-end suite's session: one real control plane with gpuqueue installed (harness.py),
shared by every case; each case works in its own namespaces and names. Without the binaries
(env.py) nothing here starts and every module is skipped in one line."""

from __future__ import annotations

import os

import pytest

from tests.e2e.env import missing


def pytest_generate_tests(metafunc):
    """GPUQUEUE_E2E_REPEAT=N runs each selected case N times on the one control plane (e.g. the
    races of issue 35: `GPUQUEUE_E2E_REPEAT=10 ... tests/e2e/test_tas.py`)."""
    n = int(os.environ.get("GPUQUEUE_E2E_REPEAT") or 1)
    if n > 1 and "e2e" in metafunc.fixturenames:
        metafunc.parametrize("e2e_run", range(1, n + 1), ids=lambda i: f"run{i}")


@pytest.fixture
def e2e_run():
    return 1


@pytest.fixture(autouse=True)
def _case(request, e2e_run):
    """When cases repeat, what a run deleted is gone before the next run makes it again (a
    namespace takes 5 to 10 s to go). Different cases share no names and no nodes, so a single
    run does not wait for that."""
    yield
    if "e2e" in request.fixturenames:
        cluster = request.getfixturevalue("e2e")
        if int(os.environ.get("GPUQUEUE_E2E_REPEAT") or 1) > 1:
            cluster.settle()
        else:
            cluster.forget_deletions()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        from tests.e2e.harness import Cluster
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, Cluster):
                value.failed = True   # keep the run's folder: the failure names it


@pytest.fixture(scope="session")
def e2e():
    why = missing()
    if why:
        pytest.skip(why)
    from tests.e2e.harness import started
    with started() as cluster:
        yield cluster
