"""`certs ensure` against the API server stand-in, with the real kubernetes_asyncio client: the
Secret is created, left alone, renewed at two thirds of its life; caBundle lands in both webhook
configurations of manifests/install.yaml; and the calls made are exactly those gpuqueue/access.py declares."""

from __future__ import annotations

import base64
import copy
import datetime as dt
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from gpuqueue.certs.ensure import ensure
from gpuqueue.certs.generate import ServingIdentity, validity_window
from gpuqueue import access
from manifests.tools import render
from tests.standin import ApiServer
from tests.standin import resources as R
from tests.webhook_support import api_calls, assert_calls_match_access_table

CONFIGURATIONS = [o for o in render.build() if o["kind"].endswith("WebhookConfiguration")]  # as shipped
NS, SECRET, CONFIG = access.INSTALL_NAMESPACE, access.CERTS_SECRET, access.WEBHOOK_CONFIGURATION
HOOKS = {doc["kind"]: len(doc["webhooks"]) for doc in copy.deepcopy(CONFIGURATIONS)}
IDENT = ServingIdentity("gpuqueue-webhook", NS, dns=("gpuqueue-extender",))
CONFIG_KINDS = {"MutatingWebhookConfiguration": R.MUTATING_WEBHOOK_CONFIGURATIONS,
                "ValidatingWebhookConfiguration": R.VALIDATING_WEBHOOK_CONFIGURATIONS}


@pytest.fixture
async def api():
    async with ApiServer(namespaces=("default", "kube-system", NS)) as server:
        for doc in copy.deepcopy(CONFIGURATIONS):
            server.cluster.create(CONFIG_KINDS[doc["kind"]], None, doc)
        server.writes = []
        server.observe(server.writes.append)
        yield server
        assert not server.internal_errors and not server.observer_errors


