"""Kubernetes Events on the Jobs and their Workloads: best effort, never in the way of a decision. Events have a
budget of their own (like client-go's event spam filter): in a burst the surplus is dropped and
counted, so events never take the API's capacity from admissions."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from prometheus_client import Counter

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.core.job_state import JobState
from gpuqueue.extender.controller.client.kubeapi import CALL_CLASS, INFORM, KubeApi
from gpuqueue.kube import TokenBucket

log = logging.getLogger("gpuqueue.controller")


class EventRecorder:
    def __init__(self, kube: KubeApi, spawn: Callable[[Awaitable], asyncio.Future], identity: str,
                 dropped: Counter, qps: float, burst: int) -> None:
        """`spawn`: runs a write in the background while this replica leads (Writes.spawn)."""
        self.kube = kube
        self.spawn = spawn
        self.identity = identity
        self.dropped = dropped
        self._budget = TokenBucket(qps, burst)

    def event(self, st: JobState, reason: str, message: str, type_: str = "Normal") -> None:
        """On the Job."""
        self._record(st.key, {"kind": st.kind.kind.kind, "namespace": st.namespace, "name": st.name, "uid": st.uid,
                              "apiVersion": st.kind.kind.api_version}, reason, message, type_)

    def on_workload(self, st: JobState, uid: str, reason: str, message: str, type_: str = "Normal") -> None:
        """On the Job's Workload, where Kueue records QuotaReserved, Admitted, Pending, Preempted and
        EvictedDueTo*: out of the same budget as the Job's."""
        self._record(st.key, {"kind": "Workload", "namespace": st.namespace, "name": st.wl_name, "uid": uid,
                              "apiVersion": f"{K.KUEUE_GROUP}/{K.KUEUE_VERSION}"}, reason, message, type_)

    def on_pod(self, namespace: str, name: str, uid: str, reason: str, message: str, type_: str = "Warning") -> None:
        """On a pod (what enforcement in Audit mode lets through), shown by `kubectl describe pod`."""
        self._record(f"{namespace}/{name}", {"kind": "Pod", "namespace": namespace, "name": name, "uid": uid,
                                             "apiVersion": "v1"}, reason, message, type_)

    def on_object(self, api_version: str, kind: str, namespace: str, name: str, uid: str, reason: str, message: str,
                  type_: str = "Warning") -> None:
        """On any namespaced object (one gpuqueue does not queue: unqueued_events.py)."""
        self._record(f"{namespace}/{name}", {"kind": kind, "namespace": namespace, "name": name, "uid": uid,
                                             "apiVersion": api_version}, reason, message, type_)

    def _record(self, key: str, involved: dict, reason: str, message: str, type_: str) -> None:
        if not self._budget.try_take():
            self.dropped.inc()
            return
        now = W.now_rfc3339()
        body = {
            "metadata": {"generateName": f"{involved['name']}.", "namespace": involved["namespace"]},
            "involvedObject": involved,
            "reason": reason, "message": message, "type": type_, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": "gpuqueue-controller"}, "reportingComponent": "gpuqueue-controller",
            "reportingInstance": self.identity,
        }

        async def send():
            CALL_CLASS.set(INFORM)  # (spawned from a write's task, whose context it copied)
            try:
                await self.kube.create(K.EVENTS, involved["namespace"], body)
            except Exception as exc:  # noqa: BLE001
                log.debug("event %s on %s not recorded: %s", reason, key, exc)

        self.spawn(send())
