"""The kinds the controller reads and writes: where each lives on the REST path, and the
kubernetes_asyncio list call its informer uses."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"


@dataclass(frozen=True)
class Kind:
    name: str  # the informer's name
    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        p = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            p += f"/namespaces/{namespace}"
        p += f"/{self.plural}"
        if name:
            p += f"/{name}"
        if subresource:
            p += f"/{subresource}"
        return p

    def list_call(self, api: client.ApiClient) -> tuple[Callable, tuple[Any, ...]]:
        """The list function and positional arguments an Informer needs (all namespaces)."""
        calls = {
            ("batch", "jobs"): client.BatchV1Api(api).list_job_for_all_namespaces,
            ("", "pods"): client.CoreV1Api(api).list_pod_for_all_namespaces,
            ("", "nodes"): client.CoreV1Api(api).list_node,
            ("", "namespaces"): client.CoreV1Api(api).list_namespace,
            ("scheduling.k8s.io", "priorityclasses"): client.SchedulingV1Api(api).list_priority_class,
        }
        call = calls.get((self.group, self.plural))
        if call is None:  # Kueue's kinds and the other workload kinds' CRDs
            return checked(client.CustomObjectsApi(api).list_cluster_custom_object), (
                self.group, self.version, self.plural)
        return checked(call), ()


def checked(list_func: Callable) -> Callable:
    """kubernetes_asyncio raises nothing for an error status when `_preload_content=False`: a
    failed list would read as an empty one (and empty the cache). Raise as a preloaded call would."""

    @functools.wraps(list_func)
    async def call(*args: Any, **kwargs: Any):
        resp = await list_func(*args, **kwargs)
        status = getattr(resp, "status", 200)
        if kwargs.get("_preload_content") is False and not kwargs.get("watch") and not 200 <= status <= 299:
            body = await resp.read()
            exc = ApiException(status=status, reason=getattr(resp, "reason", ""))
            exc.body = body.decode(errors="replace")
            raise exc
        return resp

    return call


def _kueue(plural: str, kind: str, namespaced: bool) -> Kind:
    return Kind(plural, KUEUE_GROUP, KUEUE_VERSION, plural, namespaced, kind)


JOBS = Kind("jobs", "batch", "v1", "jobs", True, "Job")
PODS = Kind("pods", "", "v1", "pods", True, "Pod")
NODES = Kind("nodes", "", "v1", "nodes", False, "Node")
NAMESPACES = Kind("namespaces", "", "v1", "namespaces", False, "Namespace")
PRIORITY_CLASSES = Kind("priorityclasses", "scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
EVENTS = Kind("events", "", "v1", "events", True, "Event")
LEASES = Kind("leases", "coordination.k8s.io", "v1", "leases", True, "Lease")
WORKLOADS = _kueue("workloads", "Workload", True)
RESOURCE_FLAVORS = _kueue("resourceflavors", "ResourceFlavor", False)
COHORTS = _kueue("cohorts", "Cohort", False)
CLUSTER_QUEUES = _kueue("clusterqueues", "ClusterQueue", False)
LOCAL_QUEUES = _kueue("localqueues", "LocalQueue", True)
WORKLOAD_PRIORITY_CLASSES = _kueue("workloadpriorityclasses", "WorkloadPriorityClass", False)
TOPOLOGIES = _kueue("topologies", "Topology", False)

WATCHED = (NAMESPACES, PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES, TOPOLOGIES, RESOURCE_FLAVORS, COHORTS, CLUSTER_QUEUES,
           LOCAL_QUEUES, WORKLOADS, JOBS, PODS, NODES)
