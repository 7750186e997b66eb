"""manifests/install.yaml (the chart's rendering, tests/test_chart.py): every object is valid Kubernetes, pods are locked down,
the webhook configurations cannot block Jobs gpuqueue does not manage, and the scheduler
configuration points at the extender the way a real kube-scheduler accepted."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from manifests.tools import render
from tests.shared_fixtures import k8s_recording
from tests.admission_support import matching_hooks

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "gpuqueue"
NS = "gpuqueue-system"
# kubernetes-validate ships schemas for 1.25 onwards; 1.24 (the fixtures' version) is not
# available offline, so check the oldest and newest it has.
K8S_VERSIONS = ["1.25", "1.37"]

OBJECTS = render.build()


def find(kind: str, name: str) -> dict:
    return next(o for o in OBJECTS if o["kind"] == kind and o["metadata"]["name"] == name)


def workloads() -> list[dict]:
    return [o for o in OBJECTS if render.pod_specs(o)]


def containers(pod: dict) -> list[dict]:
    return pod.get("initContainers", []) + pod["containers"]


def flag(container: dict, name: str) -> str | None:
    for arg in container["args"]:
        if arg == f"--{name}":
            return ""
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


# --- the build ------------------------------------------------------------------------------


def test_everything_lands_in_gpuqueue_system():
    for obj in OBJECTS:
        if obj["kind"] not in render.CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == NS, obj["metadata"]["name"]
    assert find("Namespace", NS)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def canonical(objects):
    return sorted((yaml.safe_dump(o, sort_keys=True) for o in objects))


# --- every object is valid Kubernetes -----------------------------------------------------------


def native_example_objects():
    for path in sorted((MANIFESTS / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and not doc["apiVersion"].startswith("kueue.x-k8s.io/"):
                yield doc


# Each plain manifest against the oldest and newest schemas of the servers it is for (webhook
# matchConditions are in the schema from 1.28).
SCHEMAS = [(render.INSTALL_PRE_128, "1.25"), (render.INSTALL_PRE_128, "1.27"), (render.INSTALL, "1.28"),
           (render.INSTALL, K8S_VERSIONS[-1])]


@pytest.mark.parametrize("path,version", SCHEMAS, ids=lambda x: getattr(x, "name", x))
def test_every_manifest_validates_against_the_kubernetes_openapi_schemas(path, version):
    checked = 0
    for obj in render.build(path) + list(native_example_objects()):
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked == len(render.build(path)) + len(list(native_example_objects()))


def test_the_validation_would_catch_a_mistake():
    bad = copy.deepcopy(find("Deployment", "gpuqueue-webhook"))
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.25", strict=True)


def test_the_kube_scheduler_configs_parse():
    data = find("ConfigMap", "gpuqueue-scheduler-config")["data"]
    assert yaml.safe_load(data["config.yaml"])["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert yaml.safe_load(data["config-v1beta3.yaml"])["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"


# --- pods ------------------------------------------------------------------------------------


@pytest.mark.parametrize("obj", workloads(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_pod_security(obj):
    for pod in render.pod_specs(obj):
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True
        assert isinstance(psc["runAsUser"], int) and psc["runAsUser"] > 0
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod.get("hostNetwork") is not True and pod.get("hostPID") is not True
        for c in containers(pod):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["runAsNonRoot"] is True, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert "privileged" not in sc or sc["privileged"] is False
            assert set(c["resources"]["requests"]) == {"cpu", "memory"}, c["name"]
            assert set(c["resources"]["limits"]) == {"cpu", "memory"}, c["name"]
            assert c["image"] in chart_images(), c["name"]
            # a read-only root needs somewhere for Python's temporary files
            assert any(m["mountPath"] == "/tmp" for m in c.get("volumeMounts", []))
        for volume in pod["volumes"]:
            assert set(volume) - {"name"} <= {"secret", "configMap", "emptyDir"}, "restricted Pod Security volume types only"


def chart_images() -> set[str]:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    return {f"{values['image']['repository']}:{values['image']['tag'] or app}",
            f"{values['scheduler']['image']['repository']}:{values['scheduler']['image']['tag']}"}


def is_gpuqueue(container: dict) -> bool:
    """gpuqueue's own image, not kube-scheduler's (gpuqueue-scheduler)."""
    return container["image"].partition(":")[0] == "gpuqueue"


def test_image_tag_is_the_package_version():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (version, version)
    assert {c["image"] for o in workloads() for p in render.pod_specs(o) for c in containers(p) if is_gpuqueue(c)} \
        == {f"gpuqueue:{version}"}


@pytest.mark.parametrize("name", ["gpuqueue-webhook", "gpuqueue-extender"])
def test_deployments_are_highly_available(name):
    dep = find("Deployment", name)
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = dep["spec"]["template"]
    anti = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == pod["metadata"]["labels"]
    pdb = find("PodDisruptionBudget", name)
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    main = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = main[probe]["httpGet"]
        assert (get["path"], get["scheme"], get["port"]) == (path, "HTTPS", "https")
    assert int(flag(main, "port")) == ports["https"]
    assert flag(main, "cert-dir") == "/etc/gpuqueue/certs"
    assert flag(main, "config") == "/etc/gpuqueue/config/config.yaml"
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounts["certs"] == "/etc/gpuqueue/certs" and volumes["certs"]["secret"]["secretName"] == "gpuqueue-certs"
    # optional: the Secret is created by the certs Job, maybe after the kubelet set up volumes
    assert volumes["certs"]["secret"]["optional"] is True
    assert mounts["config"] == "/etc/gpuqueue/config" and volumes["config"]["configMap"]["name"] == "gpuqueue-config"


def test_component_command_lines():
    webhook = find("Deployment", "gpuqueue-webhook")["spec"]["template"]["spec"]
    extender = find("Deployment", "gpuqueue-extender")["spec"]["template"]["spec"]
    assert webhook["containers"][0]["args"][0] == "webhook"
    assert flag(webhook["containers"][0], "host") == "0.0.0.0"
    assert extender["containers"][0]["args"][0] == "extender"
    assert flag(extender["containers"][0], "leader-elect") == ""
    assert flag(extender["containers"][0], "kubeconfig") is None, "in cluster: the ServiceAccount, not a kubeconfig"
    metrics = {p["name"]: p["containerPort"] for p in extender["containers"][0]["ports"]}["metrics"]
    assert int(flag(extender["containers"][0], "metrics-port")) == metrics
    assert "initContainers" not in webhook, "the webhook's pod runs nothing with the certs component's rights"
    install = find("Job", "gpuqueue-certs-install")["spec"]["template"]["spec"]["containers"][0]
    assert install["args"][:2] == ["certs", "ensure"]
    cron = find("CronJob", "gpuqueue-certs")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert cron["args"] == install["args"], "renewal must produce the same certificate as the first install"
    assert flag(install, "require-webhook-config") == "", "without its caBundle no webhook can be called: retry"


GO_IDLE_CONN_TIMEOUT = 90.0  # how long kube-apiserver's and kube-scheduler's Go clients keep a connection idle


def test_the_servers_keep_an_idle_connection_longer_than_their_go_clients():
    """A server that closes an idle kept-alive connection first can close it just as the client
    sends a call on it, and that call fails (`write: broken pipe`: a POST whose body went out is
    not retried; seen once in 50 real phases). Longer than the client: the client retires it."""
    from gpuqueue import http11
    from gpuqueue.listener import ConnectionLimits

    webhook = find("Deployment", "gpuqueue-webhook")["spec"]["template"]["spec"]["containers"][0]
    shipped = flag(webhook, "idle-timeout-seconds")
    assert shipped is None or float(shipped) > GO_IDLE_CONN_TIMEOUT
    assert ConnectionLimits().idle_timeout > GO_IDLE_CONN_TIMEOUT
    assert http11.IDLE_SECONDS > GO_IDLE_CONN_TIMEOUT


def all_containers():
    for obj in OBJECTS:
        for pod in render.pod_specs(obj):
            for c in filter(is_gpuqueue, containers(pod)):
                yield pytest.param(c, pod["serviceAccountName"], id=f"{obj['metadata']['name']}/{c['name']}")


@pytest.mark.parametrize("container,serviceaccount", list(all_containers()))
def test_command_lines_parse_with_the_real_cli(container, serviceaccount):
    from gpuqueue.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction)).choices
    if container["args"][0] not in commands:
        pytest.skip(f"`gpuqueue {container['args'][0]}` is not on this branch yet; its flags are checked once it lands")
    args = parser.parse_args(container["args"])  # SystemExit(2) on an unknown flag
    if container["args"][0] == "webhook":
        assert args.controller_username == [controller_user()]


def controller_user() -> str:
    """The controller runs in the extender's Deployment, as its ServiceAccount."""
    return f"system:serviceaccount:{NS}:{find('Deployment', 'gpuqueue-extender')['spec']['template']['spec']['serviceAccountName']}"


