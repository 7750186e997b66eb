"""certs: generation, SANs, renewal at two thirds of life, caBundle injection, CLI."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import stat

from cryptography import x509

from gpuqueue.certs.ensure import plan_secret, webhook_ca_patch
from gpuqueue.certs.generate import ServingIdentity, generate, needs_renewal, validity_window
from gpuqueue.cli import main

IDENT = ServingIdentity("gpuqueue-webhook", "gpuqueue-system", dns=("webhook.example.com",), ips=("10.0.0.7",))


def sans(cert_pem: bytes):
    ext = x509.load_pem_x509_certificate(cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), ext.get_values_for_type(x509.IPAddress)


def test_serving_certificate_sans_and_chain():
    m = generate(IDENT)
    dns, ips = sans(m.cert_pem)
    assert dns == ["gpuqueue-webhook", "gpuqueue-webhook.gpuqueue-system", "gpuqueue-webhook.gpuqueue-system.svc",
                   "gpuqueue-webhook.gpuqueue-system.svc.cluster.local", "webhook.example.com"]
    assert ips == [ipaddress.ip_address("10.0.0.7")]
    cert, ca = x509.load_pem_x509_certificate(m.cert_pem), x509.load_pem_x509_certificate(m.ca_cert_pem)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_cli_generate_writes_secret_named_files(tmp_path, capsys):
    assert main(["certs", "generate", "--out", str(tmp_path), "--service", "svc", "--namespace", "ns",
                 "--dns", "a.example", "--ip", "127.0.0.1"]) == 0
    for name in ("ca.crt", "tls.crt", "tls.key", "scheduler-client.crt", "scheduler-client.key"):
        assert (tmp_path / name).exists()
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "scheduler-client.key").stat().st_mode) == 0o600
    dns, ips = sans((tmp_path / "tls.crt").read_bytes())
    assert {"svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.cluster.local", "a.example"} == set(dns)


def test_renewal_at_two_thirds_of_life():
    m = generate(IDENT, validity=dt.timedelta(days=90))
    start, end = validity_window(m.cert_pem)
    two_thirds = start + (end - start) * 2 / 3
    assert not needs_renewal(m.cert_pem, two_thirds - dt.timedelta(minutes=1))
    assert needs_renewal(m.cert_pem, two_thirds + dt.timedelta(minutes=1))
    assert needs_renewal(b"garbage")


def test_plan_secret_is_idempotent_and_renews_with_the_same_ca():
    first = plan_secret(None, IDENT)
    assert first.data is not None and "Secret missing" in first.reason
    assert plan_secret(first.data, IDENT).data is None, "a valid Secret is left alone"
    start, end = validity_window(first.data["tls.crt"])
    later = start + (end - start) * 0.7
    renewed = plan_secret(first.data, IDENT, now=later)
    assert renewed.data is not None and "same CA" in renewed.reason
    assert renewed.data["ca.crt"] == first.data["ca.crt"], "the caBundle stays valid across a renewal"
    assert renewed.data["tls.crt"] != first.data["tls.crt"]
    assert renewed.data["scheduler-client.crt"] != first.data["scheduler-client.crt"]
    assert plan_secret(renewed.data, IDENT, now=later).data is None


def test_plan_secret_reissues_a_missing_broken_or_foreign_client_certificate():
    data = plan_secret(None, IDENT).data
    other = plan_secret(None, IDENT).data  # another CA altogether
    missing = {k: v for k, v in data.items() if k != "scheduler-client.crt"}
    assert "scheduler client certificate or key missing" in plan_secret(missing, IDENT).reason
    broken = dict(data, **{"scheduler-client.key": other["scheduler-client.key"]})
    assert "not a pair" in plan_secret(broken, IDENT).reason
    foreign = dict(data, **{k: other[k] for k in ("scheduler-client.crt", "scheduler-client.key")})
    fixed = plan_secret(foreign, IDENT)
    assert "not signed by the CA" in fixed.reason and fixed.data["ca.crt"] == data["ca.crt"]


def test_plan_secret_reissues_for_new_names_and_broken_pairs():
    data = plan_secret(None, IDENT).data
    wider = ServingIdentity(IDENT.service, IDENT.namespace, dns=("other.example.com",))
    assert "does not cover" in plan_secret(data, wider).reason
    broken = dict(data, **{"tls.key": plan_secret(None, IDENT).data["tls.key"]})
    assert "not a pair" in plan_secret(broken, IDENT).reason


def test_ca_bundle_patch_is_idempotent():
    ca = generate(IDENT).ca_cert_pem
    cfg = {"webhooks": [{"name": "a", "clientConfig": {"service": {}}}, {"name": "b", "clientConfig": {"caBundle": "old"}}]}
    ops = webhook_ca_patch(cfg, ca)
    bundle = base64.b64encode(ca).decode()
    assert ops == [{"op": "test", "path": "/webhooks/0/name", "value": "a"},
                   {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle},
                   {"op": "test", "path": "/webhooks/1/name", "value": "b"},
                   {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": bundle}]
    for hook in cfg["webhooks"]:
        hook["clientConfig"]["caBundle"] = bundle
    assert webhook_ca_patch(cfg, ca) is None
