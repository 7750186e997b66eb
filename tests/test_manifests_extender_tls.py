"""Mutual TLS between kube-scheduler and the extender, as the manifests ship it: the scheduler
configuration (both API versions) presents the client certificate `gpuqueue certs` writes into
Secret gpuqueue-certs, from the paths its comment mounts; the extender verifies clients against
that Secret's CA by default (no opt-out flag), and mounts neither the CA's key nor kube-scheduler's;
the renewal CronJob keeps writing that Secret."""

from __future__ import annotations

import argparse
import re
from pathlib import PurePosixPath

import yaml

from gpuqueue.certs.ensure import plan_secret
from gpuqueue.certs.generate import ServingIdentity
from gpuqueue.extender.command import add_parser
from gpuqueue.extender.scheduler.app import client_ca_file
from tests.test_manifests_install import CHART, TLS_FIELDS, find

SECRET_KEYS = set(plan_secret(None, ServingIdentity()).data)  # what `certs ensure` writes into the Secret


def _scheduler_mount() -> dict:
    """The Secret volume the scheduler configuration's comment tells operators to mount."""
    text = (CHART / "templates" / "scheduler-config.yaml").read_text()
    block = re.search(r"^#   volumes:\n((?:#  .*\n)+)", text, re.M).group(1)
    (volume,) = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    return volume


def test_kube_scheduler_presents_the_client_certificate_of_the_certs_secret():
    volume = _scheduler_mount()
    assert volume["secret"]["secretName"] == "gpuqueue-certs"
    mounted = {i["path"]: i["key"] for i in volume["secret"]["items"]}
    assert set(mounted.values()) <= SECRET_KEYS and "ca.key" not in mounted.values()
    data = find("ConfigMap", "gpuqueue-scheduler-config")["data"]
    for key in ("config.yaml", "config-v1beta3.yaml"):
        (ext,) = yaml.safe_load(data[key])["extenders"]
        tls = ext["tlsConfig"]
        assert set(tls) <= TLS_FIELDS  # kube-scheduler decodes strictly
        assert tls == {"caFile": "/etc/gpuqueue/certs/ca.crt", "certFile": "/etc/gpuqueue/certs/scheduler-client.crt",
                       "keyFile": "/etc/gpuqueue/certs/scheduler-client.key"}
        for path in tls.values():  # each file is one the mount provides, from the Secret's key of that name
            assert str(PurePosixPath(path).parent) == "/etc/gpuqueue/certs"
            assert mounted[PurePosixPath(path).name] == PurePosixPath(path).name


def test_the_extender_requires_client_certificates_signed_by_the_secrets_ca(tmp_path):
    pod = find("Deployment", "gpuqueue-extender")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(container["args"])
    assert args.client_ca is None and not args.insecure_allow_any_client and not args.insecure_http
    # so the CA is the cert dir's ca.crt, which the certs volume provides from the Secret
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(args.cert_dir)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "gpuqueue-certs"
    projected = {i["key"]: i["path"] for i in volume["secret"]["items"]}
    assert projected == {"ca.crt": "ca.crt", "tls.crt": "tls.crt", "tls.key": "tls.key"}
    assert set(projected) <= SECRET_KEYS
    for name in projected.values():
        (tmp_path / name).write_text("x")
    assert client_ca_file(tmp_path, args.client_ca, args.insecure_allow_any_client) == tmp_path / "ca.crt"


def test_the_renewal_cronjob_writes_the_secret_both_sides_mount():
    cron = find("CronJob", "gpuqueue-certs")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert cron["args"][:2] == ["certs", "ensure"] and "--secret=gpuqueue-certs" in cron["args"]
    assert {"scheduler-client.crt", "scheduler-client.key", "ca.crt", "tls.crt", "tls.key"} <= SECRET_KEYS


def test_the_configuration_states_the_enforcement_policy():
    from gpuqueue.jobframework.enforcement import DEFAULT_EXEMPT_NAMESPACES, EnforcementConfig

    doc = yaml.safe_load(find("ConfigMap", "gpuqueue-config")["data"]["config.yaml"])
    config = EnforcementConfig.from_kueue_configuration(doc)
    assert config.mode == "Strict" and config.exempt_namespaces == frozenset(DEFAULT_EXEMPT_NAMESPACES)