def test_the_webhook_knows_the_controller_by_default():
    """--controller-username's default is the identity the manifests give the controller (it used to
    name a ServiceAccount gpuqueue-controller that nothing creates), and the flag takes several."""
    from gpuqueue.cli import build_parser
    from gpuqueue.webhook.command import load_settings

    parser = build_parser()
    assert load_settings(parser.parse_args(["webhook"])).controller_usernames == (controller_user(),)
    two = parser.parse_args(["webhook", "--controller-username=a", "--controller-username=b"])
    assert load_settings(two).controller_usernames == ("a", "b")


def test_certificate_covers_both_services_and_the_scheduler_url():
    args = find("Job", "gpuqueue-certs-install")["spec"]["template"]["spec"]["containers"][0]
    assert flag(args, "secret") == "gpuqueue-certs"
    assert flag(args, "namespace") == NS
    assert flag(args, "webhook-config") == "gpuqueue"
    service = flag(args, "service")
    names = {service, f"{service}.{NS}", f"{service}.{NS}.svc", f"{service}.{NS}.svc.cluster.local"}
    names |= {a.split("=", 1)[1] for a in args["args"] if a.startswith("--dns=")}
    assert f"gpuqueue-webhook.{NS}.svc" in names, "kube-apiserver calls <service>.<namespace>.svc"
    for config in ("config.yaml", "config-v1beta3.yaml"):
        url = yaml.safe_load(find("ConfigMap", "gpuqueue-scheduler-config")["data"][config])["extenders"][0]["urlPrefix"]
        host = url.split("://", 1)[1].split(":")[0]
        assert host in names


