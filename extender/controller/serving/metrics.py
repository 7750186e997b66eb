"""Prometheus metrics of the controller, in a registry of its own (several controllers can live
in one test process).

Kueue's families keep Kueue's names, labels, units and buckets (its pkg/metrics), so dashboards
and alerts written for Kueue read them unchanged; gpuqueue's own additions are `gpuqueue_*`.
Gauges are recomputed from the engine on the queue-status tick (off the scheduling path);
counters and wait-time histograms are bumped when the write they count has landed in the API.
docs/metrics.md lists every family and where gpuqueue differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# Kueue's exporter (client_golang) writes no *_created series; prometheus_client does unless told.
disable_created_metrics()
# client_golang's DefBuckets, which Kueue's histograms without buckets of their own get (Python's
# defaults add 0.075, 0.75 and 7.5).
GO_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

from gpuqueue.api.quantity import engine_int_to_quantity

if TYPE_CHECKING:
    from gpuqueue.extender.controller.queues.status import QueueCounts
    from gpuqueue.extender.quota.engine import QuotaEngine

# Kueue's generateExponentialBuckets(14): 1, then 2.5 doubling 13 times (up to 10240 s)
KUEUE_WAIT_BUCKETS = (1.0,) + tuple(2.5 * 2 ** i for i in range(13))
# gpuqueue's own Job-creation-to-unsuspension histogram (finer at the low end)
JOB_WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
CQ_RESOURCE = ["cohort", "cluster_queue", "flavor", "resource"]
LQ = ["name", "namespace"]
CLUSTER_QUEUE_STATUSES = ("pending", "active", "terminating")
CONDITION_STATUSES = ("True", "False", "Unknown")


def kueue_amount(resource: str, value: int) -> float:
    """An engine integer in the unit Kueue's metrics use: cpu in cores, memory in bytes, the rest as
    counted (Kueue's resource.QuantityToFloat of the quantity)."""
    return float(engine_int_to_quantity(resource, value).value)


class Metrics:
    def __init__(self, local_queue_metrics: bool = True) -> None:
        """`local_queue_metrics`: export the kueue_local_queue_* families (Kueue does only with its
        LocalQueueMetrics feature gate on; they add series per LocalQueue)."""
        r = self.registry = CollectorRegistry()
        self.local_queue_metrics = local_queue_metrics

        def counter(name, doc, labels):
            return Counter(name, doc, labels, registry=r)

        def gauge(name, doc, labels=()):
            return Gauge(name, doc, labels, registry=r)

        def histogram(name, doc, labels, buckets=Histogram.DEFAULT_BUCKETS):
            return Histogram(name, doc, labels, buckets=buckets, registry=r)

        # -- Kueue's ClusterQueue families -------------------------------------------------------
        self.admission_attempts = counter("kueue_admission_attempts_total",
                                          "The total number of attempts to admit workloads (scheduling passes that "
                                          "decided something); 'success' when at least one workload was admitted",
                                          ["result"])
        self.admission_attempt_duration = histogram("kueue_admission_attempt_duration_seconds",
                                                     "The latency of an admission attempt", ["result"],
                                                     GO_DEFAULT_BUCKETS)
        self.pending = gauge("kueue_pending_workloads",
                             "The number of pending workloads, per 'cluster_queue' and 'status' (active: in the "
                             "admission queue; inadmissible: failed an admission attempt, waiting for quota to free "
                             "up or for the ClusterQueue to become active)", ["cluster_queue", "status"])
        self.quota_reserved = counter("kueue_quota_reserved_workloads_total",
                                      "The total number of quota reserved workloads per 'cluster_queue'",
                                      ["cluster_queue"])
        self.quota_reserved_wait = histogram("kueue_quota_reserved_wait_time_seconds",
                                             "The time between a workload was created or requeued until it got quota "
                                             "reservation, per 'cluster_queue'", ["cluster_queue"], KUEUE_WAIT_BUCKETS)
        self.admitted = counter("kueue_admitted_workloads_total",
                                "The total number of admitted workloads per 'cluster_queue'", ["cluster_queue"])
        self.admission_wait = histogram("kueue_admission_wait_time_seconds",
                                        "The time between a workload was created or requeued until admission, per "
                                        "'cluster_queue'", ["cluster_queue"], KUEUE_WAIT_BUCKETS)
        self.evicted = counter("kueue_evicted_workloads_total",
                               "The number of evicted workloads per 'cluster_queue' and 'reason' (Preempted, "
                               "ClusterQueueStopped, LocalQueueStopped, PodsReadyTimeout, Deactivated) and "
                               "'underlying_cause' (\"\" when the reason is the root cause)", ["cluster_queue", "reason", "underlying_cause"])
        self.preempted = counter("kueue_preempted_workloads_total",
                                 "The number of preempted workloads per 'preempting_cluster_queue' and 'reason' "
                                 "(InClusterQueue, InCohortReclamation, InCohortFairSharing, "
                                 "InCohortReclaimWhileBorrowing)", ["preempting_cluster_queue", "reason"])
        self.reserving = gauge("kueue_reserving_active_workloads",
                               "The number of Workloads that are reserving quota, per 'cluster_queue'", ["cluster_queue"])
        self.admitted_active = gauge("kueue_admitted_active_workloads",
                                     "The number of admitted Workloads that are active (unsuspended and not "
                                     "finished), per 'cluster_queue'", ["cluster_queue"])
        self.cq_status = gauge("kueue_cluster_queue_status",
                               "Reports 'cluster_queue' with its 'status' (pending, active or terminating); 1 for "
                               "exactly one of them", ["cluster_queue", "status"])
        self.reservation = gauge("kueue_cluster_queue_resource_reservation",
                                 "Reports the cluster_queue's total resource reservation within all the flavors",
                                 CQ_RESOURCE)
        self.usage = gauge("kueue_cluster_queue_resource_usage",
                           "Reports the cluster_queue's total resource usage within all the flavors", CQ_RESOURCE)
        self.nominal = gauge("kueue_cluster_queue_nominal_quota",
                             "Reports the cluster_queue's resource nominal quota within all the flavors", CQ_RESOURCE)
        self.borrowing_limit = gauge("kueue_cluster_queue_borrowing_limit",
                                     "Reports the cluster_queue's resource borrowing limit within all the flavors "
                                     "(+Inf: no limit)", CQ_RESOURCE)
        self.lending_limit = gauge("kueue_cluster_queue_lending_limit",
                                   "Reports the cluster_queue's resource lending limit within all the flavors "
                                   "(+Inf: no limit)", CQ_RESOURCE)
        self.weighted_share = gauge("kueue_cluster_queue_weighted_share",
                                    "The ClusterQueue's dominant share of borrowed quota over what its cohort may "
                                    "lend, divided by its weight (fair sharing only)", ["cluster_queue", "cohort"])
        # -- Kueue's LocalQueue families (its LocalQueueMetrics feature) ---------------------------
        if local_queue_metrics:
            self.lq_pending = gauge("kueue_local_queue_pending_workloads",
                                    "The number of pending workloads, per 'local_queue' and 'status'", LQ + ["status"])
            self.lq_quota_reserved = counter("kueue_local_queue_quota_reserved_workloads_total",
                                             "The total number of quota reserved workloads per 'local_queue'", LQ)
            self.lq_quota_reserved_wait = histogram("kueue_local_queue_quota_reserved_wait_time_seconds",
                                                    "The time between a workload was created or requeued until it got "
                                                    "quota reservation, per 'local_queue'", LQ, KUEUE_WAIT_BUCKETS)
            self.lq_admitted = counter("kueue_local_queue_admitted_workloads_total",
                                       "The total number of admitted workloads per 'local_queue'", LQ)
            self.lq_admission_wait = histogram("kueue_local_queue_admission_wait_time_seconds",
                                               "The time between a workload was created or requeued until admission, "
                                               "per 'local_queue'", LQ, KUEUE_WAIT_BUCKETS)
            self.lq_evicted = counter("kueue_local_queue_evicted_workloads_total",
                                      "The number of evicted workloads per 'local_queue' and 'reason'",
                                      LQ + ["reason", "underlying_cause"])
            self.lq_reserving = gauge("kueue_local_queue_reserving_active_workloads",
                                      "The number of Workloads that are reserving quota, per 'localQueue'", LQ)
            self.lq_admitted_active = gauge("kueue_local_queue_admitted_active_workloads",
                                            "The number of admitted Workloads that are active (unsuspended and not "
                                            "finished), per 'localQueue'", LQ)
            self.lq_status = gauge("kueue_local_queue_status",
                                   "Reports 'localQueue' with its 'active' status (True, False or Unknown); 1 for "
                                   "exactly one of them", LQ + ["active"])
            self.lq_reservation = gauge("kueue_local_queue_resource_reservation",
                                        "Reports the localQueue's total resource reservation within all the flavors",
                                        LQ + ["flavor", "resource"])
            self.lq_usage = gauge("kueue_local_queue_resource_usage",
                                  "Reports the localQueue's total resource usage within all the flavors",
                                  LQ + ["flavor", "resource"])
        # -- gpuqueue's own -------------------------------------------------------------------------
        self.borrowed = gauge("gpuqueue_cluster_queue_borrowed", "Quota in use beyond the nominal quota (Kueue's units)",
                              ["cluster_queue", "flavor", "resource"])
        self.job_admission_wait = histogram("gpuqueue_admission_wait_time_seconds",
                                            "Time from Job creation to its unsuspension", ["cluster_queue"],
                                            JOB_WAIT_BUCKETS)
        self.pass_duration = histogram("gpuqueue_admission_pass_duration_seconds",
                                       "Duration of every scheduling pass (Kueue's admission attempts are the ones "
                                       "that decided something)", [])
        self.events_dropped = counter("gpuqueue_events_dropped_total", "Kubernetes Events not sent (over budget)", [])
        self.leader = gauge("gpuqueue_leader", "1 while this replica is the leader")
        self.enforcement_violations = counter(
            "gpuqueue_enforcement_violations_total", "Scheduling attempts (/filter) of a pod that needs an admission "
            "and breaks it (refused in Strict, let through in Audit)", ["reason"])
        self._queue_gauges = [self.pending, self.reserving, self.admitted_active, self.cq_status, self.reservation,
                              self.usage, self.nominal, self.borrowing_limit, self.lending_limit, self.weighted_share,
                              self.borrowed]
        if local_queue_metrics:
            self._queue_gauges += [self.lq_pending, self.lq_reserving, self.lq_admitted_active, self.lq_status,
                                   self.lq_reservation, self.lq_usage]
        self.showing_queues = False

    # -- events (called where the write they count has landed) -------------------------------------
    def admission_attempt(self, admitted_any: bool, seconds: float) -> None:
        result = "success" if admitted_any else "inadmissible"
        self.admission_attempts.labels(result).inc()
        self.admission_attempt_duration.labels(result).observe(seconds)

    def admitted_workload(self, cq: str, namespace: str, local_queue: str, waited: float) -> None:
        """QuotaReserved and Admitted written together (no admission checks): both of Kueue's counts."""
        self.quota_reserved.labels(cq).inc()
        self.quota_reserved_wait.labels(cq).observe(waited)
        self.admitted.labels(cq).inc()
        self.admission_wait.labels(cq).observe(waited)
        if self.local_queue_metrics:
            self.lq_quota_reserved.labels(local_queue, namespace).inc()
            self.lq_quota_reserved_wait.labels(local_queue, namespace).observe(waited)
            self.lq_admitted.labels(local_queue, namespace).inc()
            self.lq_admission_wait.labels(local_queue, namespace).observe(waited)

    def evicted_workload(self, cq: str, namespace: str, local_queue: str, reason: str, underlying_cause: str = "",
                         preempting_cq: str | None = None, preemption_reason: str | None = None) -> None:
        self.evicted.labels(cq, reason, underlying_cause).inc()
        if self.local_queue_metrics:
            self.lq_evicted.labels(local_queue, namespace, reason, underlying_cause).inc()
        if preempting_cq is not None and preemption_reason is not None:
            self.preempted.labels(preempting_cq, preemption_reason).inc()

    # -- gauges, recomputed from the engine ----------------------------------------------------------
    def forget_queues(self) -> None:
        """This replica no longer leads: its numbers would go stale, so it shows none (the leader does)."""
        if self.showing_queues:
            for g in self._queue_gauges:
                g.clear()
            self.showing_queues = False

    def update(self, engine: "QuotaEngine", counts: "QueueCounts", local_queues: list[tuple[str, str, str]]) -> None:
        """Every gauge from scratch (queues deleted since drop out). `local_queues`: (namespace, name,
        Active condition status) of each LocalQueue."""
        from gpuqueue.extender.controller.queues.status import cluster_queue_active

        for g in self._queue_gauges:
            g.clear()
        self.showing_queues = True
        state = engine.state
        for cq, spec in state.cq_specs.items():
            c = counts.cq.get(cq)
            pending, inadmissible = (c.pending, c.inadmissible) if c else (0, 0)
            self.pending.labels(cq, "active").set(pending - inadmissible)
            self.pending.labels(cq, "inadmissible").set(inadmissible)
            self.reserving.labels(cq).set(c.reserving if c else 0)
            self.admitted_active.labels(cq).set(c.reserving if c else 0)
            status = "active" if cluster_queue_active(engine, cq)[0] == "True" else "pending"
            for s in CLUSTER_QUEUE_STATUSES:
                self.cq_status.labels(cq, s).set(1 if s == status else 0)
            cohort = spec.cohort or ""
            usage = c.usage if c else {}
            for (flavor, res), q in spec.quotas.items():
                labels = (cohort, cq, flavor, res)
                used = usage.get((flavor, res), 0)
                self.nominal.labels(*labels).set(kueue_amount(res, q.nominal))
                self.borrowing_limit.labels(*labels).set(
                    float("inf") if q.borrowing_limit is None else kueue_amount(res, q.borrowing_limit))
                self.lending_limit.labels(*labels).set(
                    float("inf") if q.lending_limit is None else kueue_amount(res, q.lending_limit))
                self.reservation.labels(*labels).set(kueue_amount(res, used))
                self.usage.labels(*labels).set(kueue_amount(res, used))
                self.borrowed.labels(cq, flavor, res).set(kueue_amount(res, max(0, used - q.nominal)))
            node = state.cq_nodes.get(cq)
            if engine.fair_sharing is not None and node is not None and node.parent is not None:
                self.weighted_share.labels(cq, cohort).set(engine.fair_sharing.share(node))
        if not self.local_queue_metrics:
            return
        for namespace, name, active in local_queues:
            c = counts.lq.get(f"{namespace}/{name}")
            pending, inadmissible = (c.pending, c.inadmissible) if c else (0, 0)
            self.lq_pending.labels(name, namespace, "active").set(pending - inadmissible)
            self.lq_pending.labels(name, namespace, "inadmissible").set(inadmissible)
            self.lq_reserving.labels(name, namespace).set(c.reserving if c else 0)
            self.lq_admitted_active.labels(name, namespace).set(c.reserving if c else 0)
            for s in CONDITION_STATUSES:
                self.lq_status.labels(name, namespace, s).set(1 if s == active else 0)
            lq = state.local_queues.get(f"{namespace}/{name}")
            spec = state.cq_specs.get(lq.cluster_queue) if lq else None
            for flavor, res in spec.quotas if spec else ():
                used = kueue_amount(res, (c.usage if c else {}).get((flavor, res), 0))
                self.lq_reservation.labels(name, namespace, flavor, res).set(used)
                self.lq_usage.labels(name, namespace, flavor, res).set(used)
