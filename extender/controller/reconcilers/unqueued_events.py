"""An Event on a GPU workload that nothing will admit (gpuqueue.jobframework.unqueued says why and
what to do, in the words of the webhook's warning at its creation): `kubectl describe` shows it to
whoever did not see the warning (a Job created by a CronJob, a manifest applied by a pipeline).

Told once per object, on its first sighting, and only of objects created in the last few minutes:
a restarted controller does not repeat itself about old ones. The leader alone records
(EventRecorder writes through Writes.spawn)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Mapping

from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.writes.events import EventRecorder
from gpuqueue.jobframework.enforcement import EnforcementConfig, covered_resources
from gpuqueue.jobframework.integration import Integration
from gpuqueue.jobframework.kinds.pods import Pod
from gpuqueue.jobframework.managed import ManagedJobsConfig, QueueView
from gpuqueue.jobframework.unqueued import EVENT_REASON, enforced_requests, has_controller, why_unqueued
from gpuqueue.kube import Informer

RECENT = 300.0  # seconds: an object older than this when first seen is not told about
POD = Pod()


class UnqueuedEvents:
    def __init__(self, informers: Mapping[str, Informer], integrations: Collection[tuple[str, Integration]],
                 queues: QueueView, config: ManagedJobsConfig, enforcement: EnforcementConfig,
                 frameworks: Callable[[], Collection[str]], events: EventRecorder) -> None:
        """``integrations``: (informer name, integration) of the kinds it queues, pods aside;
        ``frameworks``: the integrations it queues now (a kind refused at start is not)."""
        self.cluster_queues = informers["clusterqueues"]
        self.queues, self.config, self.enforcement = queues, config, enforcement
        self.frameworks = frameworks
        self.events = events
        self._told: dict[str, float] = {}  # uid -> when
        for name, integration in integrations:
            informers[name].add_handler(on_add=functools.partial(self.seen, integration=integration))
        informers["pods"].add_handler(on_add=self.seen_pod)

    def seen_pod(self, pod: dict) -> None:
        if not has_controller(pod):  # a controller's pods: their owner is told
            self.seen(pod, POD)

    def seen(self, obj: dict, integration: Integration) -> None:
        meta = obj.get("metadata") or {}
        uid, namespace = meta.get("uid") or "", meta.get("namespace") or ""
        created = W.parse_time(meta.get("creationTimestamp"))
        now = time.time()
        if not self.enforcement.refusing or not uid or uid in self._told or created is None or now - created > RECENT:
            return
        found = why_unqueued(obj, integration.kind, integration.framework, namespace,
                             lambda: enforced_requests(integration, obj, namespace, self.enforcement,
                                                       covered_resources(self.cluster_queues.list())),
                             self.queues, self.config, tuple(self.frameworks()))
        if found is None:
            return
        self._told = {u: t for u, t in self._told.items() if now - t <= RECENT}
        self._told[uid] = now
        self.events.on_object(integration.api_version, integration.kind, namespace, meta.get("name") or "", uid,
                              EVENT_REASON, found.message)
