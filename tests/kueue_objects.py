"""What Kueue v0.18 writes, as plain objects (facts from Kueue's public code, release-0.18; nothing of
Kueue's is copied), for the tests that start from a cluster Kueue ran (the stand-in's
tests/test_controller_from_kueue.py and the end-to-end tests/e2e/test_migrate_from_kueue.py):

- a Workload as its job reconciler makes it for a batch/v1 Job: named
  `job-<name>-<sha1(kind, group, name, uid)[:5]>`, owned by the Job (controller,
  blockOwnerDeletion), labelled `kueue.x-k8s.io/job-uid`, with the finalizer
  `kueue.x-k8s.io/resource-in-use`, its pod set the Job's template as the API returned it;
- its status pending, admitted (`status.admission`, QuotaReserved/Admitted), or preempted and
  requeued (Evicted/Preempted/Requeued True, QuotaReserved False, `schedulingStats.evictions`);
- what admission does to the Job: its pod template given the flavor's nodeSelector, the labels
  `kueue.x-k8s.io/podset`, `kueue.x-k8s.io/local-queue-name`, `kueue.x-k8s.io/cluster-queue-name`
  (AssignQueueLabelsForPods, on by default since 0.17) and the annotation `kueue.x-k8s.io/workload`
  (TopologyAwareScheduling, on by default), and `suspend: false`.
"""

from __future__ import annotations

import copy
import time

from gpuqueue.jobframework.names import workload_name

API_VERSION = "kueue.x-k8s.io/v1beta2"
FINALIZER = "kueue.x-k8s.io/resource-in-use"
GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def now(offset: float = 0) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))


def wl_name(job: dict) -> str:
    return workload_name("Job", "batch", job["metadata"]["name"], job["metadata"]["uid"])


def workload(job: dict) -> dict:
    """The Workload Kueue makes for `job` (as the API returned it, so with its uid and defaults)."""
    meta = job["metadata"]
    uid = meta["uid"]
    return {"apiVersion": API_VERSION, "kind": "Workload",
            "metadata": {"namespace": meta["namespace"], "name": wl_name(job),
                         "labels": {"kueue.x-k8s.io/job-uid": uid}, "finalizers": [FINALIZER],
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"queueName": meta["labels"][QUEUE_LABEL], "priority": 0, "active": True,
                     "podSets": [{"name": "main", "count": job["spec"].get("parallelism", 1),
                                  "template": copy.deepcopy(job["spec"]["template"])}]}}


def _no_fit(flavor: str, more: int) -> str:
    return f"couldn't assign flavors to pod set main: insufficient unused quota for {GPU} in flavor {flavor}, {more} more needed"


def pending_status(flavor: str, more: int) -> dict:
    return {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                            "message": _no_fit(flavor, more), "lastTransitionTime": now()}]}


def requeued_status(flavor: str, more: int, at: str) -> dict:
    """Evicted by a preemption within its ClusterQueue at `at`, and requeued: waiting again (its
    queue position is `at`, Kueue's default requeuing timestamp)."""
    why = "Preempted to accommodate a workload (UID: 0c8e3f1a, JobUID: 5d1b2c3e) due to prioritization in the ClusterQueue"
    return {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": _no_fit(flavor, more),
         "lastTransitionTime": at},
        {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": "The workload has no reservation",
         "lastTransitionTime": at},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": why, "lastTransitionTime": at},
        {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": why, "lastTransitionTime": at},
        {"type": "Requeued", "status": "True", "reason": "Preempted", "message": why, "lastTransitionTime": at}],
        "schedulingStats": {"evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}]}}


def admitted_status(cluster_queue: str, flavor: str, gpus: int, count: int = 1, at: str | None = None) -> dict:
    at = at or now()
    return {"admission": {"clusterQueue": cluster_queue, "podSetAssignments": [
        {"name": "main", "flavors": {GPU: flavor}, "resourceUsage": {GPU: str(gpus * count)}, "count": count}]},
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
             "message": f"Quota reserved in ClusterQueue {cluster_queue}", "lastTransitionTime": at},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
             "lastTransitionTime": at}]}


def started(job: dict, cluster_queue: str, node_labels: dict) -> dict:
    """The Job as Kueue starts it once admitted (a merge patch of its spec)."""
    return {"spec": {"suspend": False, "template": {
        "metadata": {"labels": {"kueue.x-k8s.io/podset": "main",
                                "kueue.x-k8s.io/local-queue-name": job["metadata"]["labels"][QUEUE_LABEL],
                                "kueue.x-k8s.io/cluster-queue-name": cluster_queue},
                     "annotations": {"kueue.x-k8s.io/workload": wl_name(job)}},
        "spec": {"nodeSelector": dict(node_labels)}}}}
