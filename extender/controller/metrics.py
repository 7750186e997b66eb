"""Prometheus metrics of the controller, in a registry of its own (several controllers can live
in one test process)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from gpuqueue.extender.controller.status import QueueCounts
    from gpuqueue.extender.quota.engine import QuotaEngine

WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.pending = Gauge("gpuqueue_pending_workloads", "Pending workloads", ["cluster_queue", "status"],
                             registry=r)
        self.reserving = Gauge("gpuqueue_reserving_active_workloads", "Workloads holding a quota reservation",
                               ["cluster_queue"], registry=r)
        self.admitted = Gauge("gpuqueue_admitted_active_workloads", "Admitted workloads", ["cluster_queue"],
                              registry=r)
        self.usage = Gauge("gpuqueue_cluster_queue_resource_usage", "Quota in use",
                           ["cluster_queue", "flavor", "resource"], registry=r)
        self.borrowed = Gauge("gpuqueue_cluster_queue_borrowed", "Quota in use beyond the nominal quota",
                              ["cluster_queue", "flavor", "resource"], registry=r)
        self.admission_wait = Histogram("gpuqueue_admission_wait_time_seconds",
                                        "Time from Job creation to its unsuspension", ["cluster_queue"],
                                        buckets=WAIT_BUCKETS, registry=r)
        self.preemptions = Counter("gpuqueue_preemptions", "Preemptions",
                                   ["preempting_cluster_queue", "reason"], registry=r)
        self.pass_duration = Histogram("gpuqueue_admission_pass_duration_seconds", "Duration of a scheduling pass",
                                       registry=r)
        self.events_dropped = Counter("gpuqueue_events_dropped", "Kubernetes Events not sent (over budget)",
                                      registry=r)
        self.leader = Gauge("gpuqueue_leader", "1 while this replica is the leader", registry=r)
        self.enforcement_violations = Counter(
            "gpuqueue_enforcement_violations", "Scheduling attempts (/filter) of a pod that needs an admission and "
            "breaks it (refused in Strict, let through in Audit)", ["reason"], registry=r)

    def update(self, engine: "QuotaEngine", counts: "QueueCounts") -> None:
        for cq, spec in engine.state.cq_specs.items():
            c = counts.cq.get(cq)
            inactive = engine.inactive_reason(cq) is not None
            self.pending.labels(cq, "inadmissible" if inactive else "active").set(c.pending if c else 0)
            self.pending.labels(cq, "active" if inactive else "inadmissible").set(0)
            self.reserving.labels(cq).set(c.reserving if c else 0)
            self.admitted.labels(cq).set(c.reserving if c else 0)
            usage = c.usage if c else {}
            for fr, q in spec.quotas.items():
                used = usage.get(fr, 0)
                self.usage.labels(cq, *fr).set(used)
                self.borrowed.labels(cq, *fr).set(max(0, used - q.nominal))
