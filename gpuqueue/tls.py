"""The TLS policy of every gpuqueue server (the webhook's and the extender's), and a server-side
SSLContext that picks up renewed certificate files without a restart. (Making and renewing the
certificates is ``gpuqueue certs``: gpuqueue.certs.)

``ReloadingTLS.context`` is the one SSLContext handed to the server. Loading a new
chain into the same context changes what later handshakes present, while
connections already open keep their session: nothing is dropped. Files are
checked by a polling task (Secret volumes are swapped atomically by the kubelet;
a half-written pair fails to load and is retried on the next poll, the old
certificate staying in service meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

log = logging.getLogger("gpuqueue.certs")  # the name these messages have always had

# The files of a cert dir (``gpuqueue certs generate --out``; the keys of the certs Secret):
# the CA, the serving pair (a ``kubernetes.io/tls`` Secret's names), and kube-scheduler's client
# pair for the extender (clientAuth, signed by the same CA).
CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"
SCHEDULER_CLIENT_CERT_FILE, SCHEDULER_CLIENT_KEY_FILE = "scheduler-client.crt", "scheduler-client.key"


# TLS 1.2 suites allowed: forward-secret key exchange and AEAD only (Mozilla's "intermediate"
# list); TLS 1.3 suites are all AEAD and not affected by set_ciphers.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """TLS 1.2 or newer, TLS12_CIPHERS only. With ``client_ca``, a client certificate that is
    presented must be signed by that CA; one that is not presented is let through the handshake
    (CERT_OPTIONAL), so the server decides per endpoint (health probes carry none)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_COMPRESSION
    ctx.set_alpn_protocols(["http/1.1"])
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def _stamp(paths) -> tuple[tuple[int, int, int], ...]:
    stamps = []
    for p in paths:
        try:
            st = os.stat(p)
            stamps.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            stamps.append((0, 0, 0))
    return tuple(stamps)


class ReloadingTLS:
    """``client_ca``: see ``server_context``. A renewed client CA file is added to the CAs
    trusted (a CA once trusted stays so until a restart: clients still presenting a certificate
    of the old CA keep working through a CA rotation)."""

    def __init__(self, cert_dir: Path, cert_name: str = CERT_FILE, key_name: str = KEY_FILE,
                 client_ca: Path | None = None) -> None:
        self.cert = Path(cert_dir) / cert_name
        self.key = Path(cert_dir) / key_name
        self.client_ca = Path(client_ca) if client_ca is not None else None
        self.context = server_context(self.cert, self.key, client_ca)
        self._stamp = self._file_stamp()
        self._ca_stamp = _stamp([self.client_ca]) if self.client_ca is not None else None
        self.reloads = 0

    def _file_stamp(self) -> tuple[tuple[int, int, int], ...]:
        return _stamp((self.cert, self.key))

    def reload_if_changed(self) -> bool:
        self._reload_client_ca_if_changed()
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        try:
            server_context(self.cert, self.key)  # validate the pair before touching the live context
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            log.warning("renewed certificate in %s not loaded yet (%s); still serving the previous one", self.cert.parent, exc)
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("loaded renewed serving certificate from %s", self.cert)
        return True

    def _reload_client_ca_if_changed(self) -> None:
        if self.client_ca is None:
            return
        stamp = _stamp([self.client_ca])
        if stamp == self._ca_stamp:
            return
        try:
            self.context.load_verify_locations(cafile=str(self.client_ca))
        except (OSError, ssl.SSLError) as exc:
            log.warning("renewed client CA %s not loaded yet (%s)", self.client_ca, exc)
            return
        self._ca_stamp = stamp
        log.info("trusting the client CA in %s as well", self.client_ca)

    async def watch(self, interval: float = 2.0) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()
