"""The scheduler modes of the chart: the value `schedulerMode` chooses between
gpuqueue-scheduler (a second kube-scheduler with the extender) and the extender added to the
cluster's scheduler. In each mode the install is valid Kubernetes, the Configuration's
enforcement.schedulerNames sends GPU pods to a scheduler that calls the extender, and
gpuqueue-scheduler's Deployment, RBAC and configuration agree with each other and with the form a
real kube-scheduler accepted (shared/fixtures/k8s-1.24/extender/)."""

from __future__ import annotations

import posixpath
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpuqueue import access
from manifests.tools import render
from tests import chart_support
from tests.shared_fixtures import k8s_recording
from tests.test_manifests_install import K8S_VERSIONS, canonical

ROOT = Path(__file__).resolve().parent.parent
NS = "gpuqueue-system"
MODES = ["own-scheduler", "cluster-scheduler"]
SCHEDULER = "gpuqueue-scheduler"
CONFIG_KEYS = {"config.yaml": "kubescheduler.config.k8s.io/v1", "config-v1beta3.yaml": "kubescheduler.config.k8s.io/v1beta3"}
SCHEDULER_CERTS = {"ca.crt", "scheduler-client.crt", "scheduler-client.key"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    """The install in each mode (`--set schedulerMode=...`, what an operator sets)."""
    return {mode: chart_support.rendered(values={"schedulerMode": mode}) for mode in MODES}


def find(objects: list[dict], kind: str, name: str) -> dict | None:
    return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)


def configuration(objects: list[dict]) -> dict:
    return yaml.safe_load(find(objects, "ConfigMap", "gpuqueue-config")["data"]["config.yaml"])


def scheduler_configs(objects: list[dict]) -> dict[str, dict]:
    data = find(objects, "ConfigMap", "gpuqueue-scheduler-config")["data"]
    return {key: yaml.safe_load(text) for key, text in data.items()}


# --- one setting -------------------------------------------------------------------------------


def test_own_scheduler_is_the_default_and_another_mode_is_refused_in_one_line():
    assert yaml.safe_load((ROOT / "charts" / "gpuqueue" / "values.yaml").read_text())["schedulerMode"] == "own-scheduler"
    assert find(render.build(), "Deployment", SCHEDULER)
    chart_support.require_helm()
    with pytest.raises(render.HelmError, match='schedulerMode: "own" is neither own-scheduler nor cluster-scheduler'):
        render.template(values={"schedulerMode": "own"})


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_validates_against_the_kubernetes_openapi_schemas(rendered, mode, version):
    objects = rendered[mode] if version >= "1.28" else \
        chart_support.rendered("--kube-version", "1.27.0", values={"schedulerMode": mode})
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)
    assert find(rendered[mode], "Deployment", "gpuqueue-extender")


def test_the_modes_differ_only_in_the_scheduler_and_the_scheduler_names(rendered):
    own, cluster = rendered["own-scheduler"], rendered["cluster-scheduler"]
    scheduler_objects = {(o["kind"], o["metadata"]["name"]) for o in own if o["metadata"]["name"].startswith(SCHEDULER)
                         and o["kind"] != "ConfigMap"}
    assert scheduler_objects == {
        ("Deployment", SCHEDULER), ("PodDisruptionBudget", SCHEDULER), ("ServiceAccount", SCHEDULER),
        ("ClusterRoleBinding", SCHEDULER), ("ClusterRoleBinding", "gpuqueue-scheduler-volume-scheduler"),
        ("Role", "gpuqueue-scheduler-leader-election"), ("RoleBinding", "gpuqueue-scheduler-leader-election"),
    }  # fmt: skip
    rest = [o for o in own if (o["kind"], o["metadata"]["name"]) not in scheduler_objects]
    assert canonical(o for o in rest if o["metadata"]["name"] != "gpuqueue-config") == \
        canonical(o for o in cluster if o["metadata"]["name"] != "gpuqueue-config")
    a, b = configuration(own), configuration(cluster)
    assert a["enforcement"].pop("schedulerNames") == [SCHEDULER]
    assert b["enforcement"].pop("schedulerNames") == ["default-scheduler"]
    assert a == b, "the modes must give the same Configuration but for schedulerNames"