@pytest.mark.parametrize("name,port", [("gpuqueue-webhook", 443), ("gpuqueue-extender", 443), ("gpuqueue-extender-metrics", 8080)])
def test_services_select_their_pods_and_named_ports(name, port):
    svc = find("Service", name)
    dep = find("Deployment", name.removesuffix("-metrics"))
    assert svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["port"] == port
    assert svc_port["targetPort"] in {p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}


# --- webhook configurations ------------------------------------------------------------------


def webhooks():
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in find(kind, "gpuqueue")["webhooks"]:
            yield kind, hook


def matching_webhooks(kind_filter: str, operation: str, namespace_labels: dict, object_labels: dict, group="batch", resource="jobs"):
    """The names of the webhooks kube-apiserver would call (tests/admission_support.py routes as it does)."""
    version = {"batch": "v1", "": "v1", "kueue.x-k8s.io": "v1beta2"}[group]
    return [h["name"] for h in matching_hooks(kind_filter, operation, group, version, resource, namespace_labels, object_labels)]


def ns_labels(name, **extra):
    return {"kubernetes.io/metadata.name": name, **extra}


QUEUED = {"kueue.x-k8s.io/queue-name": "gpu-queue"}
MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"


def test_webhook_settings():
    paths = set()
    for _kind, hook in webhooks():
        # only the warnings-only one fails open: it refuses nothing, and it sees every GPU Job
        assert hook["failurePolicy"] == ("Ignore" if hook["name"] == "unqueued.gpuqueue.io" else "Fail")
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert 1 <= hook["timeoutSeconds"] <= 10
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["port"]) == ("gpuqueue-webhook", NS, 443)
        assert "caBundle" not in hook["clientConfig"], "certs ensure injects it; applying the manifests must not wipe it"
        paths.add(svc["path"])
        (names,) = [e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"]
        assert names["operator"] == "NotIn" and names["values"][:2] == ["kube-system", NS]
    kinds = {"/mutate-batch-v1-job", "/validate-batch-v1-job", "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
             "/validate-jobset-x-k8s-io-v1alpha2-jobset", "/mutate-kubeflow-org-v1-pytorchjob",
             "/validate-kubeflow-org-v1-pytorchjob", "/mutate-kubeflow-org-v2beta1-mpijob",
             "/validate-kubeflow-org-v2beta1-mpijob", "/mutate-trainer-kubeflow-org-v1alpha1-trainjob",
             "/validate-trainer-kubeflow-org-v1alpha1-trainjob", "/mutate-ray-io-v1-rayjob", "/validate-ray-io-v1-rayjob",
             "/mutate-ray-io-v1-raycluster", "/validate-ray-io-v1-raycluster",
             "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", "/mutate-apps-v1-deployment",
             "/mutate-apps-v1-statefulset", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
             "/validate-apps-v1-deployment", "/validate-apps-v1-statefulset"}  # Kueue's paths for each kind
    assert paths == kinds | {"/validate-kueue", "/mutate--v1-pod", "/validate--v1-pod", "/validate--v1-binding",
                             "/validate-kueue-x-k8s-io-v1beta2-workload", "/warn-unqueued"}
    for path in paths:
        assert path.encode() in webhook_routes(), f"{path}: the webhook does not serve it"


def webhook_routes():
    from gpuqueue.webhook.app import handlers_without_cluster

    return handlers_without_cluster().routes()


def test_labelled_jobs_are_mutated_and_validated_in_any_user_namespace():
    assert matching_webhooks(MUTATING, "CREATE", ns_labels("default"), QUEUED) == ["job-with-queue.gpuqueue.io"]
    assert matching_webhooks(VALIDATING, "UPDATE", ns_labels("default"), QUEUED) == ["job.gpuqueue.io"]


def test_unlabelled_jobs_reach_gpuqueue_only_in_opted_in_namespaces():
    # An outage of gpuqueue must not block Jobs it would not manage: they are never sent to it.
    assert matching_webhooks(MUTATING, "CREATE", ns_labels("default"), {}) == []
    assert matching_webhooks(VALIDATING, "UPDATE", ns_labels("default"), {"app": "x"}) == []
    opted_in = ns_labels("team-a", **{"gpuqueue.io/managed": "true"})
    assert matching_webhooks(MUTATING, "CREATE", opted_in, {}) == ["job-default-queue.gpuqueue.io"]


@pytest.mark.parametrize("namespace", ["kube-system", NS])
def test_system_namespaces_are_never_matched(namespace):
    for labels in ({}, QUEUED):
        for operation in ("CREATE", "UPDATE"):
            assert matching_webhooks(MUTATING, operation, ns_labels(namespace, **{"gpuqueue.io/managed": "true"}), labels) == []
            assert matching_webhooks(VALIDATING, operation, ns_labels(namespace), labels) == []


def test_quota_objects_are_validated():
    for resource in ("clusterqueues", "resourceflavors", "localqueues", "cohorts", "workloadpriorityclasses"):
        for operation in ("CREATE", "UPDATE"):
            hits = matching_webhooks(VALIDATING, operation, {}, {}, group="kueue.x-k8s.io", resource=resource)
            assert hits == ["kueue.gpuqueue.io"], resource


def enforcement_section() -> dict:
    return yaml.safe_load(find("ConfigMap", "gpuqueue-config")["data"]["config.yaml"])["enforcement"]


def test_the_configuration_spells_out_the_enforcement_defaults():
    from gpuqueue.jobframework.enforcement import EnforcementConfig

    section = enforcement_section()
    assert set(section) == {"mode", "exemptNamespaces", "schedulerNames"}  # resources: the covered ones
    # schedulerNames depends on the scheduler mode: tests/test_manifests_scheduler.py
    section = {k: v for k, v in section.items() if k != "schedulerNames"}
    assert EnforcementConfig.from_kueue_configuration({"enforcement": section}) == EnforcementConfig()
    assert section["exemptNamespaces"][:2] == ["kube-system", NS]


@pytest.mark.parametrize("kind,resource", [(MUTATING, "pods"), (VALIDATING, "pods"), (VALIDATING, "pods/binding"),
                                           (VALIDATING, "bindings")])
def test_pod_webhooks_leave_out_exactly_the_exempt_namespaces(kind, resource):
    """What kube-apiserver never sends (namespaceSelector) and what the webhook lets through (the
    Configuration's enforcement.exemptNamespaces) are the same namespaces."""
    from gpuqueue.jobframework.enforcement import DEFAULT_EXEMPT_NAMESPACES

    exempt = enforcement_section()["exemptNamespaces"]
    assert set(exempt) == set(DEFAULT_EXEMPT_NAMESPACES)
    for namespace in exempt:
        assert matching_webhooks(kind, "CREATE", ns_labels(namespace), {}, group="", resource=resource) == []
    hits = matching_webhooks(kind, "CREATE", ns_labels("team-a"), {}, group="", resource=resource)
    assert hits == ["binding.gpuqueue.io" if "binding" in resource else "pod.gpuqueue.io"]
    (hook,) = [h for k, h in webhooks() if k == kind and h["name"] == hits[0]]
    assert hook["failurePolicy"] == "Fail"
    (names,) = hook["namespaceSelector"]["matchExpressions"]
    assert (names["operator"], sorted(names["values"])) == ("NotIn", sorted(exempt))


def test_every_pod_of_a_tenant_namespace_is_sent_whatever_its_labels():
    """A pod cannot opt out with its labels: the pod webhooks have no objectSelector."""
    for kind in (MUTATING, VALIDATING):
        assert matching_webhooks(kind, "CREATE", ns_labels("team-a"), {"anything": "x"}, group="", resource="pods")
        assert matching_webhooks(kind, "UPDATE", ns_labels("team-a"), {}, group="", resource="pods") == []


def test_workloads_and_their_status_are_validated():
    for resource in ("workloads", "workloads/status"):
        for operation in ("CREATE", "UPDATE"):
            hits = matching_webhooks(VALIDATING, operation, ns_labels("team-a"), {}, group="kueue.x-k8s.io",
                                     resource=resource)
            assert hits == ["workload.gpuqueue.io"], (resource, operation)
        assert matching_webhooks(VALIDATING, "DELETE", ns_labels("team-a"), {}, group="kueue.x-k8s.io",
                                 resource=resource) == []


def test_the_flame_namespaces_opt_in():
    docs = list(yaml.safe_load_all((MANIFESTS / "examples" / "flame" / "namespaces.yaml").read_text()))
    assert {d["metadata"]["name"] for d in docs} == {"team-a", "team-b", "team-c"}
    for d in docs:
        labels = ns_labels(d["metadata"]["name"], **d["metadata"]["labels"])
        assert matching_webhooks(MUTATING, "CREATE", labels, {}) == ["job-default-queue.gpuqueue.io"]


# --- scheduler configuration ------------------------------------------------------------------

EXTENDER_FIELDS = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb", "weight", "enableHTTPS",
    "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
}  # fmt: skip
TLS_FIELDS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}


