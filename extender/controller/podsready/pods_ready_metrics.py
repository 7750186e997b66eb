"""Kueue's metric families for waitForPodsReady, in the controller's registry (pkg/metrics):
how long a Workload waited until its pods were ready (since queued, since admitted), how long it
ran ready before an eviction, and its PodsReadyTimeout evictions by their underlying cause."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Histogram

from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.serving.metrics import KUEUE_WAIT_BUCKETS
from gpuqueue.extender.quota import decisions as d

LQ = ["name", "namespace"]


class PodsReadyMetrics:
    def __init__(self, registry: CollectorRegistry, local_queue_metrics: bool) -> None:
        self.local_queue_metrics = local_queue_metrics
        self.ready_wait = Histogram("kueue_ready_wait_time_seconds", "The time between a workload was created or "
                                    "requeued until ready, per 'cluster_queue'", ["cluster_queue"],
                                    buckets=KUEUE_WAIT_BUCKETS, registry=registry)
        self.admitted_until_ready = Histogram("kueue_admitted_until_ready_wait_time_seconds",
                                              "The time between a workload was admitted until ready, per "
                                              "'cluster_queue'", ["cluster_queue"], buckets=KUEUE_WAIT_BUCKETS,
                                              registry=registry)
        self.ready_to_evicted_time = Histogram("kueue_pods_ready_to_evicted_time_seconds",
                                               "The number of seconds between a workload's start, based on the "
                                               "PodsReady condition, and its eviction, per 'cluster_queue', "
                                               "'reason' and 'underlying_cause'",
                                               ["cluster_queue", "reason", "underlying_cause"],
                                               buckets=KUEUE_WAIT_BUCKETS, registry=registry)
        if local_queue_metrics:
            self.lq_ready_wait = Histogram("kueue_local_queue_ready_wait_time_seconds",
                                           "The time between a workload was created or requeued until ready, per "
                                           "'local_queue'", LQ, buckets=KUEUE_WAIT_BUCKETS, registry=registry)
            self.lq_admitted_until_ready = Histogram("kueue_local_queue_admitted_until_ready_wait_time_seconds",
                                                     "The time between a workload was admitted until ready, per "
                                                     "'local_queue'", LQ, buckets=KUEUE_WAIT_BUCKETS,
                                                     registry=registry)

    def ready(self, wl: dict, namespace: str) -> None:
        """PodsReady turned True on `wl` (as written): Kueue's job reconciler's two observations."""
        now = time.time()
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        requeued = W.condition(wl, "Requeued")
        queued = W.parse_time((requeued or {}).get("lastTransitionTime")) if requeued else None
        queued = queued or W.parse_time(wl["metadata"].get("creationTimestamp")) or now
        admitted = W.parse_time((W.condition(wl, "Admitted") or {}).get("lastTransitionTime")) or now
        self.ready_wait.labels(cq).observe(max(0.0, now - queued))
        self.admitted_until_ready.labels(cq).observe(max(0.0, now - admitted))
        if self.local_queue_metrics:
            lq = (wl.get("spec") or {}).get("queueName", "")
            self.lq_ready_wait.labels(lq, namespace).observe(max(0.0, now - queued))
            self.lq_admitted_until_ready.labels(lq, namespace).observe(max(0.0, now - admitted))

    def ready_to_evicted(self, cq: str, evicted_reason: str, seconds: float) -> None:
        """``evicted_reason``: the Evicted condition's."""
        reason, cause = d.counted_eviction(evicted_reason)
        self.ready_to_evicted_time.labels(cq, reason, cause).observe(seconds)
