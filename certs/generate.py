"""CA, serving certificate for the webhook/extender Services, and kube-scheduler's client
certificate for the extender, with ``cryptography``.

Files use the names of a ``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``) plus
``ca.crt``, and ``scheduler-client.crt``/``scheduler-client.key`` (gpuqueue.tls names them).
The serving certificate's SANs cover the Service's in-cluster names (``NAME``, ``NAME.NS``,
``NAME.NS.svc``, ``NAME.NS.svc.cluster.local``) and any extra DNS names and IP addresses; it
may serve only (extended key usage serverAuth). The client certificate may authenticate a
client only (clientAuth): the extender accepts a client whose certificate the same CA signed
for that use, so neither can stand in for the other.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpuqueue.tls import CA_FILE, CERT_FILE, KEY_FILE, SCHEDULER_CLIENT_CERT_FILE, SCHEDULER_CLIENT_KEY_FILE  # noqa: F401

CA_KEY_FILE = "ca.key"
SCHEDULER_CLIENT_NAME = "gpuqueue-scheduler-client"  # the client certificate's common name
DEFAULT_VALIDITY = dt.timedelta(days=365)
CA_VALIDITY = dt.timedelta(days=3650)


@dataclass(frozen=True)
class ServingIdentity:
    service: str = "gpuqueue-webhook"
    namespace: str = "gpuqueue-system"
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()

    def dns_names(self) -> list[str]:
        base = [self.service, f"{self.service}.{self.namespace}", f"{self.service}.{self.namespace}.svc",
                f"{self.service}.{self.namespace}.svc.cluster.local"]
        return list(dict.fromkeys([*base, *self.dns]))

    def ip_addresses(self) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address(ip) for ip in dict.fromkeys(self.ips)]


@dataclass(frozen=True)
class TLSMaterial:
    ca_cert_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    client_cert_pem: bytes = b""  # kube-scheduler's, for the extender
    client_key_pem: bytes = b""


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def make_ca(common_name: str = "gpuqueue-ca", validity: dt.timedelta = CA_VALIDITY,
            now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = now or _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def make_serving_cert(ca_cert_pem: bytes, ca_key_pem: bytes, identity: ServingIdentity,
                      validity: dt.timedelta = DEFAULT_VALIDITY, now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = _key()
    now = now or _now()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in identity.dns_names()]
    sans += [x509.IPAddress(ip) for ip in identity.ip_addresses()]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{identity.service}.{identity.namespace}.svc")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + validity)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def make_client_cert(ca_cert_pem: bytes, ca_key_pem: bytes, common_name: str = SCHEDULER_CLIENT_NAME,
                     validity: dt.timedelta = DEFAULT_VALIDITY, now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """A client certificate (clientAuth only) signed by the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = _key()
    now = now or _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def generate(identity: ServingIdentity, validity: dt.timedelta = DEFAULT_VALIDITY,
             ca: tuple[bytes, bytes] | None = None, now: dt.datetime | None = None) -> TLSMaterial:
    """A serving certificate and kube-scheduler's client certificate, both signed by ``ca``
    (cert PEM, key PEM), or by a new CA."""
    ca_cert, ca_key = ca or make_ca(now=now)
    cert, key = make_serving_cert(ca_cert, ca_key, identity, validity, now)
    client_cert, client_key = make_client_cert(ca_cert, ca_key, validity=validity, now=now)
    return TLSMaterial(ca_cert, ca_key, cert, key, client_cert, client_key)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def write_files(out: Path, material: TLSMaterial, *, write_ca_key: bool = True) -> list[Path]:
    """Write ca.crt, tls.crt, tls.key, scheduler-client.crt, scheduler-client.key (and ca.key,
    kept for renewals), each atomically.

    A reader may briefly see a new tls.crt with the old tls.key; the reloader validates
    the pair before using it and retries, so that window is harmless."""
    out.mkdir(parents=True, exist_ok=True)
    files = [(CA_FILE, material.ca_cert_pem, 0o644)]
    if write_ca_key:
        files.append((CA_KEY_FILE, material.ca_key_pem, 0o600))
    files += [(CERT_FILE, material.cert_pem, 0o644), (KEY_FILE, material.key_pem, 0o600)]
    if material.client_cert_pem:
        files += [(SCHEDULER_CLIENT_CERT_FILE, material.client_cert_pem, 0o644),
                  (SCHEDULER_CLIENT_KEY_FILE, material.client_key_pem, 0o600)]
    for name, data, mode in files:
        _write_atomic(out / name, data, mode)
    return [out / name for name, _, _ in files]


def validity_window(cert_pem: bytes) -> tuple[dt.datetime, dt.datetime]:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def needs_renewal(cert_pem: bytes, now: dt.datetime | None = None, fraction: float = 2 / 3) -> bool:
    """True once ``fraction`` of the certificate's life has passed (or it does not parse)."""
    try:
        start, end = validity_window(cert_pem)
    except ValueError:
        return True
    now = now or dt.datetime.now(dt.timezone.utc)
    return now >= start + (end - start) * fraction
