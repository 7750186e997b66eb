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
    def log(msg: str) -> None:
        if not msg.startswith("realcluster: kept"):   # the harness keeps its folder only to copy the logs
            print(msg, flush=True)
    cluster = Cluster(log=log)
    try:
        cluster.start()
    except Exception as e:
        cluster.failed = True
        cluster.stop()
        raise RuntimeError(f"the end-to-end control plane did not come up (logs of every process: "
                           f"{cluster.dir}/logs): {e}") from e
    except BaseException:
        cluster.failed = True
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
