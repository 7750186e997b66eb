"""Case 2, Kueue's LocalQueue defaulting without any namespace label: in a namespace with a
LocalQueue named `default`, a Job created with kubectl without the queue label is queued there
(suspended by the webhook, labelled, admitted, its pod bound by kube-scheduler on the flavor's
node); once that LocalQueue is deleted, the next such Job is left alone, kubectl prints the
webhook's warning, and its pod gets no node (enforcement Strict)."""

from tests.e2e.env import require

require()

import time  # noqa: E402

import yaml  # noqa: E402

from tests.e2e import cases as C  # noqa: E402
from tests.e2e.harness import condition, is_true  # noqa: E402

NS = "e2e-dlq"
LABEL = "gpuqueue.io/default-local-queue"
POOL = {C.POOL: "dlq"}


def ns_labels(e2e):
    return e2e.get(f"/api/v1/namespaces/{NS}")["metadata"].get("labels") or {}


def test_a_job_without_queue_label_goes_to_the_namespace_default_local_queue(e2e):
    e2e.namespace(NS)
    e2e.node("e2e-dlq-n1", 4, POOL)
    try:
        e2e.apply([C.flavor("e2e-dlq", POOL), C.cluster_queue("e2e-dlq", "e2e-dlq", 4),
                   C.local_queue(NS, "default", "e2e-dlq")])
        e2e.wait_for(f"namespace {NS} labelled {LABEL}=true", lambda: ns_labels(e2e).get(LABEL) == "true", timeout=15)

        r = e2e.kubectl("create", "-f", "-", input=yaml.safe_dump(C.job(NS, "train")))
        assert "Warning" not in r.stderr, r.stderr
        job = e2e.job(NS, "train")
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
        wl = e2e.wait_for("train's Workload admitted", lambda: is_true(e2e.workload_of(NS, "train"), "Admitted")
                          and e2e.workload_of(NS, "train"), timeout=20)
        assert wl["spec"]["queueName"] == "default"
        assert wl["status"]["admission"]["clusterQueue"] == "e2e-dlq"
        pods = e2e.wait_for("train's pod bound", lambda: [p for p in e2e.job_pods(NS, "train")
                                                           if p["spec"].get("nodeName")], timeout=20)
        assert pods[0]["spec"]["nodeName"] == "e2e-dlq-n1"
        out = e2e.kubectl("get", "workloads", "-n", NS).stdout.splitlines()
        assert out[0].split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"], out
        assert out[1].split()[1:4] == ["default", "e2e-dlq", "True"], out

        # the LocalQueue gone: the label goes, and a new unlabelled Job is let through, with a warning
        e2e.kubectl("delete", "localqueue", "default", "-n", NS)
        e2e.wait_for(f"{LABEL} removed from {NS}", lambda: LABEL not in ns_labels(e2e), timeout=15)
        r = e2e.kubectl("create", "-f", "-", input=yaml.safe_dump(C.job(NS, "stray")))
        assert f"Warning: Job {NS}/stray requests nvidia.com/gpu but it names no LocalQueue" in r.stderr, r.stderr
        assert e2e.job(NS, "stray")["spec"].get("suspend") is not True
        pod = e2e.wait_for("stray's pod created", lambda: e2e.job_pods(NS, "stray"), timeout=20)[0]
        e2e.wait_for("stray's pod refused a node", lambda: condition(
            e2e.get(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"), "PodScheduled").get("status") == "False",
            timeout=20)
        time.sleep(2)
        assert not any(p["spec"].get("nodeName") for p in e2e.job_pods(NS, "stray"))
        assert e2e.workload_of(NS, "stray") is None
    finally:
        e2e.delete_namespaces([NS])
        e2e.delete_nodes(["e2e-dlq-n1"])
        e2e.delete_cluster_objects("clusterqueues", ["e2e-dlq"])
        e2e.delete_cluster_objects("resourceflavors", ["e2e-dlq"])
