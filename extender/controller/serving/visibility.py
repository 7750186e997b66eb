"""Kueue's visibility API (visibility.kueue.x-k8s.io, at v1beta2 and v1beta1 as Kueue v0.18 serves
it), served by the controller process on --visibility-port for kube-aggregator (manifests/visibility/):

    GET /apis/visibility.kueue.x-k8s.io/VERSION/clusterqueues/NAME/pendingworkloads?limit=&offset=
    GET /apis/visibility.kueue.x-k8s.io/VERSION/namespaces/NS/localqueues/NAME/pendingworkloads?limit=&offset=

Both versions give the same answer, in the apiVersion asked: a PendingWorkloadsSummary of
PendingWorkload items (metadata, priority, localQueueName, positionInClusterQueue,
positionInLocalQueue, both from 0), Kueue's types. The order is the
leader's engine's own queue order (QuotaEngine.pending_in_order: priority, then creation or
requeue time, then submission), as of the request. A follower has no engine: it answers from its
watch caches in the order a leader elected now would rebuild (recovered_order), which can differ
from the leader's among workloads queued in the same second. Callers are authenticated and
authorised as kube-apiserver's delegated auth does (delegated_auth.py): `get` on
clusterqueues/pendingworkloads or localqueues/pendingworkloads of the group.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Iterable

from aiohttp import web

from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.serving import visibility_openapi
from gpuqueue.extender.controller.serving.delegated_auth import DelegatedAuth, guarded
from gpuqueue.extender.controller.serving.visibility_openapi import GROUP, VERSIONS

# one route per path for every version; handlers read the version asked from match_info
PREFIX = f"/apis/{GROUP}/{{version:{'|'.join(VERSIONS)}}}"
DEFAULT_LIMIT = 1000  # Kueue's, also for limit=0
OWNER_REFERENCE_FIELDS = ("apiVersion", "kind", "name", "uid")
NOT_FOUND = "the server could not find the requested resource"


@dataclass(frozen=True)
class Queued:
    """A pending workload, where it waits."""

    namespace: str
    local_queue: str
    priority: int
    workload: dict | None  # its Workload as the cache holds it (None: not created yet)
    name: str  # the Workload's name


def summary(ordered: Iterable[Queued], local_queue: tuple[str, str] | None, offset: int, limit: int,
            version: str) -> dict:
    """Kueue's PendingWorkloadsSummary (of `version`) of a ClusterQueue's workloads in queue order
    (only those of `local_queue`, namespace and name, when given), items offset..offset+limit."""
    items, in_lq = [], {}
    for position, q in enumerate(ordered):
        lq = (q.namespace, q.local_queue)
        lq_position = in_lq.get(lq, 0)
        in_lq[lq] = lq_position + 1
        if local_queue is not None and lq != local_queue:
            continue
        meta = (q.workload or {}).get("metadata") or {}
        metadata = {"name": q.name, "namespace": q.namespace,
                    "creationTimestamp": meta.get("creationTimestamp")}
        if meta.get("ownerReferences"):  # as Kueue copies them: no controller, no blockOwnerDeletion
            metadata["ownerReferences"] = [{k: ref[k] for k in OWNER_REFERENCE_FIELDS if k in ref}
                                           for ref in meta["ownerReferences"]]
        items.append({"metadata": metadata, "priority": q.priority, "localQueueName": q.local_queue,
                      "positionInClusterQueue": position, "positionInLocalQueue": lq_position})
    return {"kind": "PendingWorkloadsSummary", "apiVersion": f"{GROUP}/{version}",
            "metadata": {"creationTimestamp": None}, "items": items[offset:offset + limit]}


def engine_order(ctl, cq: str) -> list[Queued]:
    """The leader's: its engine's queue, less the victims whose reservation still stands in the API."""
    workloads = ctl.informers["workloads"]
    out = []
    for p in ctl.engine.pending_in_order(cq):
        st = ctl.jobs.get(p.spec.key)
        if st is None or p.spec.key in ctl.workload_writes.evicting:
            continue
        out.append(Queued(st.namespace, p.spec.queue_name, p.spec.priority,
                          workloads.get(f"{st.namespace}/{st.wl_name}"), st.wl_name))
    return out


def _queue_time(wl: dict) -> str:
    c = W.condition(wl, "Requeued")
    if c and c.get("status") == "True":
        return c.get("lastTransitionTime", "")
    return wl["metadata"].get("creationTimestamp", "")


def recovered_order(workloads: Iterable[dict], local_queues: dict[str, dict], cq: str) -> list[Queued]:
    """A follower's: the pending Workloads of `cq` in the order a leader rebuilding from the API
    would queue them (priority, then requeue or creation time, then creation, then name)."""
    pending = []
    for wl in workloads:
        meta = wl["metadata"]
        lq_name = (wl.get("spec") or {}).get("queueName", "")
        lq = local_queues.get(f"{meta.get('namespace')}/{lq_name}")
        if (lq or {}).get("spec", {}).get("clusterQueue") != cq or W.is_true(wl, "QuotaReserved") \
                or W.is_true(wl, "Finished"):
            continue
        pending.append(wl)
    pending.sort(key=lambda o: (-((o.get("spec") or {}).get("priority") or 0), _queue_time(o),
                                o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"]))
    return [Queued(o["metadata"]["namespace"], o["spec"].get("queueName", ""), o["spec"].get("priority") or 0, o,
                   o["metadata"]["name"]) for o in pending]


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "reason": reason, "code": code}, status=code)


def _page(request: web.Request) -> tuple[int, int]:
    values = {}
    for key, default in (("offset", 0), ("limit", DEFAULT_LIMIT)):
        raw = request.query.get(key)
        try:
            values[key] = default if raw in (None, "") else int(raw)
        except ValueError:
            raise web.HTTPBadRequest() from None
        if values[key] < 0:
            raise web.HTTPBadRequest()
    return values["offset"], values["limit"] or DEFAULT_LIMIT


class Visibility:
    def __init__(self, ctl) -> None:
        self.ctl = ctl

    def ordered(self, cq: str) -> list[Queued] | None:
        """None when there is no such ClusterQueue."""
        ctl = self.ctl
        if ctl.informers["clusterqueues"].get(cq) is None:
            return None
        engine = ctl.engine if ctl.leader and ctl.recovered else None
        if engine is not None:
            return engine_order(ctl, cq)
        lqs = {f"{o['metadata'].get('namespace')}/{o['metadata']['name']}": o for o in ctl.informers["localqueues"].list()}
        return recovered_order(ctl.informers["workloads"].list(), lqs, cq)

    async def cluster_queue(self, request: web.Request) -> web.Response:
        return self._answer(request, request.match_info["name"], None)

    async def local_queue(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["namespace"], request.match_info["name"]
        lq = self.ctl.informers["localqueues"].get(f"{ns}/{name}")
        if lq is None:
            return _status(404, "NotFound", f'localqueue.{GROUP} "{name}" not found')
        return self._answer(request, (lq.get("spec") or {}).get("clusterQueue", ""), (ns, name))

    def _answer(self, request: web.Request, cq: str, local_queue: tuple[str, str] | None) -> web.Response:
        try:
            offset, limit = _page(request)
        except web.HTTPBadRequest:
            return _status(400, "BadRequest", "offset and limit must be integers of 0 or more")
        ordered = self.ordered(cq)
        if ordered is None:
            if local_queue is not None:  # a LocalQueue whose ClusterQueue is missing: nothing is queued
                ordered = []
            else:
                return _status(404, "NotFound", f'clusterqueue.{GROUP} "{cq}" not found')
        return web.json_response(summary(ordered, local_queue, offset, limit, request.match_info["version"]))


def _attributes(request: web.Request) -> tuple[dict, str]:
    info = request.match_info
    resource = "localqueues" if "namespace" in info else "clusterqueues"
    attrs = {"verb": "get", "group": GROUP, "version": info["version"], "resource": resource,
             "subresource": "pendingworkloads", "name": info["name"]}
    where = "at the cluster scope"
    if "namespace" in info:
        attrs["namespace"] = info["namespace"]
        where = f'in the namespace "{info["namespace"]}"'
    return {"resourceAttributes": attrs}, (f'get resource "{resource}/pendingworkloads" in API group "{GROUP}" {where}')


async def _discovery(request: web.Request) -> web.Response:
    """The APIResourceList kube-aggregator reads to mark the APIService available."""
    def res(name, singular, namespaced, verbs):
        return {"name": name, "singularName": singular, "namespaced": namespaced, "kind": "PendingWorkloadsSummary",
                "verbs": verbs}

    # As Kueue's server lists them: clusterqueues and localqueues are there only to carry their
    # pendingworkloads subresources, and serve no verb of their own.
    version = request.match_info["version"]
    return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{version}",
                              "resources": [res("clusterqueues", "clusterqueue", False, []),
                                            res("clusterqueues/pendingworkloads", "", False, ["get"]),
                                            res("localqueues", "localqueue", True, []),
                                            res("localqueues/pendingworkloads", "", True, ["get"])]})


@web.middleware
async def status_not_found(request: web.Request, handler):
    """Anything else (GET .../clusterqueues/NAME among others) is the generic API server's 404 Status."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _status(404, "NotFound", NOT_FOUND)
    except web.HTTPMethodNotAllowed:
        return _status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def build_visibility_app(ctl, auth: DelegatedAuth) -> web.Application:
    v = Visibility(ctl)
    app = web.Application(middlewares=[status_not_found])
    app.router.add_get(PREFIX, _discovery)
    visibility_openapi.add_routes(app)
    app.router.add_get(PREFIX + "/clusterqueues/{name}/pendingworkloads",
                       guarded(auth, _attributes, v.cluster_queue, status_json=True))
    app.router.add_get(PREFIX + "/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
                       guarded(auth, _attributes, v.local_queue, status_json=True))
    return app


async def start_visibility(ctl, auth: DelegatedAuth, host: str, port: int,
                           ssl_context: ssl.SSLContext) -> web.AppRunner:
    """HTTPS only; `ssl_context` should also verify kube-aggregator's front-proxy certificate
    (with_front_proxy_ca) so that its forwarded requests are recognised."""
    runner = web.AppRunner(build_visibility_app(ctl, auth), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    return runner


def with_front_proxy_ca(context: ssl.SSLContext, auth: DelegatedAuth) -> ssl.SSLContext:
    """Ask for (not require) a client certificate signed by the requestheader CA, once loaded."""
    if auth.requestheader is not None:
        context.load_verify_locations(cadata=auth.requestheader.client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
