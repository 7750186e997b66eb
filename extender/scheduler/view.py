"""What the extender endpoints need to know about the cluster, as a protocol, and the facts it
hands them.

The verbs trust nothing in a request body that these facts can check: a pod is looked up by UID
in the view's own pod cache, and its namespace, owner, requests and tolerations come from there
(``CachedPod``), never from the body. The controller implements the protocol over its watch
caches (``extender.controller.clusterview.view``); ``memory.InMemoryClusterView`` implements it for tests
and the benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Protocol, Union

from gpuqueue.api.base import ObjectMeta
from gpuqueue.api.core import Pod
from gpuqueue.api.podrequests import engine_pod_requests
from gpuqueue.api.scheduling import Toleration
from gpuqueue.api.topology import TopologyAssignment
from gpuqueue.jobframework.enforcement import EnforcementConfig
from gpuqueue.jobframework.registry import POD_KEYS

from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.placement.model import GPU_RESOURCE, FlavorSelector

PodRef = ObjectMeta  # a pod's identity as a request body states it


def controller_uid(meta: ObjectMeta) -> str | None:
    """The uid of the controller ownerReference in a pod's metadata."""
    for ref in meta.owner_references:
        if ref.controller:
            return ref.uid
    return None


@dataclass(frozen=True, slots=True)
class CachedPod:
    """A pod as the view's own cache holds it (the controller's pod informer)."""

    uid: str
    namespace: str
    name: str
    controller_uid: str | None  # uid of its controller ownerReference
    requests: Mapping[str, int] = field(default_factory=dict)  # Kubernetes' pod requests, engine units
    tolerations: tuple[Toleration, ...] = ()
    requested: frozenset[str] = frozenset()  # the resources it asks a positive amount of (derived)
    # the labels and annotations that say which pod set of its kind it is in (registry.POD_KEYS)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""  # the version the cache holds (to tell whether a request saw a newer one)

    def __post_init__(self) -> None:
        object.__setattr__(self, "requested", frozenset(r for r, v in self.requests.items() if v > 0))

    # What ``of`` reads of a pod's metadata besides its resourceVersion: keep in step with it.
    METADATA_READ = ("uid", "namespace", "name", "ownerReferences", "labels", "annotations")

    @staticmethod
    def made_alike(obj: dict, other: dict) -> bool:
        """Whether ``of`` makes the same CachedPod of the two versions of a pod, but for the
        resourceVersion: they differ only in what it does not read (the spec's nodeName, the
        status, the metadata outside METADATA_READ: a binding, a status update, a deletion's
        timestamp and generation)."""
        meta, other_meta = obj.get("metadata"), other.get("metadata")
        if not isinstance(meta, dict) or not isinstance(other_meta, dict):
            return False
        spec, other_spec = obj.get("spec"), other.get("spec")
        if isinstance(spec, dict) and isinstance(other_spec, dict):
            spec, other_spec = {**spec, "nodeName": None}, {**other_spec, "nodeName": None}
        if spec != other_spec:
            return False
        return all(meta.get(k) == other_meta.get(k) for k in CachedPod.METADATA_READ)

    @classmethod
    def of(cls, pod: Pod) -> "CachedPod":
        """From the pod's object; requests as Kubernetes counts them (``api.podrequests``)."""
        meta = pod.metadata
        return cls(meta.uid or "", meta.namespace or "", meta.name or "", controller_uid(meta),
                   engine_pod_requests(pod.spec), tuple(t.to_spec() for t in pod.spec.tolerations),
                   labels={k: v for k, v in meta.labels.items() if k in POD_KEYS},
                   annotations={k: v for k, v in meta.annotations.items() if k in POD_KEYS},
                   resource_version=meta.resource_version or "")

    def at_version(self, resource_version: str) -> "CachedPod":
        return replace(self, resource_version=resource_version)

    @property
    def gpus(self) -> int:
        return self.requests.get(GPU_RESOURCE, 0)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Owner:
    """An object pods belong to (a Job, a JobSet, a RayCluster, ...), as the view's cache holds it;
    ``kind`` names its integration (``gpuqueue.jobframework.registry.BY_KIND``)."""

    uid: str
    namespace: str
    kind: str
    name: str
    controller_uid: str | None = None  # its own controller ownerReference (a JobSet's Job has one)


# Where a Workload stands, as far as its pods are concerned.
PENDING, ADMITTED, EVICTED, FINISHED = "pending", "admitted", "evicted", "finished"


@dataclass(frozen=True, slots=True)
class PodSetAdmission:
    """One pod set's part of a Workload's ``status.admission``."""

    count: int
    usage: Mapping[str, int]  # resourceUsage: every pod of the set together, engine units
    flavor: FlavorSelector | None = None  # its own flavors (None: the Workload's, merged)
    topology: TopologyAssignment | None = None  # where its pods go (TAS)


