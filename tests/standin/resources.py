"""The resource types the API server stand-in serves, and how each one is addressed.

A `ResourceType` says where a kind lives on the REST path (`/api/v1` or `/apis/GROUP/VERSION`),
whether it is namespaced, whether it has a `/status` subresource, and how Kubernetes encodes it:
built-in types keep Go struct key order and list items carry no kind/apiVersion, custom resources
are unstructured JSON (keys sorted) and list items carry kind/apiVersion (fixtures fact 19).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    custom: bool = False  # a CustomResourceDefinition-served kind (unstructured JSON)
    has_generation: bool = False  # metadata.generation maintained by the registry strategy
    storage: str = ""  # several API versions of one kind share storage (events); defaults to plural.group
    create_only: bool = False  # a review: POST answers it, nothing is stored (tokenreviews, subjectaccessreviews)
    bookmark_skeleton: dict = field(default_factory=dict, compare=False, hash=False)
    schema: Any = field(default=None, compare=False, hash=False, repr=False)  # a CRD's openAPIV3Schema (crds.py)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """`jobs.batch`, `clusterqueues.kueue.x-k8s.io`, `pods`: the name used in Status messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_kind(self) -> str:
        """`Job.batch`: the name used in 422 Invalid messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def storage_key(self) -> str:
        return self.storage or self.group_resource

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        p = self.prefix
        if self.namespaced and namespace:
            p += f"/namespaces/{namespace}"
        p += f"/{self.plural}"
        if name:
            p += f"/{name}"
        return p


def _builtin(group: str, version: str, plural: str, kind: str, namespaced: bool, **kw) -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, **kw)


_KUEUE_CRDS = Path(__file__).resolve().parents[2] / "charts" / "gpuqueue" / "files" / "crds"


def _kueue_schema(plural: str) -> dict | None:
    """The storage version's schema of gpuqueue's own CRD (charts/gpuqueue/files/crds), so that what the
    controller writes is pruned and validated as a real API server serving that CRD would."""
    path = _KUEUE_CRDS / f"kueue.x-k8s.io_{plural}.yaml"
    if not path.exists():
        return None
    crd = yaml.safe_load(path.read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version["schema"]["openAPIV3Schema"]


def _kueue(plural: str, kind: str, namespaced: bool, status: bool = True) -> ResourceType:
    return ResourceType("kueue.x-k8s.io", "v1beta2", plural, kind, namespaced,
                        status_subresource=status, custom=True, has_generation=True, schema=_kueue_schema(plural))


# Bookmark objects of built-in kinds are an empty object of that kind as Go encodes it: non-omitempty
# fields show up as null/{} (fixtures jobs.watch.bookmarks.stream.jsonl, fact 21). Only the Job one is
# recorded; the others follow the same encoding rule from the 1.24 type definitions.
_TIME_NULL = {"creationTimestamp": None}
JOB_BOOKMARK = {"spec": {"template": {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}}},
                "status": {}}
POD_BOOKMARK = {"spec": {"containers": None}, "status": {}}

NAMESPACES = _builtin("", "v1", "namespaces", "Namespace", False, status_subresource=True,
                      bookmark_skeleton={"spec": {}, "status": {}})
NODES = _builtin("", "v1", "nodes", "Node", False, status_subresource=True,
                 bookmark_skeleton={"spec": {}, "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
                                                           "nodeInfo": {}}})
PODS = _builtin("", "v1", "pods", "Pod", True, status_subresource=True, bookmark_skeleton=POD_BOOKMARK)
EVENTS = _builtin("", "v1", "events", "Event", True, storage="events",
                  bookmark_skeleton={"involvedObject": {}, "source": {}, "firstTimestamp": None,
                                     "lastTimestamp": None, "eventTime": None, "reportingComponent": "",
                                     "reportingInstance": ""})
JOBS = _builtin("batch", "v1", "jobs", "Job", True, status_subresource=True, has_generation=True,
                bookmark_skeleton=JOB_BOOKMARK)
# Served for the ownerReferences of Jobs a CronJob made (no CronJob controller runs): the garbage
# collector must find the owner. Bookmark per the 1.24 type's encoding rule, not recorded.
CRON_JOBS = _builtin("batch", "v1", "cronjobs", "CronJob", True, status_subresource=True, has_generation=True,
                     bookmark_skeleton={"spec": {"schedule": "", "jobTemplate": {
                         "metadata": {"creationTimestamp": None}, "spec": JOB_BOOKMARK["spec"]}}, "status": {}})
LEASES = _builtin("coordination.k8s.io", "v1", "leases", "Lease", True, bookmark_skeleton={"spec": {}})
EVENTS_V1 = _builtin("events.k8s.io", "v1", "events", "Event", True, storage="events",
                     bookmark_skeleton={"eventTime": None, "regarding": {}, "deprecatedSource": {},
                                        "deprecatedFirstTimestamp": None, "deprecatedLastTimestamp": None})
PRIORITY_CLASSES = _builtin("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False,
                            bookmark_skeleton={"value": 0})
# Secret's and the webhook configurations' other fields are all omitempty, so their bookmarks are bare.
# Neither has defaulting or validation beyond metadata here (no Secret type "Opaque" default, no webhook
# failurePolicy/timeoutSeconds defaults): `certs ensure` writes complete objects.
SECRETS = _builtin("", "v1", "secrets", "Secret", True)
MUTATING_WEBHOOK_CONFIGURATIONS = _builtin("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                                           "MutatingWebhookConfiguration", False)
VALIDATING_WEBHOOK_CONFIGURATIONS = _builtin("admissionregistration.k8s.io", "v1",
                                             "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
                                             False)

# Owners of pods gpuqueue does not manage (a Deployment's ReplicaSet, a StatefulSet): stored and
# served, their controllers are not stood in for (a test creates the pods they would make).
REPLICA_SETS = _builtin("apps", "v1", "replicasets", "ReplicaSet", True, status_subresource=True, has_generation=True,
                        bookmark_skeleton={"spec": {"template": {"metadata": {"creationTimestamp": None},
                                                                 "spec": {"containers": None}}}, "status": {}})
STATEFUL_SETS = _builtin("apps", "v1", "statefulsets", "StatefulSet", True, status_subresource=True,
                         has_generation=True, bookmark_skeleton={"spec": {"template": {
                             "metadata": {"creationTimestamp": None}, "spec": {"containers": None}},
                             "serviceName": "", "updateStrategy": {}}, "status": {"replicas": 0}})
DEPLOYMENTS = _builtin("apps", "v1", "deployments", "Deployment", True, status_subresource=True, has_generation=True,
                       bookmark_skeleton={"spec": {"template": {"metadata": {"creationTimestamp": None},
                                                                "spec": {"containers": None}},
                                                   "strategy": {}}, "status": {}})
# Creating one makes its kind servable (crds.py); the CRD object itself is stored as sent.
CUSTOM_RESOURCE_DEFINITIONS = _builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                       "CustomResourceDefinition", False, status_subresource=True,
                                       has_generation=True)
CONFIG_MAPS = _builtin("", "v1", "configmaps", "ConfigMap", True)
CLUSTER_ROLES = _builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = _builtin("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False)
ROLES = _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role", True)
ROLE_BINDINGS = _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)
API_SERVICES = _builtin("apiregistration.k8s.io", "v1", "apiservices", "APIService", False, status_subresource=True)
TOKEN_REVIEWS = _builtin("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, create_only=True)
SUBJECT_ACCESS_REVIEWS = _builtin("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False,
                                  create_only=True)

# Kueue's CRDs declare no status subresource for ResourceFlavor and WorkloadPriorityClass (they have
# no status), so neither does the stand-in: /status on them is a 404 as on a real cluster.
RESOURCE_FLAVORS = _kueue("resourceflavors", "ResourceFlavor", False, status=False)
COHORTS = _kueue("cohorts", "Cohort", False)
CLUSTER_QUEUES = _kueue("clusterqueues", "ClusterQueue", False)
LOCAL_QUEUES = _kueue("localqueues", "LocalQueue", True)
WORKLOADS = _kueue("workloads", "Workload", True)
WORKLOAD_PRIORITY_CLASSES = _kueue("workloadpriorityclasses", "WorkloadPriorityClass", False, status=False)
TOPOLOGIES = _kueue("topologies", "Topology", False, status=False)

ALL: tuple[ResourceType, ...] = (
    NAMESPACES, NODES, PODS, EVENTS, JOBS, CRON_JOBS, LEASES, EVENTS_V1, PRIORITY_CLASSES,
    SECRETS, MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS, REPLICA_SETS, STATEFUL_SETS,
    DEPLOYMENTS, CUSTOM_RESOURCE_DEFINITIONS,
    RESOURCE_FLAVORS, COHORTS, CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, WORKLOAD_PRIORITY_CLASSES, TOPOLOGIES,
    CONFIG_MAPS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS, API_SERVICES,
    TOKEN_REVIEWS, SUBJECT_ACCESS_REVIEWS,
)

BY_PATH: dict[tuple[str, str, str], ResourceType] = {(r.group, r.version, r.plural): r for r in ALL}
BY_STORAGE: dict[str, list[ResourceType]] = {}
for _r in ALL:
    BY_STORAGE.setdefault(_r.storage_key, []).append(_r)
