"""The calls the verbs make: Kueue's objects through kubernetes_asyncio's CustomObjectsApi, lists
paged as kueuectl pages them, patches as JSON merge patches (what kueuectl sends)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpuqueue.api.kueue import KUEUE_GROUP
from gpuqueue.kueuectl import UsageError

VERSION = "v1beta2"
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "gpuqueue-kueuectl"


def page_size() -> int:
    """Objects per list request: kueuectl's default, or $KUEUECTL_LIST_REQUEST_LIMIT."""
    raw = os.environ.get("KUEUECTL_LIST_REQUEST_LIMIT", "100")
    try:
        limit = int(raw)
    except ValueError:
        raise UsageError(f"KUEUECTL_LIST_REQUEST_LIMIT: must be a whole number, got {raw!r}") from None
    if limit < 0:
        raise UsageError(f"KUEUECTL_LIST_REQUEST_LIMIT: must be >= 0, got {limit}")
    return limit


@dataclass(frozen=True)
class Resource:
    plural: str
    singular: str
    namespaced: bool

    @property
    def qualified(self) -> str:
        """How kubectl names an object of this kind: `clusterqueue.kueue.x-k8s.io/NAME`."""
        return f"{self.singular}.{KUEUE_GROUP}"


WORKLOADS = Resource("workloads", "workload", True)
LOCAL_QUEUES = Resource("localqueues", "localqueue", True)
CLUSTER_QUEUES = Resource("clusterqueues", "clusterqueue", False)


class Kueue:
    """Kueue's API through one kubernetes_asyncio ApiClient (closed by the caller)."""

    def __init__(self, api: Any) -> None:
        from kubernetes_asyncio import client

        api.user_agent = USER_AGENT
        self.api = api
        self.objects = client.CustomObjectsApi(api)

    async def list(self, res: Resource, namespace: str | None, label_selector: str = "",
                   field_selector: str = "") -> list[dict]:
        """Every object (all namespaces when `namespace` is None), page by page."""
        items: list[dict] = []
        token = None
        while True:
            kw: dict[str, Any] = {"limit": page_size()}
            for key, value in (("label_selector", label_selector), ("field_selector", field_selector),
                               ("_continue", token)):
                if value:
                    kw[key] = value
            if res.namespaced and namespace is not None:
                page = await self.objects.list_namespaced_custom_object(KUEUE_GROUP, VERSION, namespace, res.plural, **kw)
            else:
                page = await self.objects.list_cluster_custom_object(KUEUE_GROUP, VERSION, res.plural, **kw)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    async def get(self, res: Resource, namespace: str | None, name: str) -> dict:
        if res.namespaced:
            return await self.objects.get_namespaced_custom_object(KUEUE_GROUP, VERSION, namespace, res.plural, name)
        return await self.objects.get_cluster_custom_object(KUEUE_GROUP, VERSION, res.plural, name)

    async def patch(self, res: Resource, namespace: str | None, name: str, body: dict, dry_run: bool = False) -> dict:
        kw: dict[str, Any] = {"_content_type": MERGE_PATCH}
        if dry_run:
            kw["dry_run"] = "All"
        if res.namespaced:
            return await self.objects.patch_namespaced_custom_object(KUEUE_GROUP, VERSION, namespace, res.plural,
                                                                     name, body, **kw)
        return await self.objects.patch_cluster_custom_object(KUEUE_GROUP, VERSION, res.plural, name, body, **kw)

    async def create(self, res: Resource, namespace: str, body: dict, dry_run: bool = False) -> dict:
        kw = {"dry_run": "All"} if dry_run else {}
        return await self.objects.create_namespaced_custom_object(KUEUE_GROUP, VERSION, namespace, res.plural,
                                                                  body, **kw)


# the version Kueue v0.18's kueuectl asks (v1beta1 is served too)
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"


def visibility_unavailable(exc: BaseException) -> str:
    """Why the visibility API did not answer, in a phrase."""
    code = getattr(exc, "status", None)
    return f"the visibility API answered {code}: is manifests/visibility applied?" if code else str(exc)


async def pending_workloads(api: Any, namespace: str, local_queue: str, page: int = 1000) -> list[dict]:
    """Kueue's visibility API: the LocalQueue's pending workloads (PendingWorkloadsSummary items,
    with their positions), every page, in its order. `api`: a kubernetes_asyncio ApiClient. Raises
    what the call raises (an ApiException 404: no such LocalQueue, or the API not served)."""
    path = f"{VISIBILITY}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
    items: list[dict] = []
    while True:
        answer = await api.call_api(path, "GET", query_params=[("offset", len(items)), ("limit", page)],
                                    header_params={"Accept": "application/json"}, response_types_map={200: "object"},
                                    auth_settings=["BearerToken"], _return_http_data_only=True)
        got = (answer or {}).get("items") or []
        items.extend(got)
        if len(got) < page:
            return items

