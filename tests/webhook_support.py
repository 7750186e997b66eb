"""Helpers shared by the webhook tests: fixtures loading and a strict JSONPatch applier."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.shared_fixtures import k8s_recording

def load_review(name: str) -> dict[str, Any]:
    return json.loads(k8s_recording("admission", name).read_text())


class PatchError(Exception):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply RFC 6902 add/replace/remove like the API server does: the parent must exist."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        if not tokens:
            raise PatchError("whole-document ops are not used by gpuqueue")
        parent = doc
        for t in tokens[:-1]:
            if isinstance(parent, dict) and t in parent and parent[t] is not None:
                parent = parent[t]
            elif isinstance(parent, list) and t.isdigit() and int(t) < len(parent):
                parent = parent[int(t)]
            else:
                raise PatchError(f"{op['op']} operation does not apply: doc is missing path: {op['path']}")
        last = tokens[-1]
        if not isinstance(parent, dict):
            raise PatchError(f"unsupported parent for {op['path']}")
        if op["op"] == "add":
            parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            if last not in parent:
                raise PatchError(f"replace operation does not apply: doc is missing key: {op['path']}")
            parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if last not in parent:
                raise PatchError(f"remove operation does not apply: doc is missing key: {op['path']}")
            del parent[last]
        else:
            raise PatchError(f"unexpected op {op['op']}")
    return doc


# -- a real HTTPS server and a verifying client -------------------------------------

import base64  # noqa: E402
import ssl  # noqa: E402
from contextlib import asynccontextmanager  # noqa: E402

import aiohttp  # noqa: E402

from gpuqueue.certs.generate import ServingIdentity, generate, write_files  # noqa: E402
from gpuqueue.tls import ReloadingTLS  # noqa: E402
from gpuqueue.webhook.kueue_validation import CohortView, NoCohorts  # noqa: E402
from gpuqueue.jobframework.managed import QueueView, StaticQueueView  # noqa: E402
from gpuqueue.listener import ConnectionLimits  # noqa: E402
from gpuqueue.webhook.cluster import NoPods, PodLookup  # noqa: E402
from gpuqueue.webhook.app import AdmissionHandlers, RunningServer, WebhookSettings, start_server  # noqa: E402

APISERVER_HEADERS = {
    "User-Agent": "kube-apiserver-admission",
    "Accept": "application/json, */*",
    "Content-Type": "application/json",
}


def make_cert_dir(path: Path) -> Path:
    write_files(path, generate(ServingIdentity(ips=("127.0.0.1",), dns=("localhost",))))
    return path


def webhook_args(cert_dir: Path, *flags: str):
    """`gpuqueue webhook` arguments as the real command line parses them, on 127.0.0.1, a free port."""
    from gpuqueue.cli import build_parser

    return build_parser().parse_args(["webhook", f"--cert-dir={cert_dir}", "--host=127.0.0.1", "--port=0",
                                      "--cert-check-seconds=60", "--shutdown-delay-seconds=0", *flags])


def client_context(cert_dir: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))


def wire(doc: dict[str, Any]) -> bytes:
    """The body as kube-apiserver sends it: compact JSON ending in one newline."""
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


class Webhook:
    """A running webhook over TLS plus a client that verifies it against ca.crt."""

    def __init__(self, base: str, session: aiohttp.ClientSession, tls: ReloadingTLS, cert_dir: Path,
                 server: RunningServer) -> None:
        self.base, self.session, self.tls, self.cert_dir, self.server = base, session, tls, cert_dir, server

    @property
    def port(self) -> int:
        return self.server.port

    async def post(self, path: str, body: bytes) -> tuple[int, Any]:
        async with self.session.post(f"{self.base}{path}?timeout=10s", data=body, headers=APISERVER_HEADERS) as resp:
            raw = await resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw

    async def review(self, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        status, answer = await self.post(path, wire(doc))
        assert status == 200, answer
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == doc["request"]["uid"]
        return answer["response"]


@asynccontextmanager
async def running_webhook(cert_dir: Path, queues: QueueView | None = None, cohorts: CohortView | None = None,
                          settings: WebhookSettings | None = None, limits: ConnectionLimits = ConnectionLimits(),
                          covered: frozenset[str] | None = None, pods: PodLookup | None = None):
    """``covered``: what ClusterQueues cover (None: unknown); ``pods``: how a binding's pod is read
    (default: no cluster)."""
    tls = ReloadingTLS(cert_dir)
    handlers = AdmissionHandlers(settings or WebhookSettings(), queues or StaticQueueView(), cohorts or NoCohorts(),
                                 covered=lambda: covered, pods=pods or NoPods())
    server = await start_server(handlers.server(), "127.0.0.1", 0, tls.context, limits)
    connector = aiohttp.TCPConnector(ssl=client_context(cert_dir))
    session = aiohttp.ClientSession(connector=connector)
    try:
        yield Webhook(f"https://127.0.0.1:{server.port}", session, tls, cert_dir, server)
    finally:
        await session.close()
        await server.close()


# -- which Kubernetes API calls a component made, from the stand-in's request log ----------------

from urllib.parse import parse_qs, urlsplit  # noqa: E402


def api_calls(requests: list[tuple[str, str]]) -> set[tuple[str, str, str, str | None, str | None]]:
    """(group, resource[/subresource], verb, namespace, name) of each (method, path?query) that
    ``ApiServer.requests`` logged, in the vocabulary of RBAC and gpuqueue/access.py."""
    calls = set()
    for method, path_qs in requests:
        url = urlsplit(path_qs)
        parts = [p for p in url.path.split("/") if p]
        if parts[0] not in ("api", "apis"):
            continue  # a non-resource URL (/version): every user may read it (system:public-info-viewer)
        if parts[0] == "api":
            group, rest = "", parts[2:]
        else:
            group, rest = parts[1], parts[3:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource, name = rest[0], rest[1] if len(rest) > 1 else None
        if len(rest) > 2:
            resource += "/" + rest[2]
        if method == "GET":
            watching = parse_qs(url.query).get("watch", [""])[0].lower() in ("1", "true")
            verb = "watch" if watching else "list" if name is None else "get"
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        calls.add((group, resource, verb, namespace, name))
    return calls


def assert_calls_match_access_table(component: str, calls: set[tuple[str, str, str, str | None, str | None]]) -> None:
    """Every call is granted by gpuqueue/access.py, and every verb the table grants ``component`` was used."""
    from gpuqueue import access

    undeclared = sorted(c for c in calls if not access.declared(component, c[0], c[1], c[2], namespace=c[3], name=c[4]))
    assert undeclared == [], f"{component} made calls gpuqueue/access.py does not declare: {undeclared}"
    used = {(g, r, v) for g, r, v, _, _ in calls}
    granted = {(a.group, a.resource, v) for a in access.API_ACCESS if a.component == component for v in a.verbs}
    assert sorted(granted - used) == [], f"gpuqueue/access.py grants {component} calls it never makes"