@dataclass(frozen=True, slots=True)
class WorkloadEntry:
    """A Workload as its pods are judged against it."""

    namespace: str
    name: str
    owner_uid: str  # its controller ownerReference (the Job's uid)
    state: str  # PENDING | ADMITTED | EVICTED | FINISHED
    message: str = ""  # why it is pending, or why it is being evicted
    flavor: FlavorSelector | None = None  # the admitted flavors, merged (ADMITTED, EVICTED)
    pod_sets: Mapping[str, PodSetAdmission] = field(default_factory=dict)
    # its other ownerReferences' uids: the pods of a pod group (Kueue makes every pod of the group
    # an owner of the group's Workload)
    members: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_quota(self) -> bool:
        return self.state in (ADMITTED, EVICTED)


# -- verdicts: what the verbs do with a pod ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Unmanaged:
    """Not a pod gpuqueue has a say about: kube-scheduler decides alone, nothing is reserved."""


@dataclass(frozen=True, slots=True)
class NotAdmitted:
    """Refused on every node (FailedAndUnresolvableNodes) with ``message``: its Workload waits
    for quota, or the pod breaks the enforcement policy (Strict)."""

    message: str


@dataclass(frozen=True, slots=True)
class Retry:
    """Answered with an ``Error`` (which kube-scheduler 1.24 parks with its unschedulable pods,
    docs/extender.md). For what the cache cannot vouch for: a pod it has not seen, or that the
    request describes otherwise. ``lagging``: the request saw a newer pod than the cache holds,
    so the cache may only be behind (the verbs wait for it before answering this)."""

    message: str
    lagging: bool = False


@dataclass(frozen=True, slots=True)
class Admitted:
    """A pod of an admitted Workload, checked against the cache: it must land on a node of
    ``flavor``; ``pod`` is what the cache says it asks for."""

    flavor: FlavorSelector
    job_key: str  # the pods counted together on nodes: its pod set's (ownership.Membership.key)
    pod: CachedPod
    topology: TopologyAssignment | None = None  # its pod set's topology assignment (TAS)
    where: str = ""  # "pod set P of workload NS/NAME", for the reasons given on nodes


@dataclass(frozen=True, slots=True)
class Violation:
    """Why a pod that needs an admission may not run (``reason`` is the metric's label)."""

    reason: str
    message: str
    pod: CachedPod


Verdict = Union[Unmanaged, NotAdmitted, Retry, Admitted]
UNMANAGED = Unmanaged()


class ClusterView(Protocol):
    @property
    def nodes(self) -> NodeCache:
        """Nodes, and the GPUs bound and in-flight pods take on them."""

    @property
    def enforcement(self) -> EnforcementConfig:
        """The operator's enforcement policy (the Configuration's ``enforcement``)."""

    def covered_resources(self) -> frozenset[str] | None:
        """The resources some ClusterQueue covers (None while unknown: then every resource but
        the base ones is enforced, ``EnforcementConfig.enforced_resources``)."""

    def pod(self, uid: str) -> CachedPod | None:
        """A pod the cache knows."""

    def pod_deleted(self, uid: str) -> bool:
        """Whether the cache saw this pod deleted (lately: a bounded memory)."""

    def owner(self, uid: str) -> Owner | None:
        """An owner object the cache knows (Jobs)."""

    def workload_owned_by(self, uid: str) -> WorkloadEntry | None:
        """The Workload whose controller ownerReference is ``uid``, or that has ``uid`` among its
        members (one holding quota first)."""

    def may_evict(self, pod: CachedPod) -> bool:
        """The quota engine's word on evicting this pod of a Workload holding quota."""

    def report(self, violation: Violation) -> None:
        """A /filter found ``violation`` (counted; logged in Audit)."""

    async def changed(self, timeout: float) -> bool:
        """Wait until the caches take in some change (False: ``timeout`` seconds passed first)."""

    def workloads_behind(self, resource_version: str | None) -> bool:
        """Whether the Workloads cache may not hold yet what was written before
        ``resource_version`` (a pod's, as a request states it): then a pending or missing
        Workload may only be the cache lagging."""

    @property
    def workloads_quiet(self) -> bool:
        """Whether a wait for a Workload's admission timed out and the Workloads cache has taken
        in no change since (``workloads_went_quiet``): then no admission is on its way."""

    def workloads_went_quiet(self) -> None:
        """A wait for a Workload's admission timed out: mark the Workloads cache quiet until its
        next change, and wake the other waits."""
