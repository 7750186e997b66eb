"""Which pods need an admission before they may run: gpuqueue's enforcement policy, shared by the
scheduler extender (which refuses such pods a node), the webhook (which refuses the ways around the
extender) and the controller.

The quota is over what runs. A pod *needs admission* when it requests an *enforced resource*
and its namespace is not exempt. Enforced resources are, unless the operator lists them, every
resource some ClusterQueue covers except the four every pod asks for (cpu, memory,
ephemeral-storage, pods): counting those would make every pod of the cluster a GPU pod. Modes:

- ``Strict`` (default): a pod that needs admission gets a node only as part of an admitted
  workload, within its pod set's count and requests;
- ``Audit``: the same verdicts are reported (log, metric, Event) but nothing is refused;
- ``Off``: no pod-level checks (Kueue's behaviour: only Workload records are counted).

Read from the ``enforcement`` section of gpuqueue's Configuration (a gpuqueue extension of
Kueue's ``config.kueue.x-k8s.io`` Configuration):

    enforcement:
      mode: Strict
      exemptNamespaces: [kube-system, gpuqueue-system, gpu-operator, nvidia-gpu-operator]
      resources: [nvidia.com/gpu]          # optional; default: covered extended resources
      schedulerNames: [default-scheduler]  # schedulers that call the extender; the first is set
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuqueue.api.core import PodSpec
from gpuqueue.api.podrequests import pod_requests

STRICT, AUDIT, OFF = "Strict", "Audit", "Off"
MODES = (STRICT, AUDIT, OFF)
# Every pod requests these; they are never enforced per pod, only counted in Workloads.
BASE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
# System namespaces and the GPU operator's own (its device plugin and validator pods request GPUs).
DEFAULT_EXEMPT_NAMESPACES = ("kube-system", "gpuqueue-system", "gpu-operator", "nvidia-gpu-operator")
DEFAULT_SCHEDULER_NAMES = ("default-scheduler",)
SECTION_FIELDS = ("mode", "exemptNamespaces", "resources", "schedulerNames")


@dataclass(frozen=True)
class EnforcementConfig:
    mode: str = STRICT
    exempt_namespaces: frozenset[str] = frozenset(DEFAULT_EXEMPT_NAMESPACES)
    resources: frozenset[str] | None = None  # None: what ClusterQueues cover, less BASE_RESOURCES
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES

    @classmethod
    def from_kueue_configuration(cls, doc: Mapping[str, Any] | None) -> "EnforcementConfig":
        """Read the Configuration's ``enforcement`` section; ValueError names a bad field."""
        section = (doc or {}).get("enforcement") if isinstance(doc, Mapping) else None
        if section is None:
            return cls()
        if not isinstance(section, Mapping):
            raise ValueError("enforcement: must be a mapping")
        unknown = sorted(set(section) - set(SECTION_FIELDS))
        if unknown:
            raise ValueError(f"enforcement.{unknown[0]}: unknown field")
        mode = section.get("mode", STRICT)
        if mode not in MODES:
            raise ValueError(f"enforcement.mode: must be one of {', '.join(MODES)}, got {mode!r}")
        exempt = _names(section, "exemptNamespaces", DEFAULT_EXEMPT_NAMESPACES)
        resources = _names(section, "resources", None)
        schedulers = _names(section, "schedulerNames", DEFAULT_SCHEDULER_NAMES)
        if not schedulers:
            raise ValueError("enforcement.schedulerNames: must name at least one scheduler")
        return cls(mode=mode, exempt_namespaces=frozenset(exempt),
                   resources=None if resources is None else frozenset(resources), scheduler_names=tuple(schedulers))

    @property
    def enforcing(self) -> bool:
        return self.mode != OFF

    @property
    def refusing(self) -> bool:
        return self.mode == STRICT

    def exempt(self, namespace: str) -> bool:
        return namespace in self.exempt_namespaces

    def enforced_resources(self, covered: Iterable[str] | None) -> frozenset[str] | None:
        """The resources a pod is checked for. ``covered``: the resources ClusterQueues cover, or
        None when unknown (then every resource but the base ones counts: the safe side)."""
        if self.resources is not None:
            return self.resources
        if covered is None:
            return None
        return frozenset(covered) - BASE_RESOURCES

    def needs_admission(self, namespace: str, requested: Iterable[str], covered: Iterable[str] | None = None) -> bool:
        """Whether a pod of ``namespace`` requesting (a positive amount of) ``requested`` must
        belong to an admitted workload to run."""
        return self.enforcing and bool(self.checked_requests(namespace, requested, covered))

    def enforced_requests(self, namespace: str, requested: Iterable[str],
                          covered: Iterable[str] | None = None) -> frozenset[str]:
        """Those of ``requested`` that make such a pod need an admission (none: it needs none)."""
        return self.checked_requests(namespace, requested, covered) if self.enforcing else frozenset()

    def checked_requests(self, namespace: str, requested: Iterable[str],
                         covered: Iterable[str] | None = None) -> frozenset[str]:
        """The enforced resources among ``requested``, none in an exempt namespace; whatever the
        mode (Off still needs to know which pods are the quota's, e.g. to wait for a pod the
        extender's cache has not seen yet)."""
        if self.exempt(namespace):
            return frozenset()
        enforced = self.enforced_resources(covered)
        if enforced is None:
            return frozenset(r for r in requested if r not in BASE_RESOURCES)
        return enforced.intersection(requested)


def covered_resources(cluster_queues: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Every resource some of ``cluster_queues`` (as JSON) covers."""
    return frozenset(r for cq in cluster_queues for rg in ((cq.get("spec") or {}).get("resourceGroups") or ())
                     for r in (rg.get("coveredResources") or ()) if isinstance(r, str))


def requested_resources(spec: PodSpec) -> frozenset[str]:
    """The resources a pod asks a positive amount of, as Kubernetes counts them (containers, init
    containers and sidecars, overhead; a limit stands in for a missing request)."""
    return frozenset(name for name, quantity in pod_requests(spec).items() if quantity.value > 0)


def _names(section: Mapping[str, Any], field: str, default):
    value = section.get(field, default)
    if value is default:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"enforcement.{field}: must be a list of names")
    return tuple(value)
