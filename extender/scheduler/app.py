"""The extender's HTTP(S) server: POST /filter, /prioritize, /preempt (kube-scheduler appends
the verb to its ``urlPrefix``), GET /healthz. Every answer is HTTP 200 with a well-formed
body; a request that cannot be read gets its ``Error``, never a 5xx."""

from __future__ import annotations

import asyncio
import logging
import os
from functools import partial
from pathlib import Path
from typing import Callable

import orjson
from aiohttp import web

from certs.reload import ReloadingTLS
from extender.scheduler.memo import PodMemo
from extender.scheduler.verbs import filter_verb, preempt_verb, prioritize_verb
from extender.scheduler.view import ClusterView
from extender.scheduler.wire import filter_error, preemption_result

log = logging.getLogger("gpuqueue.extender")

# The verbs run on the event loop, so a huge body holds up every other call while it is
# decoded. nodeCacheCapable true sends a pod and names (5,000 names ~ 100 KB); false sends
# every candidate Node in full (~5-15 KB each, 500 candidates at 5,000 nodes): 16 MiB covers
# that with room, and --max-request-bytes raises it for larger full-Node requests.
MAX_REQUEST_BYTES = 16 * 1024 * 1024
VIEW_KEY = web.AppKey("view", object)
CERT_CHECK_SECONDS = 30.0  # how often renewed serving certificate files are looked for


NO_CLIENT_CERT = ("gpuqueue extender: this endpoint needs a client certificate signed by the CA given with "
                  "--client-ca (kube-scheduler: the extender's tlsConfig certFile/keyFile)")


def _endpoint(verb: Callable[[bytes, ClusterView], object], on_crash: Callable[[str], object],
              client_cert: bool = False):
    async def handle(request: web.Request) -> web.Response:
        # The handshake already rejected a certificate of another CA; this refuses none at all.
        if client_cert and not request.transport.get_extra_info("peercert"):
            return web.Response(status=403, text=NO_CLIENT_CERT)
        body = await request.read()
        try:
            result = verb(body, request.app[VIEW_KEY])
        except Exception as exc:  # a bug must not turn into a 5xx kube-scheduler cannot read
            log.exception("%s failed", request.path)
            result = on_crash(f"gpuqueue extender: internal error in {request.path}: {type(exc).__name__}: {exc}")
        body = result if isinstance(result, bytes) else orjson.dumps(result)
        return web.Response(body=body, content_type="application/json")

    return handle


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def build_app(view: ClusterView, max_request_bytes: int | None = None,
              client_cert: bool = False) -> web.Application:
    """A larger body is refused with HTTP 413 naming the limit (default ``MAX_REQUEST_BYTES``).
    ``client_cert``: the verbs answer 403 to a client that presented no certificate (the TLS
    context verifies the ones presented); /healthz stays open for the kubelet's probes."""
    app = web.Application(client_max_size=max_request_bytes or MAX_REQUEST_BYTES)
    app[VIEW_KEY] = view
    memo = PodMemo()  # the pod of an attempt is decoded at /filter and reused at /prioritize
    app.router.add_post("/filter", _endpoint(partial(filter_verb, memo=memo), filter_error, client_cert))
    app.router.add_post("/prioritize", _endpoint(partial(prioritize_verb, memo=memo), lambda msg: {"Error": msg},
                                                 client_cert))
    app.router.add_post("/preempt", _endpoint(preempt_verb, lambda msg: preemption_result({}, msg), client_cert))
    app.router.add_get("/healthz", _healthz)
    return app


async def start(view: ClusterView, *, host: str = "0.0.0.0", port: int = 8443,
                cert_dir: str | os.PathLike | None = None, insecure_http: bool = False,
                max_request_bytes: int | None = None,
                client_ca: str | os.PathLike | None = None) -> web.AppRunner:
    """Start serving and return the runner (``await runner.cleanup()`` to stop). HTTPS unless
    ``insecure_http`` is asked for explicitly; with ``client_ca``, the verbs serve only clients
    presenting a certificate signed by it (kube-scheduler's tlsConfig certFile/keyFile)."""
    if cert_dir is None and not insecure_http:
        raise ValueError("the extender serves HTTPS: give a cert dir (tls.crt, tls.key) or ask for plain HTTP")
    if client_ca is not None and cert_dir is None:
        raise ValueError("client certificates need HTTPS: give a cert dir")
    # The webhook's TLS: same versions and cipher policy, renewed files picked up without a restart.
    tls = ReloadingTLS(Path(cert_dir), client_ca=client_ca) if cert_dir is not None else None
    app = build_app(view, max_request_bytes, client_cert=client_ca is not None)
    if tls is not None:
        async def _reloader(app: web.Application):
            task = asyncio.create_task(tls.watch(CERT_CHECK_SECONDS))
            yield
            task.cancel()

        app.cleanup_ctx.append(_reloader)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=tls.context if tls is not None else None).start()
    return runner
