"""Shared pieces of the extender tests: the certificates `gpuqueue certs` issues (a CA, the serving
pair for 127.0.0.1, kube-scheduler's client pair), TLS contexts for kube-scheduler and for
strangers, and a client that POSTs bodies the way kube-scheduler does."""

from __future__ import annotations

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
