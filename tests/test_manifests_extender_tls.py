"""The opt-in client authentication of the extender, as the manifests show it: uncommenting the
extender's --client-ca line and the scheduler's certFile/keyFile lines gives a configuration
kube-scheduler accepts (its known tlsConfig fields) and an extender whose CA file is mounted."""

from __future__ import annotations

import argparse
import re

import yaml

from gpuqueue.extender.command import add_parser
from tests.test_manifests_install import MANIFESTS, TLS_FIELDS, find


def _uncomment(text: str, pattern: str) -> str:
    return re.sub(rf"^(\s*)# ({pattern})", r"\1\2", text, flags=re.M)


def test_scheduler_client_certificate_lines_uncomment_into_a_valid_tls_config():
    data = find("ConfigMap", "gpuqueue-scheduler-config")["data"]
    for key in ("config.yaml", "config-v1beta3.yaml"):
        config = yaml.safe_load(_uncomment(data[key], r"(certFile|keyFile): "))
        (ext,) = config["extenders"]
        assert set(ext["tlsConfig"]) <= TLS_FIELDS
        assert ext["tlsConfig"]["certFile"] == "/etc/gpuqueue/scheduler-client/tls.crt"
        assert ext["tlsConfig"]["keyFile"] == "/etc/gpuqueue/scheduler-client/tls.key"


def test_extender_client_ca_line_points_into_a_mounted_optional_secret():
    text = (MANIFESTS / "extender" / "deployment.yaml").read_text()
    deployment = yaml.safe_load(_uncomment(text, r"- --client-ca="))
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (flag,) = [a for a in container["args"] if a.startswith("--client-ca=")]
    path = flag.split("=", 1)[1]
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {"secretName": "gpuqueue-scheduler-client-ca", "optional": True}
    assert mount["readOnly"] is True
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    assert str(parser.parse_args(container["args"]).client_ca) == path
    # as shipped, the flag is off: the pod starts without the Secret
    assert not any(a.startswith("--client-ca") for a in find("Deployment", "gpuqueue-extender")["spec"]["template"]["spec"]["containers"][0]["args"])
