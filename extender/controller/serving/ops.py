"""The ops endpoints of `gpuqueue extender`: /healthz, /readyz and /metrics on --metrics-port.
/metrics answers only callers the API server says may `get` it (delegated_auth.py, as Kueue's
metrics endpoint does) unless --metrics-insecure; the probes are open. The scheduler extender
verbs over the controller's caches (HTTPS on --port) are extender/scheduler/app.py's."""

from __future__ import annotations

import ssl

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuqueue.extender.controller.controller import Controller
from gpuqueue.extender.controller.serving.delegated_auth import DelegatedAuth, guarded, metrics_attributes

CTL_KEY = web.AppKey("controller", Controller)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def readiness(ctl: Controller) -> tuple[bool, str]:
    """Whether the controller (and the extender over its caches) is ready, and a line saying so;
    served at /readyz here and on the extender's HTTPS port."""
    if ctl.ready:
        return True, "ok: leader\n" if ctl.leader else "ok: follower, caches warm\n"
    waiting = [name for name, inf in ctl.informers.items() if not inf.synced.is_set()]
    why = f"caches not synced: {', '.join(waiting)}" if waiting else "rebuilding the quota engine"
    return False, f"not ready: {why}\n"


async def _readyz(request: web.Request) -> web.Response:
    ok, text = readiness(request.app[CTL_KEY])
    return web.Response(status=200 if ok else 503, text=text)


async def _metrics(request: web.Request) -> web.Response:
    ctl = request.app[CTL_KEY]
    ctl.queue_status.refresh_gauges()
    body = generate_latest(ctl.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_ops_app(ctl: Controller, metrics_auth: DelegatedAuth | None) -> web.Application:
    app = web.Application()
    app[CTL_KEY] = ctl
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", guarded(metrics_auth, metrics_attributes, _metrics))
    return app


async def start_ops(ctl: Controller, host: str, port: int, *, metrics_auth: DelegatedAuth | None,
                    ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """`metrics_auth` None: /metrics is open to anyone who reaches the port (a trusted network only)."""
    runner = web.AppRunner(build_ops_app(ctl, metrics_auth), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    return runner