@pytest.mark.parametrize("key", ["config.yaml", "config-v1beta3.yaml"])
def test_scheduler_extender_entry(key):
    config = yaml.safe_load(find("ConfigMap", "gpuqueue-scheduler-config")["data"][key])
    accepted = yaml.safe_load(k8s_recording("extender", "kube-scheduler-config.extender.nodeCacheCapable-true.yaml").read_text())
    assert config["kind"] == "KubeSchedulerConfiguration"
    (ours,) = config["extenders"]
    (theirs,) = accepted["extenders"]
    # kube-scheduler decodes its configuration strictly: an unknown field is a startup error.
    assert set(ours) <= EXTENDER_FIELDS and set(ours["tlsConfig"]) <= TLS_FIELDS
    for same in ("filterVerb", "prioritizeVerb", "preemptVerb", "nodeCacheCapable", "ignorable", "managedResources"):
        assert ours[same] == theirs[same], same
    assert ours["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert ours["enableHTTPS"] is True and ours["urlPrefix"] == f"https://gpuqueue-extender.{NS}.svc:443"
    assert ours["weight"] >= 1 and ours["httpTimeout"].endswith("s")
    assert ours["tlsConfig"]["caFile"] == "/etc/gpuqueue/certs/ca.crt"
    assert [p["schedulerName"] for p in config["profiles"]] == ["gpuqueue-scheduler"]
    assert config["leaderElection"]["resourceName"] == "gpuqueue-scheduler"


def test_the_two_scheduler_config_versions_agree():
    data = find("ConfigMap", "gpuqueue-scheduler-config")["data"]
    v1, v1beta3 = yaml.safe_load(data["config.yaml"]), yaml.safe_load(data["config-v1beta3.yaml"])
    v1.pop("apiVersion"), v1beta3.pop("apiVersion")
    assert v1 == v1beta3


def test_long_running_servers_never_mount_the_ca_key_or_the_scheduler_client_key():
    """A webhook or extender pod that is broken into must not yield the key that signs every
    certificate, nor kube-scheduler's client key (with it anyone could call the extender's verbs)."""
    for name in ("gpuqueue-webhook", "gpuqueue-extender"):
        pod = find("Deployment", name)["spec"]["template"]
        for volume in pod["spec"].get("volumes") or ():
            secret = volume.get("secret")
            if secret is None or secret.get("secretName") != "gpuqueue-certs":
                continue
            keys = {item["key"] for item in secret.get("items") or ()}
            assert keys, f"{name} mounts the whole Secret gpuqueue-certs"
            assert not keys & {"ca.key", "scheduler-client.key"}, f"{name} mounts {sorted(keys)}"
