"""Who is calling /metrics or the visibility API, and may they: the API server decides, as it does
for Kueue's servers (controller-runtime's authenticated metrics, the aggregated apiserver's
delegated authentication and authorization).

- A bearer token is checked with a TokenReview.
- A request kube-aggregator forwards carries its front-proxy client certificate; when that
  certificate was verified (TLS) against the requestheader CA the API server publishes in
  kube-system/extension-apiserver-authentication and names an allowed proxy, the user it vouches
  for in X-Remote-User / X-Remote-Group / X-Remote-Extra-* is the caller. Those headers from
  anyone else are ignored.
- What the caller asks is then put to a SubjectAccessReview.

Answers are cached for `ttl` seconds (successes and failures alike, in a bounded map), and the
reviews have a request budget of their own: past it a request is refused at once with 429, so a
flood of made-up tokens costs the API server at most that budget and never takes the
controller's write budget.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import orjson
from aiohttp import web

from gpuqueue.extender.controller.client.kubeapi import KubeApi
from gpuqueue.kube import TokenBucket

log = logging.getLogger("gpuqueue.auth")

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
AUTHENTICATION_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class RequestHeaderConfig:
    """kube-apiserver's --requestheader-* settings, as published in the ConfigMap."""

    client_ca: str  # PEM
    allowed_names: tuple[str, ...] = ()  # empty: any certificate the CA signed
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_configmap(cls, data: dict) -> "RequestHeaderConfig | None":
        ca = data.get("requestheader-client-ca-file")
        if not ca:
            return None

        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            raw = data.get(key)
            try:
                values = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                values = None
            return tuple(v for v in values if isinstance(v, str)) if isinstance(values, list) else default

        return cls(ca, names("requestheader-allowed-names", ()),
                   names("requestheader-username-headers", ("X-Remote-User",)),
                   names("requestheader-group-headers", ("X-Remote-Group",)),
                   names("requestheader-extra-headers-prefix", ("X-Remote-Extra-",)))


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Cache:
    ttl: float
    size: int
    entries: collections.OrderedDict = field(default_factory=collections.OrderedDict)

    def get(self, key):
        hit = self.entries.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key, value) -> None:
        self.entries[key] = (time.monotonic() + self.ttl, value)
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


