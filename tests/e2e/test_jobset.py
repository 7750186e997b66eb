"""Case 7, one operator kind with its published CRD: JobSet (shared/fixtures/crds/jobset, applied at
the session's start, before the extender's informers). A JobSet created with kubectl and a queue
label is suspended by the webhook, gets a Workload owned by it with one pod set per replicated
job, is admitted and unsuspended with its flavor's nodeSelector in every replicated job's
template; a second one past the quota waits with Kueue's message. No JobSet controller runs here:
the test does its part (a child Job per replica, from the JobSet's template as it is after
admission, owned by the JobSet, labelled as JobSet labels them), the real Job controller makes the
pods and the real kube-scheduler binds them, through the extender, on the flavor's node."""

from tests.e2e.env import require

require()

import copy  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from tests.e2e import cases as C  # noqa: E402
from tests.e2e.harness import condition, is_true, jobset_crd  # noqa: E402

NS = "e2e-jobset"
POOL = {C.POOL: "jobset"}
NODE = "e2e-jobset-n1"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets"
BOUND = 20.0


def jobset(name: str) -> dict:
    worker = {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "worker", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", "command": ["sleep", "600"],
        "resources": {"limits": {C.GPU: 2}}}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"namespace": NS, "name": name, "labels": {"kueue.x-k8s.io/queue-name": "gpus"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": worker}}}]}}


def child_jobs(e2e, js: dict) -> list[str]:
    """What JobSet's controller does once the JobSet runs: Job <jobset>-<replicatedJob>-<index>."""
    names = []
    for rj in js["spec"]["replicatedJobs"]:
        for i in range(rj.get("replicas", 1)):
            name = f"{js['metadata']['name']}-{rj['name']}-{i}"
            labels = {"jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"],
                      "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                      "jobset.sigs.k8s.io/replicatedjob-replicas": str(rj.get("replicas", 1)),
                      "jobset.sigs.k8s.io/job-index": str(i)}
            spec = copy.deepcopy(rj["template"]["spec"])
            tmeta = spec["template"].setdefault("metadata", {})
            tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
            e2e.api.post(f"/apis/batch/v1/namespaces/{NS}/jobs", {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {
                    "name": name, "namespace": NS, "labels": labels,
                    "ownerReferences": [{"apiVersion": js["apiVersion"], "kind": "JobSet", "name": js["metadata"]["name"],
                                         "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
                "spec": spec})
            names.append(name)
    return names


def test_a_jobset_is_queued_admitted_and_its_pods_bound(e2e):
    if jobset_crd() is None:
        pytest.skip("needs shared/fixtures/crds/jobset (JobSet's published CRD)")
    e2e.namespace(NS)
    e2e.node(NODE, 4, POOL)
    try:
        _timeline(e2e)
    finally:
        e2e.delete_namespaces([NS])
        e2e.delete_nodes([NODE])
        e2e.delete_cluster_objects("clusterqueues", ["e2e-jobset"])
        e2e.delete_cluster_objects("resourceflavors", ["e2e-jobset"])


def _timeline(e2e):
    e2e.apply([C.flavor("e2e-jobset", POOL), C.cluster_queue("e2e-jobset", "e2e-jobset", 4),
               C.local_queue(NS, "gpus", "e2e-jobset")])
    e2e.kubectl("create", "-f", "-", input=yaml.safe_dump(jobset("train")))
    js = e2e.get(f"{JOBSETS}/train")
    assert js["spec"]["suspend"] is True   # the webhook's doing: the JobSet waits for its admission

    wl = e2e.wait_for("train's Workload admitted", lambda: is_true(e2e.workload_of(NS, "train", "JobSet"), "Admitted")
                      and e2e.workload_of(NS, "train", "JobSet"), timeout=30)
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("workers", 2)]
    assert wl["status"]["admission"]["clusterQueue"] == "e2e-jobset"
    js = e2e.wait_for("train unsuspended", lambda: e2e.get(f"{JOBSETS}/train")["spec"].get("suspend") is False
                      and e2e.get(f"{JOBSETS}/train"), timeout=20)
    selector = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].get("nodeSelector") or {}
    assert POOL.items() <= selector.items(), selector

    e2e.kubectl("create", "-f", "-", input=yaml.safe_dump(jobset("second")))
    c = e2e.wait_for("second pending for quota", lambda: condition(e2e.workload_of(NS, "second", "JobSet"),
                     "QuotaReserved").get("message", "").startswith("couldn't assign") and condition(
                     e2e.workload_of(NS, "second", "JobSet"), "QuotaReserved"), timeout=20,
                     show=lambda: [(w["metadata"]["name"], w.get("status")) for w in e2e.workloads(NS)])
    assert c["message"] == ("couldn't assign flavors to pod set workers: insufficient unused quota for "
                            "nvidia.com/gpu in flavor e2e-jobset, 4 more needed"), c["message"]
    assert e2e.get(f"{JOBSETS}/second")["spec"]["suspend"] is True

    jobs = child_jobs(e2e, js)
    pods = e2e.wait_for("the JobSet's two pods bound to its flavor's node", lambda: [
        p for p in e2e.pods(NS, "jobset.sigs.k8s.io/jobset-name=train") if p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")] if len([
            p for p in e2e.pods(NS, "jobset.sigs.k8s.io/jobset-name=train") if p["spec"].get("nodeName")]) == 2
        else None, timeout=BOUND, show=lambda: [(p["metadata"]["name"], condition(p, "PodScheduled"))
                                                 for p in e2e.pods(NS)])
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    assert sorted(p["metadata"]["labels"]["job-name"] for p in pods) == sorted(jobs)
    assert not any(p["spec"].get("nodeName") for p in e2e.pods(NS, "jobset.sigs.k8s.io/jobset-name=second"))
