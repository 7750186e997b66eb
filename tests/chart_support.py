"""Rendering the chart in tests: with helm where it is installed; without it the test is skipped,
except where GPUQUEUE_REQUIRE_HELM=1 (CI, .ci/run), which makes a missing helm a failure."""

from __future__ import annotations

import os

import pytest

from manifests.tools import render


def require_helm() -> None:
    if render.helm_binary() is not None:
        return
    why = "helm not installed (PATH or $HELM; .ci/install-helm.sh installs it)"
    if os.environ.get("GPUQUEUE_REQUIRE_HELM") == "1":
        pytest.fail(f"{why}, and GPUQUEUE_REQUIRE_HELM=1 requires it", pytrace=False)
    pytest.skip(why)


def rendered(*args: str, values: dict | None = None) -> list[dict]:
    """The chart's objects with these `helm template` arguments and values."""
    require_helm()
    return render.objects(render.template(*args, values=values))
