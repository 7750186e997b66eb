"""The OpenAPI documents of the visibility group (v2 at /openapi/v2, v3 at /openapi/v3 and its group
document), which kube-apiserver's aggregator loads from every APIService's backend: without them it
logs a failed load and retries with backoff for ever, and `kubectl explain` knows nothing of the
group. They describe what visibility.py serves at each version: the two pendingworkloads GETs and
Kueue's PendingWorkloadsSummary / PendingWorkload types. v2 is one document holding every version;
v3 has one document per group-version, as a generic API server publishes them."""

from __future__ import annotations

import hashlib

import orjson
from aiohttp import web

GROUP = "visibility.kueue.x-k8s.io"
# As Kueue v0.18 serves the group: v1beta2, preferred, and still v1beta1, the same types in each.
VERSIONS = ("v1beta2", "v1beta1")


def _name(version: str, kind: str) -> str:
    return f"io.x-k8s.kueue.visibility.{version}.{kind}"


def _gvk(version: str) -> dict:
    return {"group": GROUP, "version": version, "kind": "PendingWorkloadsSummary"}


def _ref(v3: bool, name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"}


def _schemas(v3: bool, version: str) -> dict:
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
                              "items": {"type": "array", "items": _ref(v3, _name(version, "PendingWorkload"))}},
               "x-kubernetes-group-version-kind": [_gvk(version)]}
    return {_name(version, "PendingWorkload"): pending, _name(version, "PendingWorkloadsSummary"): summary}


def _operation(v3: bool, version: str, op_id: str, what: str, namespaced: bool) -> dict:
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
    ok = _ref(v3, _name(version, "PendingWorkloadsSummary"))
    response = {"description": "OK", "content": {"application/json": {"schema": ok}}} if v3 else \
        {"description": "OK", "schema": ok}
    return {"get": {"operationId": op_id, "description": f"the pending workloads of a {what}, in queue order",
                    "tags": [f"visibility_{version}"], "parameters": params, "responses": {"200": response},
                    "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": _gvk(version)}}


def _paths(v3: bool, version: str) -> dict:
    prefix = f"/apis/{GROUP}/{version}"
    # operation ids name the version: the v2 document holds every version, and its ids are unique
    title = version[0].upper() + version[1:]
    return {f"{prefix}/clusterqueues/{{name}}/pendingworkloads":
            _operation(v3, version, f"get{title}ClusterQueuePendingWorkloadsSummary", "ClusterQueue", False),
            f"{prefix}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads":
            _operation(v3, version, f"get{title}NamespacedLocalQueuePendingWorkloadsSummary", "LocalQueue", True)}


INFO = {"title": "gpuqueue visibility (Kueue's visibility.kueue.x-k8s.io)", "version": VERSIONS[0]}
V2 = orjson.dumps({"swagger": "2.0", "info": INFO,
                   "paths": {k: v for version in VERSIONS for k, v in _paths(False, version).items()},
                   "definitions": {k: v for version in VERSIONS for k, v in _schemas(False, version).items()}})
V3_GROUPS = {f"apis/{GROUP}/{version}": orjson.dumps({"openapi": "3.0.0", "info": INFO, "paths": _paths(True, version),
                                                      "components": {"schemas": _schemas(True, version)}})
             for version in VERSIONS}
V3_INDEX = orjson.dumps({"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash="
                                          f"{hashlib.sha512(doc).hexdigest()[:128].upper()}"}
                                   for path, doc in V3_GROUPS.items()}})


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json", headers={"Cache-Control": "no-cache, private"})


async def openapi_v2(_: web.Request) -> web.Response:
    return _json(V2)


async def openapi_v3(_: web.Request) -> web.Response:
    return _json(V3_INDEX)


def _openapi_v3_group(doc: bytes):
    async def handler(_: web.Request) -> web.Response:
        return _json(doc)
    return handler


def add_routes(app: web.Application) -> None:
    app.router.add_get("/openapi/v2", openapi_v2)
    app.router.add_get("/openapi/v3", openapi_v3)
    for path, doc in V3_GROUPS.items():
        app.router.add_get(f"/openapi/v3/{path}", _openapi_v3_group(doc))
