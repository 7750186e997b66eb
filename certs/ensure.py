"""`gpuqueue certs ensure`: keep the certs Secret valid (CA, serving certificate, kube-scheduler's
client certificate for the extender) and the caBundle injected.

The decision is pure (``plan_secret``): given the Secret's current data, keep it, or
issue new material (reusing the CA while it has most of its life left). The shell
(``ensure``) reads and writes the Secret and the two webhook configurations with
kubernetes-asyncio; every step compares first and writes only on a difference, so
running it again changes nothing.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from gpuqueue.certs.generate import (
    CA_FILE, CA_KEY_FILE, CERT_FILE, DEFAULT_VALIDITY, KEY_FILE, SCHEDULER_CLIENT_CERT_FILE,
    SCHEDULER_CLIENT_KEY_FILE, ServingIdentity, TLSMaterial, generate, needs_renewal, write_files,
)

log = logging.getLogger("gpuqueue.certs")

SECRET_TYPE = "kubernetes.io/tls"


@dataclass(frozen=True)
class SecretPlan:
    data: dict[str, bytes] | None  # None: keep the Secret as it is
    reason: str


def _sans_cover(cert_pem: bytes, identity: ServingIdentity) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    names = set(san.get_values_for_type(x509.DNSName))
    ips = set(san.get_values_for_type(x509.IPAddress))
    return set(identity.dns_names()) <= names and set(identity.ip_addresses()) <= ips


def _pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    from cryptography.hazmat.primitives import serialization
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return cert.public_key().public_numbers() == key.public_key().public_numbers()


def _issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    try:
        x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def plan_secret(current: Mapping[str, bytes] | None, identity: ServingIdentity,
                now: dt.datetime | None = None, validity: dt.timedelta = DEFAULT_VALIDITY) -> SecretPlan:
    now = now or dt.datetime.now(dt.timezone.utc)
    if not current:
        return SecretPlan(_data(generate(identity, validity, now=now)), "Secret missing: issued a new CA and serving certificate")
    cert, key, ca, ca_key, client, client_key = (current.get(k, b"") for k in (
        CERT_FILE, KEY_FILE, CA_FILE, CA_KEY_FILE, SCHEDULER_CLIENT_CERT_FILE, SCHEDULER_CLIENT_KEY_FILE))
    ca_usable = bool(ca and ca_key) and _pair_matches(ca, ca_key) and not needs_renewal(ca, now)
    reason = None
    if not (cert and key) or not _pair_matches(cert, key):
        reason = "serving certificate or key missing or not a pair"
    elif needs_renewal(cert, now):
        reason = "serving certificate past two thirds of its life"
    elif not _sans_cover(cert, identity):
        reason = "serving certificate does not cover the requested names"
    elif not (client and client_key) or not _pair_matches(client, client_key):
        reason = "scheduler client certificate or key missing or not a pair"
    elif needs_renewal(client, now):
        reason = "scheduler client certificate past two thirds of its life"
    elif not (_issued_by(cert, ca) and _issued_by(client, ca)):
        reason = "certificates not signed by the CA"
    elif not ca_usable and ca_key:
        reason = "CA past two thirds of its life"
    if reason is None:
        return SecretPlan(None, "Secret valid: nothing to do")
    material = generate(identity, validity, ca=(ca, ca_key) if ca_usable else None, now=now)
    return SecretPlan(_data(material), reason + ("; renewed with the same CA" if ca_usable else "; issued a new CA"))


def _data(m: TLSMaterial) -> dict[str, bytes]:
    return {CA_FILE: m.ca_cert_pem, CA_KEY_FILE: m.ca_key_pem, CERT_FILE: m.cert_pem, KEY_FILE: m.key_pem,
            SCHEDULER_CLIENT_CERT_FILE: m.client_cert_pem, SCHEDULER_CLIENT_KEY_FILE: m.client_key_pem}


def webhook_ca_patch(config: Mapping, ca_pem: bytes) -> list[dict] | None:
    """JSONPatch setting every webhook's clientConfig.caBundle, or None when all are current.

    Each change is preceded by a ``test`` of the webhook's name at that index, so a configuration
    rewritten between our read and our patch fails the patch (422) instead of being patched blindly."""
    bundle = base64.b64encode(ca_pem).decode()
    ops = []
    for i, hook in enumerate(config.get("webhooks") or []):
        if (hook.get("clientConfig") or {}).get("caBundle") != bundle:
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")})
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle})
    return ops or None


class WebhookConfigurationMissing(LookupError):
    pass


async def ensure(namespace: str, secret_name: str, identity: ServingIdentity, webhook_config_name: str,
                 out: Path | None = None, *, configuration=None, now: dt.datetime | None = None,
                 require_webhook_config: bool = False) -> str:
    """One pass: Secret, caBundle injection, optional files. Returns what was done.

    ``configuration``: a kubernetes_asyncio Configuration (``gpuqueue.kube.config.load_config``;
    default: kubernetes_asyncio's default one); ``now``: the time the renewal decision is made at;
    ``require_webhook_config``: a webhook configuration that does not exist (yet) raises
    WebhookConfigurationMissing after the rest is done, so that a Job tries again."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.rest import ApiException

    done, missing = [], []
    async with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        try:
            secret = await core.read_namespaced_secret(secret_name, namespace)
            current = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        except ApiException as exc:
            if exc.status != 404:
                raise
            secret, current = None, None
        plan = plan_secret(current, identity, now)
        data = plan.data or current or {}
        if plan.data is not None:
            body = client.V1Secret(metadata=client.V1ObjectMeta(name=secret_name, namespace=namespace),
                                   type=SECRET_TYPE,
                                   data={k: base64.b64encode(v).decode() for k, v in plan.data.items()})
            if secret is None:
                await core.create_namespaced_secret(namespace, body)
            else:
                body.metadata.resource_version = secret.metadata.resource_version
                await core.replace_namespaced_secret(secret_name, namespace, body)
        done.append(plan.reason)
        reg = client.AdmissionregistrationV1Api(api)
        for kind, read, patch in (
            ("MutatingWebhookConfiguration", reg.read_mutating_webhook_configuration, reg.patch_mutating_webhook_configuration),
            ("ValidatingWebhookConfiguration", reg.read_validating_webhook_configuration, reg.patch_validating_webhook_configuration),
        ):
            try:
                cfg = api.sanitize_for_serialization(await read(webhook_config_name))
            except ApiException as exc:
                if exc.status != 404:
                    raise
                done.append(f"{kind} {webhook_config_name} not found: caBundle not injected")
                missing.append(kind)
                continue
            ops = webhook_ca_patch(cfg, data[CA_FILE])
            if ops:
                await patch(webhook_config_name, ops, _content_type="application/json-patch+json")
                done.append(f"caBundle injected into {kind} {webhook_config_name}")
    if out is not None:
        write_files(out, TLSMaterial(data[CA_FILE], data.get(CA_KEY_FILE, b""), data[CERT_FILE], data[KEY_FILE],
                                     data.get(SCHEDULER_CLIENT_CERT_FILE, b""), data.get(SCHEDULER_CLIENT_KEY_FILE, b"")),
                    write_ca_key=False)
        done.append(f"files written to {out}")
    if missing and require_webhook_config:
        raise WebhookConfigurationMissing("; ".join(done))
    return "; ".join(done)