class DelegatedAuth:
    def __init__(self, kube: KubeApi, *, ttl: float = 10.0, cache_size: int = 4096, qps: float = 20.0,
                 burst: int = 50) -> None:
        """`kube`: a client of its own (its own write budget); `qps`/`burst`: the reviews' budget."""
        self.kube = kube
        self.requestheader: RequestHeaderConfig | None = None
        self._tokens = _Cache(ttl, cache_size)
        self._decisions = _Cache(ttl, cache_size)
        self._budget = TokenBucket(qps, burst)
        self.reviews = 0

    async def load_requestheader(self) -> RequestHeaderConfig | None:
        """Read the front-proxy settings (None when the cluster publishes none or we may not read them)."""
        ns, name = AUTHENTICATION_CONFIGMAP
        try:
            cm = await self.kube.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
        except Exception as exc:  # noqa: BLE001
            log.warning("cannot read %s/%s (%s): only bearer tokens are accepted, not kube-aggregator's "
                        "forwarded requests", ns, name, exc)
            return None
        self.requestheader = RequestHeaderConfig.from_configmap(cm.get("data") or {})
        return self.requestheader

    # -- who ----------------------------------------------------------------------------------------
    async def user_of(self, request: web.Request) -> User:
        proxied = self._proxied_user(request)
        if proxied is not None:
            return proxied
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Refused(401, "Unauthorized: a bearer token is required (Authorization: Bearer TOKEN)")
        key = hashlib.sha256(token.encode()).digest()
        cached = self._tokens.get(key)
        if cached is None:
            cached = await self._token_review(token)
            self._tokens.put(key, cached)
        if isinstance(cached, str):
            raise Refused(401, f"Unauthorized: {cached}")
        return cached

    def _proxied_user(self, request: web.Request) -> User | None:
        rh = self.requestheader
        if rh is None or request.transport is None:
            return None
        cert = request.transport.get_extra_info("peercert")
        if not cert:  # no client certificate, or one the requestheader CA did not sign (TLS refused it)
            return None
        common_names = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
        if rh.allowed_names and not set(common_names) & set(rh.allowed_names):
            return None
        name = next((request.headers[h] for h in rh.username_headers if request.headers.get(h)), None)
        if not name:
            return None
        groups = tuple(g for h in rh.group_headers for g in request.headers.getall(h, []))
        extra: dict[str, list[str]] = {}
        for header, value in request.headers.items():
            for prefix in rh.extra_prefixes:
                if header.lower().startswith(prefix.lower()):
                    extra.setdefault(header[len(prefix):].lower(), []).append(value)
        return User(name, "", groups, tuple((k, tuple(v)) for k, v in sorted(extra.items())))

    async def _token_review(self, token: str) -> User | str:
        review = await self._post(TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                                  "spec": {"token": token}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return status.get("error") or "the token is not valid"
        u = status.get("user") or {}
        extra = tuple((k, tuple(v)) for k, v in sorted((u.get("extra") or {}).items()))
        return User(u.get("username", ""), u.get("uid", ""), tuple(u.get("groups") or ()), extra)

    # -- may they ----------------------------------------------------------------------------------
    async def authorize(self, user: User, attributes: dict, what: str) -> None:
        """`attributes`: {"nonResourceAttributes": ...} or {"resourceAttributes": ...}; `what`: the
        request in words, for the refusal."""
        key = (user, orjson.dumps(attributes, option=orjson.OPT_SORT_KEYS))
        allowed = self._decisions.get(key)
        if allowed is None:
            spec = {"user": user.name, "groups": list(user.groups), **attributes}
            if user.uid:
                spec["uid"] = user.uid
            if user.extra:
                spec["extra"] = {k: list(v) for k, v in user.extra}
            review = await self._post(SUBJECT_ACCESS_REVIEWS, {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
            allowed = bool((review.get("status") or {}).get("allowed"))
            self._decisions.put(key, allowed)
        if not allowed:
            raise Refused(403, f'Forbidden: user "{user.name}" cannot {what}')

    async def _post(self, path: str, body: dict) -> dict:
        if not self._budget.try_take():
            raise Refused(429, "Too many requests to review: try again shortly")
        self.reviews += 1
        try:
            return await self.kube.request("POST", path, body)
        except Exception as exc:  # noqa: BLE001
            log.warning("%s failed: %s", path.rsplit("/", 1)[-1], exc)
            raise Refused(503, "the API server could not review the request: try again shortly") from None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_REASONS = {401: "Unauthorized", 403: "Forbidden", 429: "TooManyRequests", 503: "ServiceUnavailable"}


def guarded(auth: DelegatedAuth | None, attributes: Callable[[web.Request], tuple[dict, str]],
            handler: Handler, status_json: bool = False) -> Handler:
    """`handler` behind authentication and authorization (none when `auth` is None). Refusals are
    one line of text, or a metav1.Status with `status_json` (what an aggregated API answers)."""
    if auth is None:
        return handler

    async def serve(request: web.Request) -> web.StreamResponse:
        try:
            user = await auth.user_of(request)
            attrs, what = attributes(request)
            await auth.authorize(user, attrs, what)
        except Refused as exc:
            headers = {"WWW-Authenticate": 'Bearer realm="gpuqueue"'} if exc.status == 401 else {}
            if exc.status == 429:
                headers["Retry-After"] = "1"
            if status_json:
                return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                          "message": str(exc), "reason": _REASONS[exc.status], "code": exc.status},
                                         status=exc.status, headers=headers)
            return web.Response(status=exc.status, text=str(exc) + "\n", headers=headers)
        return await handler(request)

    return serve


def metrics_attributes(request: web.Request) -> tuple[dict, str]:
    """Kueue's (controller-runtime's) check: `get` on the non-resource URL /metrics."""
    return {"nonResourceAttributes": {"path": request.path, "verb": "get"}}, f"get path \"{request.path}\""
