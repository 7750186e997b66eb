"""The OpenAPI documents of the visibility group (v2 at /openapi/v2, v3 at /openapi/v3 and its group
document), which kube-apiserver's aggregator loads from every APIService's backend: without them it
logs a failed load and retries with backoff for ever, and `kubectl explain` knows nothing of the
group. They describe what visibility.py serves: the two pendingworkloads GETs and Kueue's
PendingWorkloadsSummary / PendingWorkload types."""

from __future__ import annotations

import hashlib

import orjson
from aiohttp import web

GROUP, VERSION = "visibility.kueue.x-k8s.io", "v1beta1"
PREFIX = f"/apis/{GROUP}/{VERSION}"
V3_GROUP_PATH = f"apis/{GROUP}/{VERSION}"
_NAME = f"io.x-k8s.kueue.visibility.{VERSION}"
_GVK = [{"group": GROUP, "version": VERSION, "kind": "PendingWorkloadsSummary"}]


def _ref(v3: bool, name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"}


def _schemas(v3: bool) -> dict:
    meta = {"type": "object", "description": "The Workload's name, namespace, creationTimestamp and ownerReferences",
            "additionalProperties": True}
    pending = {"type": "object", "description": "PendingWorkload is a user-facing representation of a pending "
               "workload that summarizes the relevant information for position in the cluster queue.",
               "required": ["priority", "localQueueName", "positionInClusterQueue", "positionInLocalQueue"],
               "properties": {
                   "metadata": meta,
                   "priority": {"type": "integer", "format": "int32", "description": "Priority indicates the "
                                "workload's priority"},
                   "localQueueName": {"type": "string", "description": "LocalQueueName indicates the name of the "
                                      "LocalQueue the workload is submitted to"},
                   "positionInClusterQueue": {"type": "integer", "format": "int32",
                                              "description": "PositionInClusterQueue indicates the workload's "
                                              "position in the ClusterQueue, starting from 0"},
                   "positionInLocalQueue": {"type": "integer", "format": "int32",
                                            "description": "PositionInLocalQueue indicates the workload's position "
                                            "in the LocalQueue, starting from 0"}}}
    summary = {"type": "object", "description": "PendingWorkloadsSummary contains a list of pending workloads in the "
               "context of the query (within LocalQueue or ClusterQueue).",
               "required": ["items"],
               "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                              "metadata": {"type": "object", "additionalProperties": True},
                              "items": {"type": "array", "items": _ref(v3, f"{_NAME}.PendingWorkload")}},
               "x-kubernetes-group-version-kind": _GVK}
    return {f"{_NAME}.PendingWorkload": pending, f"{_NAME}.PendingWorkloadsSummary": summary}


def _operation(v3: bool, op_id: str, what: str, namespaced: bool) -> dict:
    params = [{"name": "name", "in": "path", "required": True, "description": f"name of the {what}",
               **({"schema": {"type": "string"}} if v3 else {"type": "string"})}]
    if namespaced:
        params.append({"name": "namespace", "in": "path", "required": True, "description": "object name and auth "
                       "scope", **({"schema": {"type": "string"}} if v3 else {"type": "string"})})
    for q, desc in (("limit", "the number of items to return (0 or absent: 1000)"),
                    ("offset", "the position of the first item to return")):
        params.append({"name": q, "in": "query", "description": desc,
                       **({"schema": {"type": "integer", "format": "int64"}} if v3 else
                          {"type": "integer", "format": "int64"})})
    ok = _ref(v3, f"{_NAME}.PendingWorkloadsSummary")
    response = {"description": "OK", "content": {"application/json": {"schema": ok}}} if v3 else \
        {"description": "OK", "schema": ok}
    return {"get": {"operationId": op_id, "description": f"the pending workloads of a {what}, in queue order",
                    "tags": [f"visibility_{VERSION}"], "parameters": params, "responses": {"200": response},
                    "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": _GVK[0]}}


def _paths(v3: bool) -> dict:
    return {f"{PREFIX}/clusterqueues/{{name}}/pendingworkloads":
            _operation(v3, "getClusterQueuePendingWorkloadsSummary", "ClusterQueue", False),
            f"{PREFIX}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads":
            _operation(v3, "getNamespacedLocalQueuePendingWorkloadsSummary", "LocalQueue", True)}


INFO = {"title": "gpuqueue visibility (Kueue's visibility.kueue.x-k8s.io)", "version": VERSION}
V2 = orjson.dumps({"swagger": "2.0", "info": INFO, "paths": _paths(False), "definitions": _schemas(False)})
V3_GROUP = orjson.dumps({"openapi": "3.0.0", "info": INFO, "paths": _paths(True),
                         "components": {"schemas": _schemas(True)}})
V3_HASH = hashlib.sha512(V3_GROUP).hexdigest()[:128].upper()
V3_INDEX = orjson.dumps({"paths": {V3_GROUP_PATH: {"serverRelativeURL": f"/openapi/v3/{V3_GROUP_PATH}?hash={V3_HASH}"}}})


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "no-cache, private"})


async def openapi_v2(_: web.Request) -> web.Response:
    return _json(V2)


async def openapi_v3(_: web.Request) -> web.Response:
    return _json(V3_INDEX)


async def openapi_v3_group(_: web.Request) -> web.Response:
    return _json(V3_GROUP)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/openapi/v2", openapi_v2)
    app.router.add_get("/openapi/v3", openapi_v3)
    app.router.add_get(f"/openapi/v3/{V3_GROUP_PATH}", openapi_v3_group)
