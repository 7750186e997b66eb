"""Mutual TLS by default, over real TLS: the verbs serve only a client presenting a certificate
(clientAuth) signed by the CA of the extender's cert dir, which is what `gpuqueue certs` issues
kube-scheduler; a stranger reaching the Service gets 403 and holds nothing; /healthz and /readyz
stay open for the kubelet's probes; --insecure-allow-any-client opts out, with a warning."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
from pathlib import Path

import aiohttp
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import gpuqueue.extender.scheduler.app as extender_app
from gpuqueue.certs.generate import CA_KEY_FILE, ServingIdentity, generate, make_client_cert, write_files
from gpuqueue.cli import main
from gpuqueue.extender.scheduler import start
from tests.extender_support import anonymous_context, extender_cert_dir, scheduler_context
from tests.test_scheduler_extender import FILTER_NCT, GH, fixture, job_pod, mixed_cluster, names_request

POD = job_pod(fixture(FILTER_NCT), uid="real-pod")
BODY = orjson.dumps(names_request(POD, ["gh200-node-1"])) + b"\n"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _client_of_another_ca(d: Path) -> tuple[Path, Path]:
    """A clientAuth certificate from a CA the extender does not know."""
    now = dt.datetime.now(dt.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("stranger")).issuer_name(_name("other-ca"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt, k = d / "stranger.crt", d / "stranger.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return crt, k


def _context(cert_dir: Path, pair: tuple[Path, Path] | None) -> ssl.SSLContext:
    ctx = anonymous_context(cert_dir)
    if pair is not None:
        ctx.load_cert_chain(*pair)
    return ctx


class Ready:
    ok = False

    def __call__(self) -> tuple[bool, str]:
        return self.ok, "ok: leader\n" if self.ok else "not ready: caches not synced: pods\n"


@pytest.fixture
async def guarded(tmp_path):
    """The extender as `gpuqueue extender --cert-dir DIR` starts it: no --client-ca, no opt-out."""
    cert_dir = extender_cert_dir(tmp_path / "certs")
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    view.add_pod(POD["Pod"])
    ready = Ready()
    runner = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir, ready=ready)
    clients = {"scheduler": scheduler_context(cert_dir),
               "stranger": _context(cert_dir, _client_of_another_ca(tmp_path)),
               # the serving certificate of the same CA (the webhook holds it): serverAuth only
               "server-cert": _context(cert_dir, (cert_dir / "tls.crt", cert_dir / "tls.key")),
               "anonymous": anonymous_context(cert_dir)}
    yield f"https://127.0.0.1:{runner.addresses[0][1]}", clients, view, ready
    await runner.cleanup()


async def _post(base: str, ctx: ssl.SSLContext, path: str = "/filter", body: bytes = BODY):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        async with s.post(base + path, data=body) as r:
            return r.status, await r.read()


async def test_kube_schedulers_certificate_is_served(guarded):
    base, clients, view, _ = guarded
    status, body = await _post(base, clients["scheduler"])
    assert status == 200 and orjson.loads(body)["NodeNames"] == ["gh200-node-1"]
    assert view.nodes.own_reservation("real-pod")[0] == "gh200-node-1"  # the only fit is reserved


@pytest.mark.parametrize("path", ["/filter", "/prioritize", "/preempt"])
async def test_a_client_without_a_certificate_is_refused_and_reserves_nothing(guarded, path):
    base, clients, view, _ = guarded
    status, body = await _post(base, clients["anonymous"], path)
    assert status == 403 and b"client certificate" in body
    assert view.nodes.own_reservation("real-pod") is None


@pytest.mark.parametrize("client", ["stranger", "server-cert"])
async def test_a_certificate_of_another_ca_or_not_for_clients_fails_the_handshake(guarded, client):
    base, clients, view, _ = guarded
    with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
        await _post(base, clients[client])
    assert view.nodes.own_reservation("real-pod") is None


async def test_healthz_and_readyz_stay_open_for_probes(guarded):
    base, clients, _, ready = guarded
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=clients["anonymous"])) as s:
        async with s.get(base + "/healthz") as r:
            assert r.status == 200 and await r.text() == "ok"
        async with s.get(base + "/readyz") as r:
            assert r.status == 503 and await r.text() == "not ready: caches not synced: pods\n"
        ready.ok = True
        async with s.get(base + "/readyz") as r:
            assert r.status == 200 and await r.text() == "ok: leader\n"


async def test_opting_out_serves_anyone_and_says_so_in_the_log(tmp_path, caplog):
    cert_dir = extender_cert_dir(tmp_path)
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    view.add_pod(POD["Pod"])
    with caplog.at_level(logging.WARNING, logger="gpuqueue.extender"):
        runner = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir, allow_any_client=True)
    try:
        assert any("to any client (--insecure-allow-any-client)" in r.getMessage() for r in caplog.records)
        status, body = await _post(f"https://127.0.0.1:{runner.addresses[0][1]}", anonymous_context(cert_dir))
        assert status == 200 and orjson.loads(body)["NodeNames"] == ["gh200-node-1"]
    finally:
        await runner.cleanup()


async def test_an_explicit_client_ca_replaces_the_cert_dirs(tmp_path):
    cert_dir = extender_cert_dir(tmp_path / "certs")
    own = generate(ServingIdentity())  # another CA, with its own client certificate
    write_files(tmp_path / "own", own)
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    view.add_pod(POD["Pod"])
    runner = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir, client_ca=tmp_path / "own" / "ca.crt")
    base = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        with pytest.raises((aiohttp.ClientError, ssl.SSLError)):
            await _post(base, scheduler_context(cert_dir))  # the cert dir's CA is not trusted now
        ctx = _context(cert_dir, (tmp_path / "own" / "scheduler-client.crt", tmp_path / "own" / "scheduler-client.key"))
        assert (await _post(base, ctx))[0] == 200
    finally:
        await runner.cleanup()


async def test_a_rotated_ca_is_trusted_without_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(extender_app, "CERT_CHECK_SECONDS", 0.05)
    cert_dir = extender_cert_dir(tmp_path / "certs")
    old_pair = tmp_path / "old-client.crt", tmp_path / "old-client.key"
    for old, name in zip(old_pair, ("scheduler-client.crt", "scheduler-client.key")):
        old.write_bytes((cert_dir / name).read_bytes())
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    view.add_pod(POD["Pod"])
    runner = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir)
    base = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        # `certs ensure` issued a new CA (the old one past two thirds of its life) and everything with it
        write_files(cert_dir, generate(ServingIdentity("gpuqueue-extender", ips=("127.0.0.1",), dns=("localhost",))))
        await asyncio.sleep(0.3)
        assert (await _post(base, scheduler_context(cert_dir)))[0] == 200  # kube-scheduler with the new files
        # one still presenting the old CA's certificate (not restarted yet) is still served
        assert (await _post(base, _context(cert_dir, old_pair)))[0] == 200
    finally:
        await runner.cleanup()


def test_the_command_refuses_to_start_without_a_client_ca(tmp_path, capsys):
    cert_dir = extender_cert_dir(tmp_path)
    (cert_dir / "ca.crt").unlink()
    assert main(["extender", "--kubeconfig", "/nonexistent", "--cert-dir", str(cert_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"gpuqueue extender: client certificates are verified against {cert_dir / 'ca.crt'}, which does "
                   f"not exist: give --client-ca FILE, or --insecure-allow-any-client to serve any client")


def test_certs_issue_kube_schedulers_client_certificate_signed_by_the_ca():
    m = generate(ServingIdentity())
    ca = x509.load_pem_x509_certificate(m.ca_cert_pem)
    client = x509.load_pem_x509_certificate(m.client_cert_pem)
    client.verify_directly_issued_by(ca)
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    serving = x509.load_pem_x509_certificate(m.cert_pem)
    assert list(serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert client.subject.rfc4514_string() == "CN=gpuqueue-scheduler-client"
    again, _ = make_client_cert(m.ca_cert_pem, m.ca_key_pem)
    assert again != m.client_cert_pem and CA_KEY_FILE == "ca.key"
