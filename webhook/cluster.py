"""The webhook's view of the cluster, kept current by informers (gpuqueue/kube/informer.py), and
the one object it reads on demand (the pod of a binding).

``WatchedQueueView`` answers the questions of the webhook's decisions (QueueView: does this
LocalQueue exist, a namespace's labels, the default WorkloadPriorityClass; CohortView: a
Cohort's parent; the resources ClusterQueues cover, which make a pod need an admission) from
dictionaries of the watched objects kept current by ``apply_event``;
``watch_cluster`` runs one informer per watched kind (list, then watch; relist on 410, resume
after a dropped stream) and feeds its add/update/delete callbacks to the view. Without a
cluster the webhook runs on an empty view: Jobs that carry the queue label are still queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from gpuqueue.jobframework.managed import DEFAULT_PRIORITY_CLASS_ANNOTATION

from gpuqueue.kube.version import server_version as _server_version

log = logging.getLogger("gpuqueue.webhook")

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
WATCHED = ("namespaces", "localqueues", "cohorts", "workloadpriorityclasses", "clusterqueues")
POD_READ_TIMEOUT = 2.0  # seconds; well inside the body timeout and kube-apiserver's webhook timeout


def covered_resources(cluster_queue: Mapping[str, Any]) -> frozenset[str]:
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    return frozenset(r for g in groups if isinstance(g, Mapping) for r in g.get("coveredResources") or []
                     if isinstance(r, str))


class WatchedQueueView:
    def __init__(self) -> None:
        self.local_queues: set[tuple[str, str]] = set()
        self.namespaces: dict[str, dict[str, str]] = {}
        self.cohort_parents: dict[str, str] = {}
        self.default_classes: dict[str, int] = {}  # name -> value, of classes marked default
        self.covered: dict[str, frozenset[str]] = {}  # ClusterQueue name -> its covered resources
        self._covered_union: frozenset[str] | None = None
        self.sources: list = []  # the informers feeding this view (see ``informers``)

    # QueueView / CohortView
    def local_queue_exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.local_queues

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.namespaces.get(namespace)

    def default_priority_class(self) -> str | None:
        if not self.default_classes:
            return None
        # Several marked: the highest value wins, then the name, so the answer is stable.
        return max(self.default_classes.items(), key=lambda kv: (kv[1], kv[0]))[0]

    def cohort_parent(self, name: str) -> str | None:
        return self.cohort_parents.get(name)

    def covered_resources(self) -> frozenset[str] | None:
        """Every resource some ClusterQueue covers; None until the ClusterQueues are listed."""
        if not any(inf.name == "webhook:clusterqueues" and inf.synced.is_set() for inf in self.sources):
            return None
        if self._covered_union is None:
            self._covered_union = frozenset().union(*self.covered.values())
        return self._covered_union

    def ready(self) -> bool:
        return bool(self.sources) and all(inf.synced.is_set() for inf in self.sources)

    # feeding
    def apply_event(self, resource: str, event_type: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if not isinstance(name, str):
            return
        gone = event_type == "DELETED"
        if resource == "localqueues":
            (self.local_queues.discard if gone else self.local_queues.add)((namespace, name))
        elif resource == "namespaces":
            if gone:
                self.namespaces.pop(name, None)
            else:
                self.namespaces[name] = dict(meta.get("labels") or {})
        elif resource == "cohorts":
            spec = obj.get("spec") or {}
            parent = spec.get("parentName") or spec.get("parent")
            if gone or not parent:
                self.cohort_parents.pop(name, None)
            else:
                self.cohort_parents[name] = parent
        elif resource == "clusterqueues":
            if gone:
                self.covered.pop(name, None)
            else:
                self.covered[name] = covered_resources(obj)
            self._covered_union = None
        elif resource == "workloadpriorityclasses":
            marked = (meta.get("annotations") or {}).get(DEFAULT_PRIORITY_CLASS_ANNOTATION) == "true"
            if gone or not marked:
                self.default_classes.pop(name, None)
            else:
                self.default_classes[name] = int(obj.get("value") or 0)


def informers(view: WatchedQueueView, api) -> list:
    """One informer per watched kind, feeding ``view``; ``view.ready()`` follows their first lists."""
    from kubernetes_asyncio import client

    from gpuqueue.kube.informer import Informer

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    made = []
    for resource in WATCHED:
        if resource == "namespaces":
            inf = Informer(core.list_namespace, name="webhook:namespaces")
        else:
            inf = Informer(custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, resource,
                           name=f"webhook:{resource}")
        inf.add_handler(on_add=lambda obj, r=resource: view.apply_event(r, "ADDED", obj),
                        on_update=lambda old, new, r=resource: view.apply_event(r, "MODIFIED", new),
                        on_delete=lambda obj, r=resource: view.apply_event(r, "DELETED", obj))
        made.append(inf)
    view.sources = made
    return made


async def watch_cluster(view: WatchedQueueView, configuration=None) -> None:
    """Keep ``view`` current until cancelled (``configuration``: a kubernetes_asyncio Configuration,
    from ``gpuqueue.kube.config.load_config``; by default kubernetes_asyncio's default one)."""
    from kubernetes_asyncio import client

    async with client.ApiClient(configuration) as api:
        running = informers(view, api)
        try:
            await asyncio.gather(*(inf.start() for inf in running))
        finally:
            for inf in running:
                await inf.stop()


class PodLookup(Protocol):
    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The pod as stored, None when it does not exist; LookupError naming the problem when it
        cannot be read."""


class NoPods:
    """Without a cluster no pod can be read."""

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        raise LookupError("the webhook runs without a cluster")


class ApiPods:
    """Reads pods from the API server (``get pods``), each read within POD_READ_TIMEOUT."""

    def __init__(self, api) -> None:  # a kubernetes_asyncio ApiClient, kept open by the caller
        from kubernetes_asyncio import client

        self.core = client.CoreV1Api(api)

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        import aiohttp
        import orjson
        from kubernetes_asyncio.client.rest import ApiException

        async def read() -> Mapping[str, Any] | None:
            # Not preloaded (kubernetes_asyncio would build model objects), so an error status
            # raises nothing by itself.
            resp = await self.core.read_namespaced_pod(name, namespace, _preload_content=False)
            try:
                if resp.status == 404:
                    return None
                if not 200 <= resp.status < 300:
                    raise LookupError(f"reading the pod failed: HTTP {resp.status} {resp.reason}")
                return orjson.loads(await resp.read())
            finally:
                resp.release()

        try:
            return await asyncio.wait_for(read(), POD_READ_TIMEOUT)
        except ApiException as exc:
            raise LookupError(f"reading the pod failed: HTTP {exc.status} {exc.reason}") from None
        except (asyncio.TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            raise LookupError(f"reading the pod failed: {type(exc).__name__}: {exc}".rstrip(": ")) from None


async def server_version(api) -> Mapping[str, Any] | None:
    """GET /version (every user may: system:public-info-viewer); None when it cannot be read."""
    return await _server_version(api, POD_READ_TIMEOUT)
