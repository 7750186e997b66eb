"""Every integration gpuqueue has, found by group/version/kind or by Kueue's framework name, and the
Configuration's ``integrations.frameworks``: which of them are enabled.

Kueue's names: "batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob",
"kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob", "ray.io/rayjob", "ray.io/raycluster",
"leaderworkerset.x-k8s.io/leaderworkerset", "deployment", "statefulset", "pod". Without an
``integrations`` section only "batch/job" is enabled (Kueue's default). Deployments, StatefulSets
and LeaderWorkerSets are queued through their pods, so they need "pod" too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuqueue.jobframework.integration import Integration
from gpuqueue.jobframework.kinds.batchjob import BatchJob
from gpuqueue.jobframework.kinds.jobset import JobSet
from gpuqueue.jobframework.kinds.kubeflow import MPIJob, PyTorchJob
from gpuqueue.jobframework.kinds.pods import Deployment, LeaderWorkerSet, Pod, StatefulSet
from gpuqueue.jobframework.kinds.ray import RayCluster, RayJob
from gpuqueue.jobframework.kinds.trainjob import TrainJob

INTEGRATIONS: tuple[Integration, ...] = (
    BatchJob(), JobSet(), PyTorchJob(), MPIJob(), TrainJob(), RayJob(), RayCluster(), LeaderWorkerSet(),
    Deployment(), StatefulSet(), Pod(),
)
BY_FRAMEWORK: dict[str, Integration] = {i.framework: i for i in INTEGRATIONS}
BY_GVK: dict[tuple[str, str], Integration] = {(i.api_version, i.kind): i for i in INTEGRATIONS}
BY_KIND: dict[str, Integration] = {i.kind: i for i in INTEGRATIONS}
# The pod labels and annotations some integration reads to place a pod in a pod set.
POD_KEYS: frozenset[str] = frozenset(k for i in INTEGRATIONS for k in i.pod_keys)
DEFAULT_FRAMEWORKS = ("batch/job",)
NEEDS_POD = ("deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset")
# Kueue's Integrations fields gpuqueue accepts; only frameworks is read.
SECTION_FIELDS = ("frameworks", "externalFrameworks", "podOptions", "labelKeysToCopy")


def integration_for(obj: Mapping[str, Any]) -> Integration | None:
    """The integration of an object by its apiVersion and kind (None: not a kind gpuqueue queues)."""
    return BY_GVK.get((obj.get("apiVersion"), obj.get("kind")))


def supported_frameworks() -> list[str]:
    return sorted(BY_FRAMEWORK)


@dataclass(frozen=True)
class IntegrationsConfig:
    frameworks: tuple[str, ...] = DEFAULT_FRAMEWORKS

    @classmethod
    def from_kueue_configuration(cls, doc: Mapping[str, Any] | None) -> "IntegrationsConfig":
        """Read the Configuration's ``integrations``; ValueError names a bad field in one line."""
        section = (doc or {}).get("integrations") if isinstance(doc, Mapping) else None
        if section is None:
            return cls()
        if not isinstance(section, Mapping):
            raise ValueError("integrations: must be a mapping")
        unknown = sorted(set(section) - set(SECTION_FIELDS))
        if unknown:
            raise ValueError(f"integrations.{unknown[0]}: unknown field (known: {', '.join(SECTION_FIELDS)})")
        frameworks = section.get("frameworks")
        if frameworks is None:
            raise ValueError("integrations.frameworks: Required value: cannot be empty")
        if not isinstance(frameworks, list):
            raise ValueError("integrations.frameworks: must be a list of framework names")
        seen: set[str] = set()
        for i, name in enumerate(frameworks):
            if name not in BY_FRAMEWORK:
                supported = ", ".join(f'"{f}"' for f in supported_frameworks())
                shown = f'"{name}"' if isinstance(name, str) else repr(name)
                raise ValueError(f"integrations.frameworks[{i}]: Unsupported value: {shown}: supported values: "
                                 f"{supported}")
            if name in seen:
                raise ValueError(f'integrations.frameworks[{i}]: Duplicate value: "{name}"')
            seen.add(name)
        for i, name in enumerate(frameworks):
            if name in NEEDS_POD and "pod" not in seen:
                raise ValueError(f'integrations.frameworks[{i}]: "{name}" needs "pod": its pods are queued by the '
                                 f'pod integration')
        return cls(tuple(frameworks))

    def enabled(self, integration: Integration | str) -> bool:
        name = integration if isinstance(integration, str) else integration.framework
        return name in self.frameworks

    def integrations(self) -> list[Integration]:
        return [BY_FRAMEWORK[name] for name in self.frameworks]
