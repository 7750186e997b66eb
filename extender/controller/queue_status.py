"""ClusterQueue and LocalQueue status written through the status subresource: at most once per
queue per `status_interval`, only when something they show has changed, and only what differs
from what the API holds (the status itself is computed in status.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Mapping

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller.kubeapi import CALL_CLASS, INFORM, KubeApi, is_status
from gpuqueue.extender.controller.metrics import Metrics
from gpuqueue.extender.controller.records import read_modify_write
from gpuqueue.extender.controller.status import (cluster_queue_status, local_queue_active, local_queue_status,
                                                 queue_counts, same_status)
from gpuqueue.kube import Informer
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import Admission

log = logging.getLogger("gpuqueue.controller")


class QueueStatus:
    def __init__(self, kube: KubeApi, cluster_queues: Informer, local_queues: Informer, metrics: Metrics,
                 evicting: Mapping[str, Admission], interval: float,
                 engine: Callable[[], QuotaEngine | None]) -> None:
        """`evicting`: victims whose reservation still stands in the API (they count as reserving);
        `engine`: the engine whose counts to show, None while this replica should not write."""
        self.kube = kube
        self.cluster_queues, self.local_queues = cluster_queues, local_queues
        self.metrics = metrics
        self.evicting = evicting
        self.interval = interval
        self.engine = engine
        self.dirty = True

    def changed(self) -> None:
        """Something the queues' status shows may have changed (or someone wrote over ours)."""
        self.dirty = True

    async def loop(self) -> None:
        CALL_CLASS.set(INFORM)
        while True:
            await asyncio.sleep(self.interval)
            engine = self.engine()
            if engine is None:
                self.metrics.forget_queues()
            if engine is None or not self.dirty:
                continue
            self.dirty = False
            try:
                await self.write(engine)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001
                log.exception("queue status update failed")
                self.dirty = True

    async def write(self, engine: QuotaEngine) -> None:
        counts = queue_counts(engine, self.evicting)
        self.metrics.update(engine, counts, [
            (lq["metadata"].get("namespace", ""), lq["metadata"]["name"],
             local_queue_active(engine, (lq.get("spec") or {}).get("clusterQueue", ""))[0])
            for lq in self.local_queues.list()])
        writes = []
        for cq in self.cluster_queues.list():
            name = cq["metadata"]["name"]
            status = cluster_queue_status(engine, name, counts.cq.get(name), cq.get("status") or {},
                                          cq["metadata"].get("generation"))
            if not same_status(cq.get("status") or {}, status):
                writes.append(self._write_status(K.CLUSTER_QUEUES, cq, status))
        for lq in self.local_queues.list():
            meta = lq["metadata"]
            key = f"{meta.get('namespace')}/{meta['name']}"
            status = local_queue_status(engine, lq, counts.lq.get(key), lq.get("status") or {})
            if not same_status(lq.get("status") or {}, status):
                writes.append(self._write_status(K.LOCAL_QUEUES, lq, status))
        await asyncio.gather(*writes)

    async def _write_status(self, kind: K.Kind, obj: dict, status: dict) -> None:
        def change(fresh: dict) -> dict | None:
            if same_status(fresh.get("status") or {}, status):
                return None
            fresh["status"] = status
            return fresh

        meta = obj["metadata"]
        try:
            await read_modify_write(self.kube, kind, meta.get("namespace"), meta["name"], obj, change, "status",
                                    protect=W.status_copy)
        except Exception as exc:  # noqa: BLE001
            if not is_status(exc, 404):
                raise