def test_gpu_pods_go_to_a_scheduler_that_calls_the_extender_in_each_mode(rendered):
    """Every name in schedulerNames is accepted as is, the first is given to pods naming another:
    each must be a scheduler whose configuration has the extender, or a pod could skip its filter."""
    own = rendered["own-scheduler"]
    deployment = find(own, "Deployment", SCHEDULER)
    config = mounted_scheduler_config(own, deployment)
    assert [p["schedulerName"] for p in config["profiles"]] == configuration(own)["enforcement"]["schedulerNames"]
    assert config["extenders"]
    cluster = rendered["cluster-scheduler"]
    assert find(cluster, "Deployment", SCHEDULER) is None
    # default-scheduler calls the extender once the operator adds the entry (docs/scheduler.md)
    assert configuration(cluster)["enforcement"]["schedulerNames"] == ["default-scheduler"]


# --- gpuqueue-scheduler's Deployment ----------------------------------------------------------


def scheduler_container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def arg(container: dict, name: str) -> str | None:
    prefix = f"--{name}="
    return next((a[len(prefix):] for a in container["args"] if a.startswith(prefix)), None)


def mounts(deployment: dict) -> dict[str, tuple[str, dict]]:
    """mountPath -> (volume name, volume)."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: (m["name"], volumes[m["name"]]) for m in scheduler_container(deployment)["volumeMounts"]}


def mounted_scheduler_config(objects: list[dict], deployment: dict) -> dict:
    path = arg(scheduler_container(deployment), "config")
    directory, key = posixpath.split(path)
    _name, volume = mounts(deployment)[directory]
    assert volume["configMap"]["name"] == "gpuqueue-scheduler-config"
    return scheduler_configs(objects)[key]


def own() -> list[dict]:
    return render.build()


def test_the_kube_scheduler_version_is_set_in_one_place():
    image = yaml.safe_load((ROOT / "charts" / "gpuqueue" / "values.yaml").read_text())["scheduler"]["image"]
    assert image["tag"].startswith("v1.")
    assert "kube-scheduler:" not in (ROOT / "charts" / "gpuqueue" / "templates" / "scheduler.yaml").read_text()
    assert scheduler_container(find(own(), "Deployment", SCHEDULER))["image"] == f"{image['repository']}:{image['tag']}"


def test_the_scheduler_runs_the_v1_config_and_elects_its_leader_in_gpuqueue_system():
    objects = own()
    dep = find(objects, "Deployment", SCHEDULER)
    container = scheduler_container(dep)
    assert container["command"] == ["kube-scheduler"]
    assert arg(container, "config").endswith("/config.yaml"), "v1 for current clusters; config-v1beta3.yaml for 1.24"
    config = mounted_scheduler_config(objects, dep)
    assert config["apiVersion"] == CONFIG_KEYS["config.yaml"]
    election = config["leaderElection"]
    assert (election["leaderElect"], election["resourceNamespace"], election["resourceName"]) == (True, NS, SCHEDULER)
    assert dep["spec"]["replicas"] == 2 and find(objects, "PodDisruptionBudget", SCHEDULER)["spec"]["minAvailable"] == 1
    assert "clientConnection" not in config, "in cluster: the ServiceAccount's token, not a kubeconfig"


def test_probes_use_kube_schedulers_secure_port():
    container = scheduler_container(find(own(), "Deployment", SCHEDULER))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(arg(container, "secure-port")) == ports["https"] == 10259
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"], get["port"]) == ("/healthz", "HTTPS", "https")
    assert arg(container, "authentication-tolerate-lookup-failure") == "true"


def test_the_extender_tls_files_are_exactly_the_mounted_secret_items():
    """certFile/keyFile/caFile of both config versions name files the pod has, and the pod has
    nothing else of Secret gpuqueue-certs (not the CA's key, not the extender's serving key)."""
    objects = own()
    dep = find(objects, "Deployment", SCHEDULER)
    secrets = {path: v["secret"] for path, (_n, v) in mounts(dep).items() if "secret" in v}
    (directory, secret), = secrets.items()
    assert secret["secretName"] == "gpuqueue-certs"
    assert {i["key"] for i in secret["items"]} == {i["path"] for i in secret["items"]} == SCHEDULER_CERTS
    for key, config in scheduler_configs(objects).items():
        tls = config["extenders"][0]["tlsConfig"]
        files = {tls["caFile"], tls["certFile"], tls["keyFile"]}
        assert {posixpath.dirname(f) for f in files} == {directory}, key
        assert {posixpath.basename(f) for f in files} == SCHEDULER_CERTS, key


def test_the_extender_url_is_the_extender_service():
    objects = own()
    service = find(objects, "Service", "gpuqueue-extender")
    (port,) = service["spec"]["ports"]
    for key, config in scheduler_configs(objects).items():
        (extender,) = config["extenders"]
        assert extender["urlPrefix"] == f"https://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port['port']}", key
        assert extender["enableHTTPS"] is True


def test_the_scheduler_is_granted_what_kube_scheduler_is_and_its_lease():
    objects = own()
    assert find(objects, "Deployment", SCHEDULER)["spec"]["template"]["spec"]["serviceAccountName"] == SCHEDULER
    subject = {"kind": "ServiceAccount", "name": SCHEDULER, "namespace": NS}
    cluster_roles = {b["roleRef"]["name"] for b in objects if b["kind"] == "ClusterRoleBinding" and subject in b["subjects"]}
    assert cluster_roles == {"system:kube-scheduler", "system:volume-scheduler"}
    roles = [b for b in objects if b["kind"] == "RoleBinding" and subject in b["subjects"]]
    assert [(b["metadata"]["namespace"], b["roleRef"]["kind"]) for b in roles] == [(NS, "Role")]
    role = find(objects, "Role", roles[0]["roleRef"]["name"])
    grants = {(v, n) for r in role["rules"] for v in r["verbs"] for n in r.get("resourceNames") or [""]
              if r["resources"] == ["leases"] and r["apiGroups"] == ["coordination.k8s.io"]}
    assert grants == {("create", ""), ("get", SCHEDULER), ("update", SCHEDULER)}
    assert sum(len(r["resources"]) for r in role["rules"]) == 2, "nothing but its Lease"


def test_the_binding_webhook_lets_this_scheduler_bind():
    from gpuqueue.webhook.pod_admission import DEFAULT_SCHEDULER_USERNAMES

    assert f"system:serviceaccount:{NS}:{SCHEDULER}" in DEFAULT_SCHEDULER_USERNAMES
    assert access.service_account_user(access.SCHEDULER_SERVICE_ACCOUNT) == f"system:serviceaccount:{NS}:{SCHEDULER}"


# --- the configuration is in the form a real kube-scheduler accepted ----------------------------

# Fields the fixtures' configuration (a test rig: plain HTTP, a kubeconfig, no leader election,
# the default profile) does not set, each checked to exist in both config API versions' Go types
# (KubeSchedulerConfiguration.Profiles[].SchedulerName, LeaderElection.ResourceName/Namespace,
# Extender.TLSConfig and HTTPTimeout).
NOT_IN_FIXTURE = {
    "profiles", "profiles[].schedulerName", "leaderElection.resourceNamespace", "leaderElection.resourceName",
    "extenders[].tlsConfig", "extenders[].tlsConfig.caFile", "extenders[].tlsConfig.certFile",
    "extenders[].tlsConfig.keyFile", "extenders[].httpTimeout",
}  # fmt: skip
FIXTURE_ONLY = {"clientConnection", "clientConnection.kubeconfig"}  # in cluster: the ServiceAccount


def shape(value, path="") -> dict[str, type]:
    """Every field path of a YAML document with the type of its value (lists: their items)."""
    out = {}
    if isinstance(value, dict):
        for key, v in value.items():
            p = f"{path}.{key}" if path else key
            out[p] = type(v)
            out |= shape(v, p)
    elif isinstance(value, list):
        for item in value:
            out |= shape(item, f"{path}[]")
    return out


@pytest.mark.parametrize("key", sorted(CONFIG_KEYS))
@pytest.mark.parametrize("fixture", ["nodeCacheCapable-true", "nodeCacheCapable-false"])
def test_the_config_has_the_accepted_configurations_fields_and_types(key, fixture):
    ours = scheduler_configs(own())[key]
    accepted = yaml.safe_load(k8s_recording("extender", f"kube-scheduler-config.extender.{fixture}.yaml").read_text())
    assert ours["apiVersion"] == CONFIG_KEYS[key] and accepted["apiVersion"] == CONFIG_KEYS["config-v1beta3.yaml"]
    ours.pop("apiVersion"), accepted.pop("apiVersion")
    a, b = shape(ours), shape(accepted)
    assert set(a) - set(b) == NOT_IN_FIXTURE
    assert set(b) - set(a) == FIXTURE_ONLY
    for field in set(a) & set(b):
        assert a[field] is b[field], f"{key}: {field} is {a[field].__name__}, the accepted one {b[field].__name__}"
    verbs = ("filterVerb", "prioritizeVerb", "preemptVerb", "ignorable", "managedResources")
    assert {v: ours["extenders"][0][v] for v in verbs} == {v: accepted["extenders"][0][v] for v in verbs}
