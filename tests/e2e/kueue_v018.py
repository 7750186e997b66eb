"""A cluster as Kueue v0.18 leaves it, written through the API the way Kueue writes it (facts from
Kueue's public code and documentation, release-0.18; nothing of Kueue's is copied):

- its CRDs, applied as its release manifest is (`kubectl apply --server-side`): the same kinds,
  v1beta1 served and v1beta2 the storage version, and a conversion webhook
  (`kueue-system/kueue-webhook-service`, `/convert`) on ClusterQueues, Cohorts, LocalQueues and
  Workloads; their schemas here keep every field (Kueue's list them all), so nothing Kueue
  wrote is lost before gpuqueue's CRDs replace them; plus AdmissionChecks, a kind gpuqueue
  does not ship;
- its Deployment, Services, APIServices and webhook configurations in `kueue-system`;
- quota objects with Kueue's `kueue.x-k8s.io/resource-in-use` finalizer (its webhooks add it to
  ClusterQueues and ResourceFlavors);
- Jobs as its webhook leaves them (suspended, queue label), their Workloads, admissions and
  requeues as tests/kueue_objects.py describes.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests import kueue_objects as KO
from tests.e2e import cases as C

KUEUE_NS = "kueue-system"
FINALIZER = KO.FINALIZER
CRDS = Path(__file__).resolve().parents[2] / "charts" / "gpuqueue" / "files" / "crds"
CONVERTED = {"clusterqueues", "cohorts", "localqueues", "workloads"}   # Kueue's webhook_in_*.yaml patches
WEBHOOK_CONFIGURATIONS = ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration")
APISERVICES = ("v1beta1.visibility.kueue.x-k8s.io", "v1beta2.visibility.kueue.x-k8s.io")
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def crds() -> list[dict]:
    out = []
    for path in sorted(CRDS.glob("*.yaml")):
        ours = yaml.safe_load(path.read_text())
        plural = ours["spec"]["names"]["plural"]
        v = ours["spec"]["versions"][0]
        versions = [{"name": name, "served": True, "storage": name == "v1beta2", "schema": {"openAPIV3Schema": OPEN},
                     **({"subresources": v["subresources"]} if "subresources" in v else {})}
                    for name in ("v1beta1", "v1beta2")]
        spec = {"group": "kueue.x-k8s.io", "names": ours["spec"]["names"], "scope": ours["spec"]["scope"],
                "versions": versions}
        if plural in CONVERTED:
            spec["conversion"] = {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
                "service": {"namespace": KUEUE_NS, "name": "kueue-webhook-service", "path": "/convert"}}}}
        out.append({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": ours["metadata"]["name"], "labels": {"app.kubernetes.io/name": "kueue"}},
                    "spec": spec})
    out.append({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "admissionchecks.kueue.x-k8s.io", "labels": {"app.kubernetes.io/name": "kueue"}},
                "spec": {"group": "kueue.x-k8s.io", "scope": "Cluster",
                         "names": {"kind": "AdmissionCheck", "listKind": "AdmissionCheckList",
                                   "plural": "admissionchecks", "singular": "admissioncheck"},
                         "versions": [{"name": n, "served": True, "storage": n == "v1beta2",
                                       "schema": {"openAPIV3Schema": OPEN}, "subresources": {"status": {}}}
                                      for n in ("v1beta1", "v1beta2")]}})
    return out


def _service(name: str, port: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": KUEUE_NS, "name": name},
            "spec": {"selector": {"control-plane": "controller-manager"},
                     "ports": [{"port": 443, "targetPort": port, "protocol": "TCP"}]}}


def controller() -> list[dict]:
    """What runs Kueue (not its webhook configurations: webhooks_and_apiservices)."""
    labels = {"control-plane": "controller-manager", "app.kubernetes.io/name": "kueue"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": KUEUE_NS, "name": "kueue-controller-manager",
                                                                     "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "containers": [{"name": "manager", "image": "registry.k8s.io/kueue/kueue:v0.18.3",
                             "args": ["--config=/controller_manager_config.yaml", "--zap-log-level=2"]}]}}}},
        _service("kueue-webhook-service", 9443), _service("kueue-visibility-server", 8082)]


def webhooks_and_apiservices() -> list[dict]:
    def hook(name: str, path: str, group: str, version: str, resources: list[str], ops: list[str]) -> dict:
        return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "clientConfig": {"service": {"namespace": KUEUE_NS, "name": "kueue-webhook-service", "path": path}},
                "rules": [{"apiGroups": [group], "apiVersions": [version], "resources": resources, "operations": ops}]}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": WEBHOOK_CONFIGURATIONS[0]}, "webhooks": [
             hook("mjob.kb.io", "/mutate-batch-v1-job", "batch", "v1", ["jobs"], ["CREATE"]),
             hook("mworkload.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2",
                  ["workloads"], ["CREATE"]),
             hook("mclusterqueue.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io", "v1beta2",
                  ["clusterqueues"], ["CREATE"])]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": WEBHOOK_CONFIGURATIONS[1]}, "webhooks": [
             hook("vjob.kb.io", "/validate-batch-v1-job", "batch", "v1", ["jobs"], ["CREATE", "UPDATE"]),
             hook("vworkload.kb.io", "/validate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2",
                  ["workloads", "workloads/status"], ["CREATE", "UPDATE"])]},
        *({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name},
           "spec": {"group": "visibility.kueue.x-k8s.io", "version": name.split(".")[0], "groupPriorityMinimum": 100,
                    "versionPriority": 100, "insecureSkipTLSVerify": True,
                    "service": {"namespace": KUEUE_NS, "name": "kueue-visibility-server"}}} for name in APISERVICES)]


def quota(name: str, pool: dict, gpus: int, ns: str, queue: str, **cq_spec) -> list[dict]:
    rf, cq = C.flavor(name, pool), C.cluster_queue(name, name, gpus, **cq_spec)
    for o in (rf, cq):
        o["metadata"]["finalizers"] = [FINALIZER]
    return [rf, cq, C.local_queue(ns, queue, name)]


class KueueWrites:
    """Writes what Kueue's job reconciler and scheduler write (tests/kueue_objects.py), through the
    cluster's API."""

    def __init__(self, cluster) -> None:
        self.cluster, self.api = cluster, cluster.api

    def job(self, ns: str, name: str, queue: str, gpus: int, completions: int | None = None) -> dict:
        """A Job as Kueue's webhook leaves it (suspended), and its Workload as Kueue makes it."""
        job = C.job(ns, name, gpus=gpus, queue=queue, completions=completions)
        job["spec"]["suspend"] = True
        job = self.api.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
        self.api.post(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads", KO.workload(job))
        return job

    def status(self, job: dict, status: dict) -> None:
        self.api.patch(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{job['metadata']['namespace']}/workloads/"
                       f"{KO.wl_name(job)}/status", {"status": status})

    def admit(self, job: dict, cq: str, flavor: str, node_labels: dict, gpus: int, at: str | None = None) -> None:
        """Quota reserved and admitted, then the Job started with what the admission adds."""
        self.status(job, KO.admitted_status(cq, flavor, gpus, at=at))
        self.api.patch(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs/{job['metadata']['name']}",
                       KO.started(job, cq, node_labels))

    def run_pods(self, ns: str, job: str, node: str) -> list[dict]:
        """What kube-scheduler and the kubelet did under Kueue: the Job's pods bound and running."""
        from tests.e2e.harness import Kubelet
        pods = self.cluster.wait_for(f"{job}'s pod created", lambda: self.cluster.job_pods(ns, job), timeout=30)
        for pod in pods:
            name = pod["metadata"]["name"]
            self.api.post(f"/api/v1/namespaces/{ns}/pods/{name}/binding", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            Kubelet(self.cluster)._set_status(self.api.get(f"/api/v1/namespaces/{ns}/pods/{name}"), "Running", True)
        return self.cluster.job_pods(ns, job)
