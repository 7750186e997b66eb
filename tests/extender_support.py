"""Shared pieces of the extender tests: the certificates `gpuqueue certs` issues (a CA, the serving
pair for 127.0.0.1, kube-scheduler's client pair), TLS contexts for kube-scheduler and for
strangers, and a client that POSTs bodies the way kube-scheduler does."""

from __future__ import annotations

import contextlib
import dataclasses
import ssl
from pathlib import Path

import aiohttp
import orjson

from gpuqueue.certs.generate import ServingIdentity, generate, write_files
from gpuqueue.tls import CA_FILE, SCHEDULER_CLIENT_CERT_FILE, SCHEDULER_CLIENT_KEY_FILE


def extender_cert_dir(path: Path) -> Path:
    """What `gpuqueue certs generate --out` writes, for a server on 127.0.0.1."""
    write_files(path, generate(ServingIdentity("gpuqueue-extender", ips=("127.0.0.1",), dns=("localhost",))))
    return path


def scheduler_context(cert_dir: Path) -> ssl.SSLContext:
    """kube-scheduler's: verifies the extender with ca.crt, presents its client certificate."""
    ctx = ssl.create_default_context(cafile=str(cert_dir / CA_FILE))
    ctx.load_cert_chain(cert_dir / SCHEDULER_CLIENT_CERT_FILE, cert_dir / SCHEDULER_CLIENT_KEY_FILE)
    return ctx


def anonymous_context(cert_dir: Path) -> ssl.SSLContext:
    """Anyone who reaches the Service: verifies the extender, presents no certificate."""
    return ssl.create_default_context(cafile=str(cert_dir / CA_FILE))


def wire(doc) -> bytes:
    return orjson.dumps(doc) + b"\n"  # compact, one newline: as Go's encoder writes it


async def post(session: aiohttp.ClientSession, url: str, body: bytes | dict) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else wire(body)
    async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
        raw = await resp.read()
        return resp.status, orjson.loads(raw) if resp.content_type == "application/json" else raw


@contextlib.asynccontextmanager
async def controller_and_extender(h, tmp_path: Path, mode: str = "Strict"):
    """A leading controller on the harness's stand-in, with the extender's view over its caches
    served on HTTPS as `gpuqueue extender` serves it: (controller, view, base URL, a session with
    kube-scheduler's client certificate)."""
    from kubernetes_asyncio import client

    from gpuqueue.extender.controller.controller import Controller
    from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
    from gpuqueue.extender.scheduler import app as extender_app
    from gpuqueue.jobframework.enforcement import EnforcementConfig
    from tests.controller_support import FAST

    await h.namespace("kube-system")
    await h.namespace("gpuqueue-system")
    options = dataclasses.replace(FAST, enforcement=EnforcementConfig(mode=mode))
    ctl = Controller(client.ApiClient(h.api.client_configuration()), options, identity="test")
    h.controllers.append(ctl)
    view = ControllerClusterView(ctl)  # before the caches start, as `gpuqueue extender` does
    await ctl.start()
    await ctl.wait_synced()
    cert_dir = extender_cert_dir(tmp_path)
    server = await extender_app.start(view, host="127.0.0.1", port=0, cert_dir=cert_dir)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=scheduler_context(cert_dir))) as s:
            yield ctl, view, f"https://127.0.0.1:{server.addresses[0][1]}", s
    finally:
        h.api.faults.clear()
        await server.cleanup()


def chosen(answer: dict, allowed) -> str:
    """The one node a /filter answer passed (an admitted pod's answer names the node it is to go
    to, so kube-scheduler binds there without scoring), checked to be one of ``allowed``."""
    names = answer["NodeNames"] if answer.get("Nodes") is None else [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    assert len(names) == 1 and names[0] in allowed, f"passed {names}, expected one of {sorted(allowed)}"
    return names[0]
