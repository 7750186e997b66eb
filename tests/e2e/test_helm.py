"""Issue 36, points 1 and 6: the chart with the real helm (GPUQUEUE_E2E_HELM) on a real API server,
and what an uninstall leaves.

On a control plane of its own (no gpuqueue process runs: its webhooks are unreachable, as in an
outage, and nothing here needs them to answer):
- `helm install` (--create-namespace --take-ownership, docs/install.md) creates every object of
  the rendering for this server, with matchConditions on 1.28+ and without them before;
- `helm upgrade` with a changed Configuration field and failurePolicy shows both in the cluster;
- `helm uninstall` leaves no webhook configuration: a pod and a Job with a queue label can be
  created; the CRDs and the namespace stay (helm.sh/resource-policy: keep), and a reinstall
  takes them over with the quota objects made on them;
- each plain manifest this server takes passes `kubectl apply --server-side`, and
  `kubectl delete -f` of it leaves nothing that blocks a pod or a Job either."""

from tests.e2e.env import require

require()

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from manifests.tools import render  # noqa: E402
from tests.e2e.harness import load_realcluster  # noqa: E402

NS, TENANT = "gpuqueue-system", "e2e-helm-tenant"
QUEUED = {"kueue.x-k8s.io/queue-name": "lq"}


class Plane:
    def __init__(self) -> None:
        rc = load_realcluster()
        self.c = rc.RealCluster(k8s_bin=os.environ["GPUQUEUE_E2E_K8S_BIN"], etcd=os.environ["GPUQUEUE_E2E_ETCD"],
                                log=print)
        self.c.start(scheduler=False)
        self.api = self.c.api
        self.version = tuple(self.c.k8s_version()[:2])
        self.env = {**os.environ, "KUBECONFIG": str(self.c.kubeconfig),
                    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                    "HELM_CACHE_HOME": str(self.c.path("helm-cache")), "HELM_CONFIG_HOME": str(self.c.path("helm-config")),
                    "HELM_DATA_HOME": str(self.c.path("helm-data"))}

    def run(self, binary: str, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run([binary, *args], env=self.env, capture_output=True, text=True, timeout=180, input=input)
        if check and r.returncode != 0:
            raise AssertionError(f"{os.path.basename(binary)} {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def helm(self, *args, **kw):
        return self.run(os.environ["GPUQUEUE_E2E_HELM"], *args, **kw)

    def kubectl(self, *args, **kw):
        return self.run(os.environ["GPUQUEUE_E2E_KUBECTL"], *args, **kw)

    def exists(self, path: str) -> bool:
        return self.api.call("GET", path)[0] == 200

    def webhook_configurations(self) -> dict[str, dict]:
        out = {}
        for kind in ("mutating", "validating"):
            for o in self.api.get(f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations")["items"]:
                out[f"{kind}/{o['metadata']['name']}"] = o
        return out

    def create(self, path: str, obj: dict) -> tuple[int, object]:
        return self.api.call("POST", path, obj)


def pod(name: str, gpu: bool = False, labels: dict | None = None) -> dict:
    res = {"limits": {"nvidia.com/gpu": "1"}} if gpu else {"requests": {"cpu": "100m"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": res}]}}


def job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": QUEUED},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}


@pytest.fixture(scope="module")
def plane():
    p = Plane()
    try:
        yield p
    finally:
        p.c.stop()


def assert_nothing_blocks(plane: Plane, tag: str) -> None:
    """No gpuqueue webhook configuration is left, and a pod and a queued Job are created."""
    left = [k for k in plane.webhook_configurations() if k.endswith("/gpuqueue")]
    assert left == [], left
    s, body = plane.create(f"/api/v1/namespaces/{TENANT}/pods", pod(f"after-{tag}", labels=QUEUED))
    assert s == 201, body
    s, body = plane.create(f"/apis/batch/v1/namespaces/{TENANT}/jobs", job(f"after-{tag}"))
    assert s == 201, body


def test_helm_install_upgrade_uninstall(plane):
    chart = str(render.CHART)
    plane.kubectl("create", "namespace", TENANT)
    t0 = time.monotonic()
    plane.helm("install", "gpuqueue", chart, "--namespace", NS, "--create-namespace", "--take-ownership")
    print(f"e2e helm: install on v{plane.version[0]}.{plane.version[1]} in {time.monotonic() - t0:.1f}s")
    status = json.loads(plane.helm("status", "gpuqueue", "--namespace", NS, "-o", "json").stdout)
    assert (status["info"]["status"], status["version"]) == ("deployed", 1)

    expected = render.objects(plane.helm("get", "manifest", "gpuqueue", "--namespace", NS).stdout)
    for o in expected:
        assert o["kind"] != "Namespace" or o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    kinds = {o["kind"] for o in expected}
    assert {"CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration", "APIService", "CronJob"} <= kinds
    ns_labels = plane.api.get(f"/api/v1/namespaces/{NS}")["metadata"]["labels"]
    assert ns_labels["pod-security.kubernetes.io/enforce"] == "restricted", "the namespace helm made was taken over"
    for name in ("gpuqueue-webhook", "gpuqueue-extender", "gpuqueue-scheduler"):
        assert plane.exists(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}"), name
    hooks = {h["name"]: h for h in plane.webhook_configurations()["validating/gpuqueue"]["webhooks"]}
    with_conditions = plane.version >= (1, 28)
    assert ("matchConditions" in hooks["pod.gpuqueue.io"]) == with_conditions
    assert ("matchConditions" in hooks["binding.gpuqueue.io"]) == with_conditions

    # no webhook replica runs (no kubelet): a pod that wants no GPU is created only where the
    # server skips the call (1.28+); a GPU pod is refused everywhere
    s, body = plane.create(f"/api/v1/namespaces/{TENANT}/pods", pod("plain"))
    assert (s == 201) == with_conditions, (s, body)
    s, body = plane.create(f"/api/v1/namespaces/{TENANT}/pods", pod("gpu", gpu=True))
    assert s >= 500 and 'failed calling webhook "pod.gpuqueue.io"' in str(body), (s, body)

    t0 = time.monotonic()
    plane.helm("upgrade", "gpuqueue", chart, "--namespace", NS, "--reuse-values",
               "--set", "configuration.waitForPodsReady.enable=true",
               "--set", "configuration.waitForPodsReady.timeout=7m",
               "--set", "podWebhooks.failurePolicy=Ignore")
    print(f"e2e helm: upgrade in {time.monotonic() - t0:.1f}s")
    cm = plane.api.get(f"/api/v1/namespaces/{NS}/configmaps/gpuqueue-config")
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["waitForPodsReady"] == {"enable": True, "timeout": "7m"}
    hooks = {h["name"]: h for h in plane.webhook_configurations()["validating/gpuqueue"]["webhooks"]}
    assert hooks["pod.gpuqueue.io"]["failurePolicy"] == "Ignore"
    assert hooks["workload.gpuqueue.io"]["failurePolicy"] == "Fail"
    s, body = plane.create(f"/api/v1/namespaces/{TENANT}/pods", pod("plain-after-upgrade"))
    assert s == 201, body
    assert json.loads(plane.helm("status", "gpuqueue", "--namespace", NS, "-o", "json").stdout)["version"] == 2

    t0 = time.monotonic()
    plane.helm("uninstall", "gpuqueue", "--namespace", NS, "--wait")
    print(f"e2e helm: uninstall in {time.monotonic() - t0:.1f}s")
    assert_nothing_blocks(plane, "helm")
    assert not plane.exists(f"/apis/apps/v1/namespaces/{NS}/deployments/gpuqueue-extender")
    assert not plane.exists("/apis/rbac.authorization.k8s.io/v1/clusterroles/gpuqueue-webhook")
    assert plane.exists("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io"), "kept"
    assert plane.exists(f"/api/v1/namespaces/{NS}"), "kept"
    assert plane.helm("status", "gpuqueue", "--namespace", NS, check=False).returncode != 0

    # quota objects made on the kept CRDs outlive a reinstall (docs/install.md, "Uninstall")
    rf = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "kept"}}
    s, body = plane.create("/apis/kueue.x-k8s.io/v1beta2/resourceflavors", rf)
    assert s == 201, body
    plane.helm("install", "gpuqueue", chart, "--namespace", NS, "--create-namespace", "--take-ownership")
    assert plane.exists("/apis/kueue.x-k8s.io/v1beta2/resourceflavors/kept")
    plane.helm("uninstall", "gpuqueue", "--namespace", NS, "--wait")
    assert plane.exists("/apis/kueue.x-k8s.io/v1beta2/resourceflavors/kept")


def test_the_plain_manifests_apply_server_side_and_delete_cleanly(plane):
    """Each file this server takes; install.yaml only from 1.28 (its matchConditions)."""
    paths = [render.INSTALL_PRE_128] + ([render.INSTALL] if plane.version >= (1, 28) else [])
    if plane.version < (1, 28):
        r = plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", str(render.INSTALL), check=False)
        assert r.returncode != 0 and "matchConditions" in r.stderr, r.stderr
    for path in paths:
        t0 = time.monotonic()
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        print(f"e2e: kubectl apply --server-side -f {path.name} on v{plane.version[0]}.{plane.version[1]}: "
              f"{time.monotonic() - t0:.1f}s")
        assert "validating/gpuqueue" in plane.webhook_configurations()
        plane.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait=true", "--timeout=120s")
        assert_nothing_blocks(plane, path.name.replace(".", "-"))
