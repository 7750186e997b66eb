"""Kueue's finalizer `kueue.x-k8s.io/resource-in-use` on the Workloads Kueue made before gpuqueue
took over (docs/migrate-from-kueue.md). gpuqueue makes its Workloads without it and needs none: a
reservation counts until its pods are gone whatever becomes of its Workload (departures.py). Left
on, it would keep a Workload Terminating for ever once its Job is deleted (and, with foreground
deletion, the Job too). It comes off when Kueue's job reconciler takes it off: once the Workload is
finished, or once it is being deleted (the deletion itself is then followed as any Workload's:
workload_events.on_workload_delete)."""

from __future__ import annotations

from typing import Callable

from gpuqueue.api.kueue import RESOURCE_IN_USE_FINALIZER as FINALIZER
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.writes.records import read_modify_write
from gpuqueue.extender.controller.writes.writes import Writes
from gpuqueue.kube import Informer, object_key


def may_go(wl: dict) -> bool:
    """It carries Kueue's finalizer, and Kueue would take it off now."""
    meta = wl.get("metadata") or {}
    return FINALIZER in (meta.get("finalizers") or ()) and (
        bool(meta.get("deletionTimestamp")) or W.is_true(wl, "Finished"))


class KueueFinalizers:
    def __init__(self, kube: KubeApi, workloads: Informer, writes: Writes, leading: Callable[[], bool]) -> None:
        """`leading`: this replica leads and has rebuilt its engine (sweep() runs then)."""
        self.kube = kube
        self.cache = workloads
        self.writes = writes
        self.leading = leading
        self._under_way: set[str] = set()
        workloads.add_handler(on_add=self.judge, on_update=lambda old, new: self.judge(new),
                              on_delete=lambda wl: None)

    def sweep(self) -> None:
        """Every cached Workload judged (on becoming leader: events seen before were not)."""
        for wl in self.cache.list():
            self.judge(wl)

    def judge(self, wl: dict) -> None:
        if not self.leading() or not may_go(wl):
            return
        key = object_key(wl)
        if key in self._under_way:
            return
        self._under_way.add(key)
        meta = wl["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid")

        def change(live: dict) -> dict | None:
            if live["metadata"].get("uid") != uid or not may_go(live):
                return None
            live["metadata"]["finalizers"] = [f for f in live["metadata"]["finalizers"] if f != FINALIZER]
            return live

        async def write():
            try:
                await read_modify_write(self.kube, K.WORKLOADS, namespace, name, wl, change)
            except Exception as exc:
                if not is_status(exc, 404):
                    raise

        self.writes.chain(f"kueue-finalizer/{key}", write).add_done_callback(
            lambda _: self._under_way.discard(key))
