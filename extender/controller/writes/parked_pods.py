"""Pods that kube-scheduler parked because the extender refused them before their workload was
admitted: a Job its owner started while it was pending or being evicted has pods that the extender
refuses until the admission is written. kube-scheduler keeps a refused pod with its unschedulable
pods until a cluster event that could help it, or its periodic flush (five minutes), and the
admission of a Workload is no event it watches. A change of the pod's own metadata is one, on 1.24
(PriorityQueue.Update: isPodUpdated) and current versions alike: the controller writes an
annotation on each such pod once its workload is admitted, and kube-scheduler tries it again at once.
"""

from __future__ import annotations

import time
from typing import Iterable

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status

RETRY_ANNOTATION = "gpuqueue.io/scheduling-retry"


def parked(pod: dict) -> bool:
    """Waiting for a node: parked, or refused in a scheduling cycle still under way whose
    PodScheduled=False is not written yet (an update of a pod in flight sends it to be tried again
    when the cycle fails, on 1.24 and current alike)."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return not (spec.get("nodeName") or meta.get("deletionTimestamp") or spec.get("schedulingGates"))


async def retry(kube: KubeApi, pods: Iterable[dict], limit: int | None = None) -> int:
    """Moves each parked pod back to be scheduled, `limit` at most; returns how many were written."""
    stamp = f"{time.time():.3f}"
    done = 0
    for pod in pods:
        if limit is not None and done >= limit:
            break
        if not parked(pod):
            continue
        meta = pod["metadata"]
        try:
            await kube.merge_patch(K.PODS, meta["namespace"], meta["name"],
                                   {"metadata": {"annotations": {RETRY_ANNOTATION: stamp}}})
            done += 1
        except Exception as exc:
            if not is_status(exc, 404):  # gone meanwhile: nothing to retry
                raise
    return done
