"""--client-ca over real TLS: the verbs serve only a client presenting a certificate signed by
that CA (kube-scheduler's extender tlsConfig certFile/keyFile), so nobody else reaching the
Service can reserve GPUs with made-up pod UIDs; /healthz stays open for the kubelet's probes."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

import aiohttp
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpuqueue.extender.scheduler import start
from tests.test_scheduler_extender import FILTER_NCT, GH, fixture, job_pod, mixed_cluster, names_request, pki  # noqa: F401


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(d: Path, cn: str):
    now = dt.datetime.now(dt.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    (d / f"{cn}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _client(d: Path, ca, ca_key, cn: str) -> tuple[Path, Path]:
    now = dt.datetime.now(dt.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt, k = d / f"{cn}.crt", d / f"{cn}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return crt, k


@pytest.fixture
async def guarded(pki, tmp_path):
    cert_dir, server_ca = pki
    ca, ca_key = _ca(tmp_path, "client-ca")
    other, other_key = _ca(tmp_path, "other-ca")
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    runner = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir, client_ca=tmp_path / "client-ca.crt")
    base = f"https://127.0.0.1:{runner.addresses[0][1]}"

    def context(cert: tuple[Path, Path] | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(server_ca))
        if cert is not None:
            ctx.load_cert_chain(*cert)
        return ctx

    clients = {"scheduler": context(_client(tmp_path, ca, ca_key, "kube-scheduler")),
               "stranger": context(_client(tmp_path, other, other_key, "stranger")),
               "anonymous": context(None)}
    yield base, clients, view
    await runner.cleanup()


BODY = orjson.dumps(names_request(job_pod(fixture(FILTER_NCT), uid="made-up"), ["gh200-node-1"])) + b"\n"


async def _post(base: str, ctx: ssl.SSLContext, path: str = "/filter"):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        async with s.post(base + path, data=BODY) as r:
            return r.status, await r.read()


async def test_kube_schedulers_certificate_is_served(guarded):
    base, clients, view = guarded
    status, body = await _post(base, clients["scheduler"])
    assert status == 200 and orjson.loads(body)["NodeNames"] == ["gh200-node-1"]
    assert view.nodes.own_reservation("made-up")[0] == "gh200-node-1"  # the only fit is reserved


@pytest.mark.parametrize("path", ["/filter", "/prioritize", "/preempt"])
async def test_a_client_without_a_certificate_reserves_nothing(guarded, path):
    base, clients, view = guarded
    status, body = await _post(base, clients["anonymous"], path)
    assert status == 403 and b"--client-ca" in body
    assert view.nodes.own_reservation("made-up") is None


async def test_a_certificate_of_another_ca_fails_the_handshake(guarded):
    base, clients, view = guarded
    with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
        await _post(base, clients["stranger"])
    assert view.nodes.own_reservation("made-up") is None


async def test_healthz_stays_open_for_probes(guarded):
    base, clients, _ = guarded
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=clients["anonymous"])) as s:
        async with s.get(base + "/healthz") as r:
            assert r.status == 200 and await r.text() == "ok"
