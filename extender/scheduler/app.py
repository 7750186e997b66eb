"""The extender's HTTP(S) server: POST /filter, /prioritize, /preempt (kube-scheduler appends
the verb to its ``urlPrefix``), GET /healthz and /readyz. Every answer to a verb is HTTP 200
with a well-formed body; a request that cannot be read gets its ``Error``, never a 5xx."""

from __future__ import annotations

import inspect
import logging
import os
from functools import partial
from pathlib import Path
from typing import Awaitable, Callable

import orjson

from gpuqueue.tls import CA_FILE, ReloadingTLS
from gpuqueue.extender.scheduler.catchup import WAIT_SECONDS
from gpuqueue.extender.scheduler.memo import PodMemo
from gpuqueue.http11 import JSON, TEXT, Answer, Connection, Route, Server
from gpuqueue.extender.scheduler.verbs import filter_verb, preempt_verb, prioritize_verb
from gpuqueue.extender.scheduler.view import ClusterView
from gpuqueue.extender.scheduler.wire import filter_error, preemption_result

log = logging.getLogger("gpuqueue.extender")

# The verbs run on the event loop, so a huge body holds up every other call while it is
# decoded. nodeCacheCapable true sends a pod and names (5,000 names ~ 100 KB); false sends
# every candidate Node in full (~5-15 KB each, 500 candidates at 5,000 nodes): 16 MiB covers
# that with room, and --max-request-bytes raises it for larger full-Node requests.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
CERT_CHECK_SECONDS = 30.0  # how often renewed serving certificate files are looked for


NO_CLIENT_CERT = Answer(403, TEXT, b"gpuqueue extender: this endpoint needs a client certificate signed by the "
                        b"extender's client CA (kube-scheduler: the extender's tlsConfig certFile/keyFile)")
HEALTHY = Answer(200, TEXT, b"ok")
ALLOW_ANY_CLIENT_WARNING = ("serving /filter, /prioritize and /preempt to any client (%s): anyone who reaches the "
                            "extender can ask it to hold GPUs; give kube-scheduler a client certificate instead")


def _endpoint(path: str, verb: Callable[[bytes, ClusterView], object], view: ClusterView,
              on_crash: Callable[[str], object], client_cert: bool = False) -> Route:
    def crashed(exc: Exception) -> Answer:  # a bug must not turn into a 5xx kube-scheduler cannot read
        log.exception("%s failed", path)
        crash = on_crash(f"gpuqueue extender: internal error in {path}: {type(exc).__name__}: {exc}")
        return Answer(200, JSON, orjson.dumps(crash))

    def answer(result) -> Answer:
        return Answer(200, JSON, result if isinstance(result, bytes) else orjson.dumps(result))

    async def later(pending: Awaitable) -> Answer:
        try:
            return answer(await pending)
        except Exception as exc:
            return crashed(exc)

    def handle(body: bytes, conn: Connection) -> Answer | Awaitable[Answer]:
        # The handshake already rejected a certificate of another CA; this refuses none at all.
        if client_cert and not conn.peercert:
            return NO_CLIENT_CERT
        try:
            result = verb(body, view)
            return later(result) if inspect.isawaitable(result) else answer(result)
        except Exception as exc:
            return crashed(exc)

    return Route(b"POST", handle)


def _readiness(ready: Callable[[], tuple[bool, str]] | None) -> Route:
    def handle(body: bytes, conn: Connection) -> Answer:
        ok, text = ready() if ready is not None else (True, "ok")
        return Answer(200 if ok else 503, TEXT, text.encode())

    return Route(b"GET", handle)


def routes(view: ClusterView, client_cert: bool = False,
           ready: Callable[[], tuple[bool, str]] | None = None) -> dict[bytes, Route]:
    """The extender's endpoints by path. ``client_cert``: the verbs answer 403 to a client that
    presented no certificate (the TLS context verifies the ones presented); /healthz and
    /readyz (``ready()``: whether the caches can be answered from, and a line saying so) stay
    open for the kubelet's probes."""
    memo = PodMemo()  # the pod of an attempt is decoded at /filter and reused at /prioritize
    return {
        b"/filter": _endpoint("/filter", partial(filter_verb, memo=memo, wait=WAIT_SECONDS), view, filter_error, client_cert),
        b"/prioritize": _endpoint("/prioritize", partial(prioritize_verb, memo=memo), view,
                                  lambda msg: {"Error": msg}, client_cert),
        b"/preempt": _endpoint("/preempt", preempt_verb, view, lambda msg: preemption_result({}, msg), client_cert),
        b"/healthz": Route(b"GET", lambda body, conn: HEALTHY),
        b"/readyz": _readiness(ready),
    }


def client_ca_file(cert_dir: str | os.PathLike | None, client_ca: str | os.PathLike | None,
                   allow_any_client: bool) -> Path | None:
    """The CA client certificates are verified against (None: any client is served); ValueError
    names what is missing."""
    if client_ca is not None and cert_dir is None:
        raise ValueError("client certificates need HTTPS: give a cert dir")
    if cert_dir is None or allow_any_client:
        return None
    path = Path(client_ca) if client_ca is not None else Path(cert_dir) / CA_FILE
    if not path.is_file():
        raise ValueError(f"client certificates are verified against {path}, which does not exist: give "
                         f"--client-ca FILE, or --insecure-allow-any-client to serve any client")
    return path


async def start(view: ClusterView, *, host: str = "0.0.0.0", port: int = 8443,
                cert_dir: str | os.PathLike | None = None, insecure_http: bool = False,
                max_request_bytes: int | None = None, client_ca: str | os.PathLike | None = None,
                allow_any_client: bool = False, ready: Callable[[], tuple[bool, str]] | None = None) -> Server:
    """Start serving and return the server (``await server.cleanup()`` to stop). A body larger
    than ``max_request_bytes`` (default ``MAX_REQUEST_BYTES``) is refused with HTTP 413 naming
    the limit.

    HTTPS unless ``insecure_http`` is asked for explicitly, and mutual TLS: the verbs serve only
    clients presenting a certificate (clientAuth) signed by ``client_ca``, by default the
    ``ca.crt`` of ``cert_dir`` (the CA ``gpuqueue certs`` signs kube-scheduler's client
    certificate with). ``allow_any_client`` (and plain HTTP) serve them to anyone, with a warning."""
    if cert_dir is None and not insecure_http:
        raise ValueError("the extender serves HTTPS: give a cert dir (tls.crt, tls.key) or ask for plain HTTP")
    client_ca = client_ca_file(cert_dir, client_ca, allow_any_client)
    if client_ca is None:
        log.warning(ALLOW_ANY_CLIENT_WARNING, "plain HTTP" if cert_dir is None else "--insecure-allow-any-client")
    # The webhook's TLS: same versions and cipher policy, renewed files picked up without a restart.
    tls = ReloadingTLS(Path(cert_dir), client_ca=client_ca) if cert_dir is not None else None
    server = Server(routes(view, client_cert=client_ca is not None, ready=ready),
                    max_request_bytes or MAX_REQUEST_BYTES)
    await server.listen(host, port, tls.context if tls is not None else None)
    if tls is not None:
        server.run_while_serving(tls.watch(CERT_CHECK_SECONDS))
    return server
