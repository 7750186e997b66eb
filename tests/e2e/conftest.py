"""The end-to-end suite's session: one real control plane with gpuqueue installed (harness.py),
shared by every case; each case works in its own namespaces and names. Without the binaries
(env.py) nothing here starts and every module is skipped in one line."""

from __future__ import annotations

import pytest

from tests.e2e.env import missing


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and "e2e" in item.fixturenames:
        cluster = item.funcargs.get("e2e")
        if cluster is not None:
            cluster.failed = True   # keep the run's folder: the failure names it


@pytest.fixture(scope="session")
def e2e():
    why = missing()
    if why:
        pytest.skip(why)
    from tests.e2e.harness import Cluster
    cluster = Cluster(log=lambda msg: print(msg, flush=True))
    try:
        cluster.start()
    except BaseException:
        cluster.failed = True
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
