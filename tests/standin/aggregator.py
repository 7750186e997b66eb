"""kube-aggregator, for the APIServices that name a Service: a request under /apis/GROUP/VERSION/ is
proxied over HTTPS to that Service, as kube-apiserver does once `enable_aggregation()` was called.

- Like kube-apiserver, it publishes kube-system/extension-apiserver-authentication with its
  front-proxy CA and --requestheader-* settings, authenticates the caller (auth.Authn: 401 for a
  token nobody issued), drops the caller's credentials and sends the user it authenticated in
  X-Remote-User / X-Remote-Group, presenting its front-proxy client certificate
  (CN front-proxy-client).
- The backend's serving certificate is verified against the APIService's caBundle for
  SERVICE.NAMESPACE.svc, unless insecureSkipTLSVerify.
- Where a Service is reached is the test's to say (`endpoints[(namespace, name, port)] =
  (host, port)`: cluster DNS and kube-proxy); a Service with no endpoint, or a backend that does
  not answer, gets 503 ServiceUnavailable as from the aggregator.
"""

from __future__ import annotations

import datetime as dt
import ssl
import tempfile
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import resources as R
from . import status as S
from .auth import Authn

FRONT_PROXY_CN = "front-proxy-client"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _front_proxy_material(directory: Path) -> tuple[str, Path, Path]:
    """(CA PEM, client cert file, client key file): a CA of its own, as kube-apiserver's
    --requestheader-client-ca-file, and the client certificate it proxies with."""
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("front-proxy-ca")).issuer_name(_name("front-proxy-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(FRONT_PROXY_CN)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_file, key_file = directory / "front-proxy-client.crt", directory / "front-proxy-client.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca.public_bytes(serialization.Encoding.PEM).decode(), cert_file, key_file


class Aggregator:
    def __init__(self, cluster, authn: Authn) -> None:
        self.cluster = cluster
        self.authn = authn
        self.endpoints: dict[tuple[str, str, int], tuple[str, int]] = {}
        self._dir = tempfile.TemporaryDirectory(prefix="standin-front-proxy-")
        self.ca_pem, self._cert, self._key = _front_proxy_material(Path(self._dir.name))
        self.cluster.create(R.CONFIG_MAPS, "kube-system", {
            "metadata": {"name": "extension-apiserver-authentication"},
            "data": {"requestheader-client-ca-file": self.ca_pem,
                     "requestheader-allowed-names": orjson.dumps([FRONT_PROXY_CN]).decode(),
                     "requestheader-username-headers": '["X-Remote-User"]',
                     "requestheader-group-headers": '["X-Remote-Group"]',
                     "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]'}})

    def apiservice_for(self, path: str) -> dict | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) < 3 or parts[0] != "apis":
            return None
        svc = self.cluster.store.get(R.API_SERVICES.storage_key, ("", f"{parts[2]}.{parts[1]}"))
        return svc if svc is not None and (svc.get("spec") or {}).get("service") else None

    async def proxy(self, request: web.Request, apiservice: dict) -> web.Response:
        user = self.authn.user_of(request.headers.get("Authorization"))
        if user is None:
            return web.json_response(S.status_body(401, "Unauthorized", "Unauthorized", {}), status=401)
        spec = apiservice["spec"]
        service = spec["service"]
        port = int(service.get("port") or 443)
        target = self.endpoints.get((service["namespace"], service["name"], port))
        if target is None:
            return _unavailable(f'no endpoints available for service "{service["name"]}"')
        ctx = ssl.create_default_context(cadata=spec["caBundle"] if spec.get("caBundle") else None)
        if spec.get("insecureSkipTLSVerify"):
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        ctx.load_cert_chain(self._cert, self._key)
        headers = [(k, v) for k, v in request.headers.items()
                   if k.lower() not in _HOP_BY_HOP | {"authorization", "host"} and not k.lower().startswith("x-remote-")]
        headers.append(("X-Remote-User", user["username"]))
        headers += [("X-Remote-Group", g) for g in user.get("groups") or ()]
        url = f"https://{target[0]}:{target[1]}{request.path_qs}"
        try:
            async with aiohttp.ClientSession() as http:
                async with http.request(request.method, url, headers=headers, data=await request.read(), ssl=ctx,
                                        server_hostname=f"{service['name']}.{service['namespace']}.svc",
                                        timeout=aiohttp.ClientTimeout(total=30)) as r:
                    body = await r.read()
                    out = {k: v for k, v in r.headers.items() if k.lower() not in _HOP_BY_HOP}
                    return web.Response(status=r.status, body=body, headers=out)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return _unavailable(f"error trying to reach service: {exc}")


def _unavailable(message: str) -> web.Response:
    return web.json_response(S.status_body(503, "ServiceUnavailable", message, {}), status=503)
