"""ClusterQueue and LocalQueue status written through the status subresource: at most once per
queue per `status_interval`, only when something they show has changed, and only what differs
from what the API holds (the status itself is computed in status.py). The writes inform: they give
way to creations, admissions and releases, but for `max_delay` at most; then they go before the
creations (after admissions and releases). The queue gauges on /metrics are set with each write,
and brought up to the engine when /metrics is read (refresh_gauges): they cost no request."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Mapping

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.client.kubeapi import CALL_CLASS, CALL_TAG, INFORM, ORDINARY, KubeApi, is_status
from gpuqueue.extender.controller.serving.metrics import Metrics
from gpuqueue.extender.controller.writes.records import read_modify_write
from gpuqueue.extender.controller.queues.status import (QueueCounts, cluster_queue_status, local_queue_active,
                                                 local_queue_status, queue_counts, same_status)
from gpuqueue.kube import Informer
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import Admission

log = logging.getLogger("gpuqueue.controller")


class QueueStatus:
    def __init__(self, kube: KubeApi, cluster_queues: Informer, local_queues: Informer, metrics: Metrics,
                 evicting: Mapping[str, Admission], interval: float, max_delay: float,
                 engine: Callable[[], QuotaEngine | None]) -> None:
        """`evicting`: victims whose reservation still stands in the API (they count as reserving);
        `engine`: the engine whose counts to show, None while this replica should not write."""
        self.kube = kube
        self.cluster_queues, self.local_queues = cluster_queues, local_queues
        self.metrics = metrics
        self.evicting = evicting
        self.interval = interval
        self.max_delay = max_delay
        self.engine = engine
        self.dirty = True  # the status to write may differ from the API's
        self.stale = True  # the gauges may differ from the engine
        self._class = INFORM  # of the batch under way: ORDINARY once it waited max_delay
        self._tags: list[str] = []  # of its calls, to move them up

    def changed(self) -> None:
        """Something the queues' status shows may have changed (or someone wrote over ours)."""
        self.dirty = self.stale = True

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        writing: asyncio.Task | None = None
        started = 0.0
        try:
            while True:
                await asyncio.sleep(self.interval)
                engine = self.engine()
                if engine is None:
                    self.metrics.forget_queues()
                    self.stale = True
                    if writing is not None:
                        writing.cancel()  # not leading: the leader writes
                    continue
                if writing is not None and not writing.done():
                    if loop.time() - started >= self.max_delay:
                        self._class = ORDINARY  # (a call not yet waiting for a connection is moved next time)
                        for tag in self._tags:
                            self.kube.promote(tag, ORDINARY, front=True)
                    continue
                if writing is not None:
                    self._ended(writing)
                    writing = None
                if not self.dirty:
                    continue
                self.dirty = False
                self._class, self._tags, started = INFORM, [], loop.time()
                counts = queue_counts(engine, self.evicting)
                self.show(engine, counts)
                writing = asyncio.create_task(self.write(engine, counts), name="controller:status-write")
        finally:
            if writing is not None:
                writing.cancel()

    def _ended(self, writing: asyncio.Task) -> None:
        if writing.cancelled():
            self.dirty = True
        elif writing.exception() is not None:
            log.error("queue status update failed", exc_info=writing.exception())
            self.dirty = True

    def refresh_gauges(self) -> None:
        """The queue gauges brought up to the engine, before /metrics is read: while a status write
        waits for the API they would otherwise show what that write does."""
        engine = self.engine()
        if engine is None:
            self.metrics.forget_queues()
            self.stale = True
        elif self.stale:
            self.show(engine, queue_counts(engine, self.evicting))

    def show(self, engine: QuotaEngine, counts: QueueCounts) -> None:
        """The queue gauges, from the engine as it is."""
        self.stale = False
        self.metrics.update(engine, counts, [
            (lq["metadata"].get("namespace", ""), lq["metadata"]["name"],
             local_queue_active(engine, (lq.get("spec") or {}).get("clusterQueue", ""))[0])
            for lq in self.local_queues.list()])

    async def write(self, engine: QuotaEngine, counts: QueueCounts) -> None:
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
        # every write ends before the next batch: one still waiting would later put its older status
        # over the next batch's
        failed = [r for r in await asyncio.gather(*writes, return_exceptions=True) if isinstance(r, BaseException)]
        if failed:
            raise failed[0]

    async def _write_status(self, kind: K.Kind, obj: dict, status: dict) -> None:
        def change(fresh: dict) -> dict | None:
            if same_status(fresh.get("status") or {}, status):
                return None
            fresh["status"] = status
            return fresh

        meta = obj["metadata"]
        tag = f"queue-status/{kind.plural}/{meta.get('namespace') or ''}/{meta['name']}"
        self._tags.append(tag)
        CALL_CLASS.set(self._class)  # (this call's own task)
        CALL_TAG.set(tag)
        try:
            await read_modify_write(self.kube, kind, meta.get("namespace"), meta["name"], obj, change, "status",
                                    protect=W.status_copy)
        except Exception as exc:  # noqa: BLE001
            if not is_status(exc, 404):
                raise
