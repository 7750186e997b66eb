"""What the end-to-end suite needs from the machine, named by environment variables, and the one
skip line when something is missing.

    GPUQUEUE_E2E_K8S_BIN      folder with kube-apiserver, kube-controller-manager, kube-scheduler
    GPUQUEUE_E2E_ETCD         the etcd binary
    GPUQUEUE_E2E_KUBECTL      the kubectl binary (1.27 or later)
    GPUQUEUE_E2E_HELM         the helm binary (3.8 or later): renders charts/gpuqueue, runs test_helm.py
    GPUQUEUE_E2E_REALCLUSTER  the control-plane launcher, realcluster.py
                              (default: ../shared/tools/k8s/realcluster.py beside the repository)
    GPUQUEUE_E2E_KEEP=1       keep the run's folder (logs, PKI, kubeconfigs) even when all passed

Every test module calls ``require()`` first: without the variables each module is skipped from
this one place, so pytest folds the skips into a single summary line, and nothing heavier than
this file is imported (CI has no binaries and must not get slower)."""

from __future__ import annotations

import os
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_REALCLUSTER = REPOSITORY.parent / "shared" / "tools" / "k8s" / "realcluster.py"
VARIABLES = ("GPUQUEUE_E2E_K8S_BIN", "GPUQUEUE_E2E_ETCD", "GPUQUEUE_E2E_KUBECTL", "GPUQUEUE_E2E_HELM")


def missing() -> str | None:
    """Why the suite cannot run here, in one line; None when it can."""
    unset = [v for v in VARIABLES if not os.environ.get(v)]
    if unset:
        return (f"end-to-end suite: {', '.join(unset)} not set (a real control plane's binaries; "
                f"README.md, 'End-to-end tests')")
    k8s_bin = Path(os.environ["GPUQUEUE_E2E_K8S_BIN"])
    absent = [n for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
              if not os.access(k8s_bin / n, os.X_OK)]
    if absent:
        return f"end-to-end suite: GPUQUEUE_E2E_K8S_BIN={k8s_bin} has no {', '.join(absent)}"
    for var in ("GPUQUEUE_E2E_ETCD", "GPUQUEUE_E2E_KUBECTL", "GPUQUEUE_E2E_HELM"):
        if not os.access(os.environ[var], os.X_OK):
            return f"end-to-end suite: {var}={os.environ[var]} is not an executable"
    if not realcluster_path().is_file():
        return (f"end-to-end suite: no launcher at {realcluster_path()} "
                f"(set GPUQUEUE_E2E_REALCLUSTER to realcluster.py)")
    return None


def realcluster_path() -> Path:
    return Path(os.environ.get("GPUQUEUE_E2E_REALCLUSTER") or DEFAULT_REALCLUSTER)


def require() -> None:
    """Skip the calling test module (at collection) when the suite cannot run here."""
    why = missing()
    if why:
        import pytest
        pytest.skip(why, allow_module_level=True)
