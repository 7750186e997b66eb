"""The controller's settings: pacing of passes and writes, retries, watches, leader election, and
what the Kueue Configuration says (managed Jobs, the kinds it queues, fair sharing, enforcement)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuqueue.extender.controller.podsready.pods_ready import WaitForPodsReady
from gpuqueue.extender.quota.fairsharing import FairSharing
from gpuqueue.jobframework.enforcement import EnforcementConfig
from gpuqueue.jobframework.managed import ManagedJobsConfig
from gpuqueue.jobframework.registry import IntegrationsConfig


@dataclass
class Options:
    debounce: float = 0.02  # seconds to gather changes before a pass
    # a pass that took t seconds is followed by the next no sooner than pass_spacing * t later (fewer,
    # larger passes when they are slow). Off: in Kueue's baseline it saved a few seconds of CPU but
    # delayed every decision by up to twice a pass, and the large class's hand-offs did not gain
    pass_spacing: float = 0.0
    status_interval: float = 1.0  # at most one ClusterQueue/LocalQueue status write per queue per interval
    # those writes give way to creations, admissions and releases for this long at most (queue_status.py)
    status_max_delay: float = 15.0
    qps: float = 100.0
    burst: int = 200
    concurrency: int = 16
    watch_timeout: int = 300
    event_qps: float = 10.0  # Kubernetes Events: a budget apart from the writes that matter
    event_burst: int = 100
    # a pending Workload is told why (QuotaReserved=False) once it has waited this long, and not
    # while creations, admissions or releases wait for a connection (workload_writes.pending)
    pending_message_delay: float = 2.0
    resubmit_backoff: float = 1.0  # first wait after the API refused a Job's new pod template
    request_timeout: float = 30.0  # seconds for one API request (not watches)
    # attempts of a write failing with 5xx, 429, a timeout or a connection error; None: until it
    # succeeds or this replica stops leading (a decision given up leaves the API behind the engine)
    write_retries: int | None = None
    write_backoff_initial: float = 0.05  # first pause between those attempts, doubled each time
    write_backoff_max: float = 2.0
    watch_backoff_initial: float = 0.2  # first pause before listing/watching again after a failure
    watch_backoff_max: float = 30.0
    leader_elect: bool = False
    lease_namespace: str = "gpuqueue-system"
    lease_name: str = "gpuqueue-extender"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    managed_jobs: ManagedJobsConfig = field(default_factory=ManagedJobsConfig)
    integrations: IntegrationsConfig = field(default_factory=IntegrationsConfig)  # the kinds it queues
    fair_sharing: FairSharing | None = None  # from the Configuration: None is Kueue without fairSharing
    enforcement: EnforcementConfig = field(default_factory=EnforcementConfig)  # the Configuration's `enforcement`
    pods_ready: WaitForPodsReady | None = None  # the Configuration's waitForPodsReady (None: off)
