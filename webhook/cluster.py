"""The webhook's view of the cluster, filled by kubernetes-asyncio watches.

``ClusterView`` answers the QueueView and CohortView questions from dictionaries
kept current by ``apply_event``; the watch loops (``watch_cluster``) only list,
watch, and feed events to it. Without a cluster the webhook runs on an empty view:
Jobs that carry the queue label are still queued.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

from webhook.mutation import DEFAULT_PRIORITY_CLASS_ANNOTATION

log = logging.getLogger("gpuqueue.webhook")

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
WATCHED = ("namespaces", "localqueues", "cohorts", "workloadpriorityclasses")


class ClusterView:
    def __init__(self) -> None:
        self.local_queues: set[tuple[str, str]] = set()
        self.namespaces: dict[str, dict[str, str]] = {}
        self.cohort_parents: dict[str, str] = {}
        self.default_classes: dict[str, int] = {}  # name -> value, of classes marked default
        self.synced: set[str] = set()

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

    def ready(self) -> bool:
        return self.synced >= set(WATCHED)

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
        elif resource == "workloadpriorityclasses":
            marked = (meta.get("annotations") or {}).get(DEFAULT_PRIORITY_CLASS_ANNOTATION) == "true"
            if gone or not marked:
                self.default_classes.pop(name, None)
            else:
                self.default_classes[name] = int(obj.get("value") or 0)

    def replace_all(self, resource: str, items: list[Mapping[str, Any]]) -> None:
        """A fresh LIST: forget what was known of ``resource`` and load ``items``."""
        if resource == "localqueues":
            self.local_queues.clear()
        elif resource == "namespaces":
            self.namespaces.clear()
        elif resource == "cohorts":
            self.cohort_parents.clear()
        elif resource == "workloadpriorityclasses":
            self.default_classes.clear()
        for item in items:
            self.apply_event(resource, "ADDED", item)
        self.synced.add(resource)


async def load_cluster_config() -> bool:
    """In-cluster service account, else kubeconfig; False when neither is there."""
    from kubernetes_asyncio import config

    try:
        config.load_incluster_config()
        return True
    except config.ConfigException:
        pass
    paths = os.environ.get("KUBECONFIG") or os.path.expanduser(config.KUBE_CONFIG_DEFAULT_LOCATION)
    if not any(os.path.exists(p) for p in paths.split(os.pathsep) if p):
        return False  # checked here so the caller's one warning is the only one
    try:
        await config.load_kube_config()
        return True
    except (config.ConfigException, FileNotFoundError, OSError, TypeError):
        return False


async def _watch_one(view: ClusterView, api, resource: str) -> None:
    from kubernetes_asyncio import client, watch
    from kubernetes_asyncio.client.rest import ApiException

    if resource == "namespaces":
        core = client.CoreV1Api(api)
        list_fn, args = core.list_namespace, ()
    else:
        custom = client.CustomObjectsApi(api)
        list_fn, args = custom.list_cluster_custom_object, (KUEUE_GROUP, KUEUE_VERSION, resource)
    backoff = 1.0
    while True:
        try:
            listed = await list_fn(*args, _preload_content=False)
            body = await listed.json()
            view.replace_all(resource, body.get("items") or [])
            rv = (body.get("metadata") or {}).get("resourceVersion")
            backoff = 1.0
            while True:
                w = watch.Watch()
                async with w.stream(list_fn, *args, resource_version=rv, timeout_seconds=300,
                                    allow_watch_bookmarks=True, _preload_content=False) as stream:
                    async for event in stream:
                        obj = event["raw_object"]
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            view.apply_event(resource, event["type"], obj)
        except asyncio.CancelledError:
            raise
        except ApiException as exc:
            # 410 Expired (too old resourceVersion) and anything else: re-list.
            log.warning("watch of %s ended (%s %s); re-listing", resource, exc.status, exc.reason)
        except Exception as exc:  # network trouble: keep the last view, retry with backoff
            log.warning("watch of %s failed (%s); retrying in %.0fs", resource, exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)


async def watch_cluster(view: ClusterView) -> None:
    from kubernetes_asyncio import client

    async with client.ApiClient() as api:
        await asyncio.gather(*(_watch_one(view, api, r) for r in WATCHED))