def secret_data(api) -> dict[str, bytes]:
    secret = api.cluster.get(R.SECRETS, NS, SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def ca_bundles(api) -> list[str | None]:
    return [hook["clientConfig"].get("caBundle")
            for rt in CONFIG_KINDS.values() for hook in api.cluster.get(rt, None, CONFIG)["webhooks"]]


async def run(api, now: dt.datetime | None = None, out: Path | None = None) -> str:
    return await ensure(NS, SECRET, IDENT, CONFIG, out, configuration=api.client_configuration(), now=now)


async def test_first_run_creates_the_secret_and_injects_the_ca_everywhere(api, tmp_path):
    report = await run(api, out=tmp_path)
    assert "Secret missing" in report
    data = secret_data(api)
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key", "scheduler-client.crt", "scheduler-client.key"}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    x509.load_pem_x509_certificate(data["tls.crt"]).verify_directly_issued_by(ca)
    x509.load_pem_x509_certificate(data["scheduler-client.crt"]).verify_directly_issued_by(ca)
    bundle = base64.b64encode(data["ca.crt"]).decode()
    assert ca_bundles(api) == [bundle] * sum(HOOKS.values())  # every webhook of both configurations
    # the rest of each webhook is untouched
    hook = api.cluster.get(R.MUTATING_WEBHOOK_CONFIGURATIONS, None, CONFIG)["webhooks"][0]
    assert hook["clientConfig"]["service"]["path"] == "/mutate-batch-v1-job" and hook["timeoutSeconds"] == 5
    assert (tmp_path / "tls.crt").read_bytes() == data["tls.crt"] and not (tmp_path / "ca.key").exists()
    assert (tmp_path / "scheduler-client.crt").read_bytes() == data["scheduler-client.crt"]
    assert [(w.verb, w.resource.plural) for w in api.writes] == [
        ("create", "secrets"), ("patch", "mutatingwebhookconfigurations"), ("patch", "validatingwebhookconfigurations")]


async def test_second_run_writes_nothing(api):
    await run(api)
    before, api.writes[:] = secret_data(api), []
    report = await run(api)
    assert "nothing to do" in report and "injected" not in report
    assert api.writes == [] and secret_data(api) == before


async def test_renews_at_two_thirds_of_life_keeping_the_ca(api):
    await run(api)
    first = secret_data(api)
    start, end = validity_window(first["tls.crt"])
    api.writes.clear()
    await run(api, now=start + (end - start) * 0.6)
    assert api.writes == [], "renewed too early"
    report = await run(api, now=start + (end - start) * 0.7)
    assert "two thirds" in report and "same CA" in report
    renewed = secret_data(api)
    assert renewed["tls.crt"] != first["tls.crt"] and renewed["ca.crt"] == first["ca.crt"]
    # kube-scheduler's client certificate is renewed with the serving one, by the same CA
    assert renewed["scheduler-client.crt"] != first["scheduler-client.crt"]
    x509.load_pem_x509_certificate(renewed["scheduler-client.crt"]).verify_directly_issued_by(
        x509.load_pem_x509_certificate(first["ca.crt"]))
    # same CA: the caBundle is still right, so only the Secret was written
    assert [(w.verb, w.resource.plural) for w in api.writes] == [("update", "secrets")]


async def test_a_secret_from_before_client_certificates_gets_one_from_the_same_ca(api):
    await run(api)
    old = secret_data(api)
    older = {k: v for k, v in old.items() if not k.startswith("scheduler-client.")}
    secret = api.cluster.get(R.SECRETS, NS, SECRET)
    secret["data"] = {k: base64.b64encode(v).decode() for k, v in older.items()}
    api.cluster.update(R.SECRETS, NS, SECRET, secret)
    api.writes.clear()
    report = await run(api)
    assert "scheduler client certificate or key missing" in report and "same CA" in report
    upgraded = secret_data(api)
    assert upgraded["ca.crt"] == old["ca.crt"] and set(upgraded) == set(old)
    assert [(w.verb, w.resource.plural) for w in api.writes] == [("update", "secrets")]  # the caBundle still holds


async def test_a_new_ca_is_injected_again_and_a_wiped_bundle_restored(api):
    await run(api)
    ca_start, ca_end = validity_window(secret_data(api)["ca.crt"])
    await run(api, now=ca_start + (ca_end - ca_start) * 0.7)  # the CA itself is past two thirds
    new_bundle = base64.b64encode(secret_data(api)["ca.crt"]).decode()
    assert ca_bundles(api) == [new_bundle] * sum(HOOKS.values())
    # someone re-applies the manifest without caBundle (kubectl apply): the next pass puts it back
    doc = copy.deepcopy(next(c for c in CONFIGURATIONS if c["kind"] == "MutatingWebhookConfiguration"))
    current = api.cluster.get(R.MUTATING_WEBHOOK_CONFIGURATIONS, None, CONFIG)
    api.cluster.update(R.MUTATING_WEBHOOK_CONFIGURATIONS, None, CONFIG, {**doc, "metadata": current["metadata"]})
    assert ca_bundles(api)[:HOOKS['MutatingWebhookConfiguration']] == [None] * HOOKS['MutatingWebhookConfiguration']
    report = await run(api, now=ca_start + (ca_end - ca_start) * 0.7)
    assert "caBundle injected into MutatingWebhookConfiguration" in report
    assert "ValidatingWebhookConfiguration" not in report
    assert ca_bundles(api) == [new_bundle] * sum(HOOKS.values())


async def test_missing_webhook_configuration_is_reported_not_fatal(api):
    api.cluster.delete(R.VALIDATING_WEBHOOK_CONFIGURATIONS, None, CONFIG)
    report = await run(api)
    assert f"ValidatingWebhookConfiguration {CONFIG} not found" in report
    assert ca_bundles_mutating(api) == [base64.b64encode(secret_data(api)["ca.crt"]).decode()] * HOOKS[
        "MutatingWebhookConfiguration"]


async def test_the_install_job_fails_while_a_webhook_configuration_is_missing(api):
    """With --require-webhook-config (the install Job, the CronJob) a missing configuration fails the
    run after the rest is done, so the Job tries again: without its caBundle, kube-apiserver could not
    call the webhook and every pod of a tenant namespace would be refused."""
    from gpuqueue.certs.ensure import WebhookConfigurationMissing

    api.cluster.delete(R.VALIDATING_WEBHOOK_CONFIGURATIONS, None, CONFIG)
    with pytest.raises(WebhookConfigurationMissing, match=f"ValidatingWebhookConfiguration {CONFIG} not found"):
        await ensure(NS, SECRET, IDENT, CONFIG, configuration=api.client_configuration(), require_webhook_config=True)
    assert secret_data(api) and None not in ca_bundles_mutating(api)


def ca_bundles_mutating(api) -> list[str | None]:
    return [h["clientConfig"].get("caBundle") for h in api.cluster.get(R.MUTATING_WEBHOOK_CONFIGURATIONS, None, CONFIG)["webhooks"]]


async def test_calls_are_exactly_those_declared_for_certs(api):
    await run(api)  # create
    await run(api)  # read, nothing to do
    start, end = validity_window(secret_data(api)["tls.crt"])
    await run(api, now=start + (end - start) * 0.7)  # update
    assert_calls_match_access_table("certs", api_calls(api.requests))


async def test_standin_serves_secrets_and_webhook_configurations_as_built_in_kinds(api):
    import json

    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    async with client.ApiClient(api.client_configuration()) as ac:
        core, reg = client.CoreV1Api(ac), client.AdmissionregistrationV1Api(ac)
        with pytest.raises(ApiException) as e:
            await core.read_namespaced_secret(SECRET, NS)
        assert e.value.status == 404 and json.loads(e.value.body)["details"] == {"name": SECRET, "kind": "secrets"}
        created = await core.create_namespaced_secret(NS, {"metadata": {"name": "s"}, "type": "Opaque",
                                                           "data": {"k": "dg=="}})
        assert created.metadata.resource_version and created.data == {"k": "dg=="}
        raw = await (await core.list_namespaced_secret(NS, _preload_content=False)).json()
        assert raw["kind"] == "SecretList" and raw["apiVersion"] == "v1" and "kind" not in raw["items"][0]
        got = await (await reg.read_validating_webhook_configuration(CONFIG, _preload_content=False)).read()
        assert list(json.loads(got))[:3] == ["kind", "apiVersion", "metadata"]
        listed = await reg.list_mutating_webhook_configuration()
        assert [c.metadata.name for c in listed.items] == [CONFIG]
        # a JSON patch whose test op fails is refused as a whole
        with pytest.raises(ApiException) as e:
            await reg.patch_mutating_webhook_configuration(CONFIG, [
                {"op": "test", "path": "/webhooks/0/name", "value": "someone-else"},
                {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "eA=="}],
                _content_type="application/json-patch+json")
        assert e.value.status == 422
        assert ca_bundles(api) == [None] * sum(HOOKS.values())
