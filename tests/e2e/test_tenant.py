"""Case 6, a tenant's attacks: ServiceAccount `alice` of namespace e2e-tenant, with the built-in
`edit` role there and, to show that gpuqueue (not RBAC) stops her, rights to create Workloads and
pod bindings in her namespace, using kubectl with her own token. The ClusterQueue gives her 2 GPUs.
Each attempt is refused by gpuqueue's webhook (kubectl exits non-zero with `admission webhook ...
denied the request`) or has no effect; afterwards every admitted pod is bound and no GPU pod of an
unadmitted workload has a node:

- unsuspending her own pending Job;
- moving her admitted Job to another LocalQueue (its queue label);
- creating a Workload of her own;
- raising her admitted Job's parallelism (1.24 and 1.36 let the edit through; the controller
  evicts the Job and requeues it with its new count, so the extra pod never gets a node and the
  pending Job behind it may take the quota: the quota holds over what runs);
- creating a GPU pod that names its node, one that names another scheduler, and binding a GPU pod
  herself through pods/binding."""

from tests.e2e.env import require

require()

import json  # noqa: E402
import time  # noqa: E402

import yaml  # noqa: E402

from tests.e2e import cases as C  # noqa: E402
from tests.e2e.harness import condition, is_true  # noqa: E402

NS = "e2e-tenant"
POOL = {C.POOL: "tenant"}
NODE = "e2e-tenant-n1"
QUOTA = 2
DENIED = "denied the request"


def gpu_pod(name: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": NS, "name": name},
            "spec": {"restartPolicy": "Never", **spec, "containers": [
                {"name": "x", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", "resources": {"limits": {C.GPU: 1}}}]}}


def test_a_tenant_cannot_get_gpus_around_the_queue(e2e):
    e2e.namespace(NS)
    e2e.node(NODE, 4, POOL)
    try:
        _attacks(e2e)
    finally:
        e2e.delete_namespaces([NS])
        e2e.delete_nodes([NODE])
        e2e.delete_cluster_objects("clusterqueues", ["e2e-tenant"])
        e2e.delete_cluster_objects("resourceflavors", ["e2e-tenant"])


def _alice(e2e):
    e2e.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"namespace": NS, "name": "alice"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"namespace": NS, "name": "alice-edit"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
         "subjects": [{"kind": "ServiceAccount", "namespace": NS, "name": "alice"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"namespace": NS, "name": "more"},
         "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"]},
                   {"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"namespace": NS, "name": "more"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "more"},
         "subjects": [{"kind": "ServiceAccount", "namespace": NS, "name": "alice"}]}])
    return e2e.token_kubeconfig(NS, "alice")


def _attacks(e2e):
    e2e.apply([C.flavor("e2e-tenant", POOL), C.cluster_queue("e2e-tenant", "e2e-tenant", QUOTA),
               C.local_queue(NS, "gpus", "e2e-tenant"), C.local_queue(NS, "other", "e2e-tenant")])
    kc = _alice(e2e)

    def alice(*args, input=None):
        return e2e.kubectl(*args, kubeconfig=kc, input=input, check=False)

    def refused(what, r):
        assert r.returncode != 0 and DENIED in r.stderr, f"{what}: exit {r.returncode}: {r.stdout}{r.stderr}"

    assert alice("auth", "can-i", "patch", "jobs").stdout.strip() == "yes"
    r = alice("create", "-f", "-", input=yaml.safe_dump_all([C.job(NS, "mine", queue="gpus", completions=4),
                                                             C.job(NS, "waiting", gpus=2, queue="gpus")]))
    assert r.returncode == 0, r.stderr
    e2e.wait_for("mine admitted, its pod bound", lambda: is_true(e2e.workload_of(NS, "mine"), "Admitted")
                 and any(p["spec"].get("nodeName") for p in e2e.job_pods(NS, "mine")), timeout=30)
    e2e.wait_for("waiting pending for quota", lambda: condition(e2e.workload_of(NS, "waiting"), "QuotaReserved")
                 .get("message", "").startswith("couldn't assign flavors"), timeout=20,
                 show=lambda: (e2e.workload_of(NS, "waiting") or {}).get("status"))

    refused("unsuspend her pending Job", alice("patch", "job", "waiting", "--type=merge", "-p",
                                               '{"spec":{"suspend":false}}'))
    assert e2e.job(NS, "waiting")["spec"]["suspend"] is True
    refused("move her admitted Job to another queue", alice("label", "job", "mine", "--overwrite",
                                                            "kueue.x-k8s.io/queue-name=other"))
    wl = e2e.workload_of(NS, "mine")
    forged = {"apiVersion": C.KUEUE, "kind": "Workload", "metadata": {"namespace": NS, "name": "forged"},
              "spec": {"queueName": "gpus", "podSets": [{"name": "main", "count": 1,
                                                         "template": wl["spec"]["podSets"][0]["template"]}]}}
    refused("create a Workload", alice("create", "-f", "-", input=yaml.safe_dump(forged)))
    refused("a GPU pod naming its node", alice("create", "-f", "-", input=yaml.safe_dump(gpu_pod("pinned", nodeName=NODE))))

    r = alice("create", "-f", "-", input=yaml.safe_dump(gpu_pod("bare", schedulerName="my-scheduler")))
    if r.returncode == 0:   # let in, but given a scheduler that asks the extender: it gets no node
        bare = e2e.get(f"/api/v1/namespaces/{NS}/pods/bare")
        assert bare["spec"]["schedulerName"] == "default-scheduler", bare["spec"]
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"namespace": NS, "name": "bare"},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}}
        refused("bind a GPU pod herself", alice("create", "--raw", f"/api/v1/namespaces/{NS}/pods/bare/binding",
                                                "-f", "-", input=json.dumps(binding)))
    else:
        assert DENIED in r.stderr, r.stderr

    r = alice("patch", "job", "mine", "--type=merge", "-p", '{"spec":{"parallelism":2}}')
    print(f"tenant: raising parallelism after admission: exit {r.returncode} {r.stderr.strip()[:300]}")
    if r.returncode != 0:
        assert DENIED in r.stderr, r.stderr

    # whatever she tried: within the quota, every admitted pod bound, nothing else has a node
    time.sleep(5)
    e2e.wait_for("every admitted pod bound, no other GPU pod bound, usage within quota",
                 lambda: _holds(e2e), timeout=30, show=lambda: _state(e2e))
    print(f"tenant: pods at the end: {_state(e2e)}")


def _state(e2e):
    out = {}
    for p in e2e.pods(NS):
        owner = (p["metadata"].get("labels") or {}).get("job-name", "-")
        wl = e2e.workload_of(NS, owner) if owner != "-" else None
        out[p["metadata"]["name"]] = (owner, p["spec"].get("nodeName"), bool(p["metadata"].get("deletionTimestamp")),
                                      is_true(wl, "Admitted"), (wl or {}).get("spec", {}).get("podSets", [{}])[0].get("count"))
    return out


def _holds(e2e):
    state = _state(e2e)
    bound = [v for v in state.values() if v[1]]
    if len(bound) > QUOTA or any(not admitted for _, _, _, admitted, _ in bound):
        return False
    for name in ("mine", "waiting"):
        wl = e2e.workload_of(NS, name)
        if is_true(wl, "Admitted"):
            live = [p for p in e2e.job_pods(NS, name)]
            count = wl["status"]["admission"]["podSetAssignments"][0]["count"]
            if len([p for p in live if p["spec"].get("nodeName")]) != count:
                return False
    return True
