"""charts/gpuqueue: the plain manifests are its renderings, it lints and packages, and each value
does what values.yaml says, as `helm template` renders it (needs helm: tests/chart_support.py)."""

from __future__ import annotations

import base64
import json
import re
import subprocess

import pytest
import yaml

from gpuqueue.jobframework.enforcement import BASE_RESOURCES
from manifests.tools import render
from tests import chart_support
from gpuqueue.webhook.pod_admission import DEFAULT_SCHEDULER_USERNAMES

POD_HOOKS = {("MutatingWebhookConfiguration", "pod.gpuqueue.io"), ("ValidatingWebhookConfiguration", "pod.gpuqueue.io"),
             ("ValidatingWebhookConfiguration", "binding.gpuqueue.io")}


def helm(*args: str, cwd=None) -> subprocess.CompletedProcess:
    chart_support.require_helm()
    return subprocess.run([render.helm_binary(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def find(objects, kind, name):
    return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)


def hooks(objects):
    for o in objects:
        if o["kind"].endswith("WebhookConfiguration"):
            for h in o["webhooks"]:
                yield o["kind"], h


def deployments(objects):
    return [o for o in objects if o["kind"] == "Deployment"]


# --- one source of truth ------------------------------------------------------------------------


@pytest.mark.parametrize("path", list(render.RENDERINGS), ids=lambda p: p.name)
def test_the_plain_manifests_are_the_charts_current_rendering(path):
    chart_support.require_helm()
    assert path.read_text() == render.render(path), "run: python manifests/tools/render.py"


def test_no_manifest_is_kept_beside_the_chart():
    """manifests/ holds the renderings, the examples and the tools, nothing the chart renders."""
    names = {p.name for p in render.MANIFESTS.iterdir() if not p.name.startswith(".")}
    assert names == {"install.yaml", "install-pre-1.28.yaml", "examples", "tools"}


@pytest.mark.parametrize("strict", [False, True])
def test_helm_lint_is_clean(strict):
    out = helm("lint", str(render.CHART), *(["--strict"] if strict else []))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def test_helm_package_makes_the_versioned_chart(tmp_path):
    out = helm("package", str(render.CHART), "--destination", str(tmp_path))
    assert out.returncode == 0, out.stderr
    (pkg,) = tmp_path.glob("*.tgz")
    assert pkg.name == f"gpuqueue-{yaml.safe_load((render.CHART / 'Chart.yaml').read_text())['version']}.tgz"
    # the package renders what the folder renders
    out = helm("template", "gpuqueue", str(pkg), "--namespace", render.NAMESPACE)
    assert render.objects(out.stdout) == render.build()


def test_a_bad_value_is_one_line():
    chart_support.require_helm()
    with pytest.raises(render.HelmError) as err:
        render.template(values={"schedulerMode": "mine"})
    assert str(err.value) == 'schedulerMode: "mine" is neither own-scheduler nor cluster-scheduler'


# --- the pod and binding webhooks ----------------------------------------------------------------


def test_on_1_28_and_later_only_the_pod_and_binding_webhooks_have_match_conditions():
    with_conditions = {(k, h["name"]) for k, h in hooks(render.build()) if "matchConditions" in h}
    assert with_conditions == POD_HOOKS
    assert not [h for _, h in hooks(render.build(render.INSTALL_PRE_128)) if "matchConditions" in h]
    # the rest is the same install
    strip = [{**o, "webhooks": [{k: v for k, v in h.items() if k != "matchConditions"} for h in o["webhooks"]]}
             if "webhooks" in o else o for o in render.build()]
    assert strip == render.build(render.INSTALL_PRE_128)


def condition(objects, kind, name) -> str:
    (hook,) = [h for k, h in hooks(objects) if (k, h["name"]) == (kind, name)]
    (cond,) = hook["matchConditions"]
    return cond["expression"]


def test_the_binding_condition_skips_exactly_the_schedulers_the_webhook_trusts():
    objects = render.build()
    expr = condition(objects, "ValidatingWebhookConfiguration", "binding.gpuqueue.io")
    names = re.fullmatch(r"!\(request\.userInfo\.username in \[(.*)\]\)", expr).group(1)
    assert [n.strip("'") for n in names.split(",")] == list(DEFAULT_SCHEDULER_USERNAMES)
    args = find(objects, "Deployment", "gpuqueue-webhook")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a.split("=", 1)[1] for a in args if a.startswith("--scheduler-username=")] == list(DEFAULT_SCHEDULER_USERNAMES)


def test_the_pod_condition_leaves_out_exactly_what_every_pod_requests():
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        expr = condition(render.build(), kind, "pod.gpuqueue.io")
        lists = set(re.findall(r"!\(r in \[([^\]]*)\]\)", expr))
        assert [{x.strip("'") for x in lst.split(",")} for lst in lists] == [set(BASE_RESOURCES)]
        for part in ("object.spec.containers", "object.spec.initContainers", "object.spec.resources.requests",
                     "object.spec.resources.limits", "object.spec.overhead", "c.resources.requests",
                     "c.resources.limits", "startsWith('kueue.x-k8s.io/')"):
            assert part in expr, part


def test_resources_the_operator_enforces_by_name_are_matched_too():
    objects = chart_support.rendered(values={"configuration": {"enforcement": {"resources": ["cpu", "example.com/fpga"]}}})
    expr = condition(objects, "ValidatingWebhookConfiguration", "pod.gpuqueue.io")
    assert "|| r in ['cpu','example.com/fpga']" in expr


def test_with_the_pod_integration_the_pod_webhooks_see_every_pod_again():
    frameworks = ["batch/job", "pod"]
    objects = chart_support.rendered(values={"configuration": {"integrations": {"frameworks": frameworks}}})
    assert {(k, h["name"]) for k, h in hooks(objects) if "matchConditions" in h} == \
        {("ValidatingWebhookConfiguration", "binding.gpuqueue.io")}


def test_failure_policy_and_namespace_labels_are_the_operators_choice_for_old_servers():
    objects = chart_support.rendered("--kube-version", "1.27.0", values={
        "podWebhooks": {"failurePolicy": "Ignore", "namespaceLabels": {"gpuqueue.io/managed": "true"}}})
    for kind, hook in hooks(objects):
        if (kind, hook["name"]) in POD_HOOKS:
            assert hook["failurePolicy"] == "Ignore"
            assert {"key": "gpuqueue.io/managed", "operator": "In", "values": ["true"]} in \
                hook["namespaceSelector"]["matchExpressions"]
        else:
            assert hook["failurePolicy"] == ("Ignore" if hook["name"] == "unqueued.gpuqueue.io" else "Fail")


def test_match_conditions_can_be_turned_off():
    objects = chart_support.rendered(values={"podWebhooks": {"matchConditions": False}})
    assert not [h for _, h in hooks(objects) if "matchConditions" in h]


# --- the other values ------------------------------------------------------------------------------


def test_an_external_webhook_is_called_by_url_with_its_ca():
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    objects = chart_support.rendered(values={"webhook": {"external": {"url": "https://127.0.0.1:9443/", "caBundle": ca}}})
    for _, hook in hooks(objects):
        assert set(hook["clientConfig"]) == {"url", "caBundle"}
        assert re.fullmatch(r"https://127\.0\.0\.1:9443/[a-z0-9-]+", hook["clientConfig"]["url"])
        assert hook["clientConfig"]["caBundle"] == ca


def test_placement_values_reach_every_deployment():
    placement = {"nodeSelector": {"pool": "system"}, "tolerations": [{"key": "system", "operator": "Exists"}],
                 "priorityClassName": "system-cluster-critical",
                 "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                "whenUnsatisfiable": "ScheduleAnyway"}],
                 "affinity": {"nodeAffinity": {}}, "replicas": 3,
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
                 "podDisruptionBudget": {"enabled": True, "minAvailable": 2}}
    objects = chart_support.rendered(values={c: placement for c in ("webhook", "extender", "scheduler")})
    assert len(deployments(objects)) == 3
    for dep in deployments(objects):
        pod = dep["spec"]["template"]["spec"]
        assert dep["spec"]["replicas"] == 3
        for key in ("nodeSelector", "tolerations", "priorityClassName", "topologySpreadConstraints", "affinity"):
            assert pod[key] == placement[key], (dep["metadata"]["name"], key)
        assert pod["containers"][0]["resources"] == placement["resources"]
        assert find(objects, "PodDisruptionBudget", dep["metadata"]["name"])["spec"]["minAvailable"] == 2
    objects = chart_support.rendered(values={"webhook": {"podDisruptionBudget": {"enabled": False}}})
    assert find(objects, "PodDisruptionBudget", "gpuqueue-webhook") is None


def test_the_image_values():
    objects = chart_support.rendered(values={"image": {"repository": "r.example/gpuqueue", "tag": "9.9",
                                                        "pullPolicy": "Always"}, "imagePullSecrets": [{"name": "pull"}]})
    for o in objects:
        for pod in render.pod_specs(o):
            for c in pod["containers"]:
                if c["name"] != "kube-scheduler":
                    assert (c["image"], c["imagePullPolicy"]) == ("r.example/gpuqueue:9.9", "Always")
            assert pod["imagePullSecrets"] == [{"name": "pull"}]


def test_configuration_fields_are_written_as_given():
    extra = {"waitForPodsReady": {"enable": True, "timeout": "5m"}, "fairSharing": {"enable": True}}
    objects = chart_support.rendered(values={"configuration": extra})
    config = yaml.safe_load(find(objects, "ConfigMap", "gpuqueue-config")["data"]["config.yaml"])
    assert config["waitForPodsReady"] == extra["waitForPodsReady"] and config["fairSharing"] == extra["fairSharing"]
    assert config["integrations"]["frameworks"][0] == "batch/job", "the defaults stay"


def test_cert_manager_replaces_the_certs_job():
    objects = chart_support.rendered(values={"enableCertManager": True})
    assert find(objects, "Job", "gpuqueue-certs-install") is None and find(objects, "CronJob", "gpuqueue-certs") is None
    serving = find(objects, "Certificate", "gpuqueue-serving")
    assert serving["spec"]["secretName"] == "gpuqueue-certs"
    assert "gpuqueue-webhook.gpuqueue-system.svc" in serving["spec"]["dnsNames"]
    assert "gpuqueue-extender.gpuqueue-system.svc" in serving["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert find(objects, kind, "gpuqueue")["metadata"]["annotations"] == \
            {"cert-manager.io/inject-ca-from": "gpuqueue-system/gpuqueue-serving"}
    volumes = {v["name"]: v for v in find(objects, "Deployment", "gpuqueue-scheduler")["spec"]["template"]["spec"]["volumes"]}
    (source,) = volumes["certs"]["projected"]["sources"]
    assert source["secret"]["name"] == find(objects, "Certificate", "gpuqueue-scheduler-client")["spec"]["secretName"]
    assert {i["path"] for i in source["secret"]["items"]} == {"ca.crt", "scheduler-client.crt", "scheduler-client.key"}


def test_metrics_dashboard_and_visibility_switches():
    objects = chart_support.rendered(values={"metrics": {"serviceMonitor": {"enabled": True}},
                                             "grafanaDashboard": {"enabled": True}, "visibility": {"enabled": False}})
    monitor = find(objects, "ServiceMonitor", "gpuqueue-extender")
    metrics = find(objects, "Service", "gpuqueue-extender-metrics")
    assert monitor["spec"]["selector"]["matchLabels"] == metrics["metadata"]["labels"]
    assert monitor["spec"]["endpoints"][0]["port"] == metrics["spec"]["ports"][0]["name"]
    dashboard = find(objects, "ConfigMap", "gpuqueue-grafana-dashboard")["data"]["gpuqueue-dashboard.json"]
    assert json.loads(dashboard) == json.loads((render.CHART / "files" / "gpuqueue-dashboard.json").read_text())
    assert not [o for o in objects if o["kind"] == "APIService"] and find(objects, "Service", "gpuqueue-visibility") is None
    assert find(render.build(), "ServiceMonitor", "gpuqueue-extender") is None


def test_another_namespace_is_used_throughout():
    chart_support.require_helm()
    text = subprocess.run([render.helm_binary(), "template", "gpuqueue", str(render.CHART), "--namespace", "gq"],
                          capture_output=True, text=True, check=True).stdout
    assert "gpuqueue-system" not in text
    objects = render.objects(text)
    config = yaml.safe_load(find(objects, "ConfigMap", "gpuqueue-config")["data"]["config.yaml"])
    assert config["namespace"] == "gq" and config["enforcement"]["exemptNamespaces"][:2] == ["kube-system", "gq"]


def test_crds_and_namespace_are_kept_on_uninstall():
    for o in render.build():
        if o["kind"] in ("CustomResourceDefinition", "Namespace"):
            assert o["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", o["metadata"]["name"]
        else:
            assert "helm.sh/resource-policy" not in (o["metadata"].get("annotations") or {}), o["metadata"]["name"]
