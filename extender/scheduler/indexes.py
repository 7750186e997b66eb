"""The lookups every ClusterView answers the same way: pods and owners by UID, Workloads by their
owner's UID, the node cache and the policy. The controller's view fills them from Kubernetes
objects (``extender.controller.clusterview.view.CacheView``), the in-memory one from a test's setup."""

from __future__ import annotations

import asyncio

from gpuqueue.jobframework.enforcement import EnforcementConfig

from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.scheduler.view import ADMITTED, EVICTED, FINISHED, PENDING, CachedPod, Owner, WorkloadEntry

DELETED_KEPT = 4096  # pods deleted lately, so that a request naming one is not taken for a cache behind it
_QUOTA_FIRST = {ADMITTED: 0, EVICTED: 1, PENDING: 2, FINISHED: 3}  # which of an owner's Workloads counts


class ViewIndexes:
    def __init__(self, nodes: NodeCache | None = None, enforcement: EnforcementConfig | None = None) -> None:
        self._nodes = nodes if nodes is not None else NodeCache()
        self._enforcement = enforcement or EnforcementConfig()
        self._pods: dict[str, CachedPod] = {}
        self._deleted: dict[str, None] = {}  # the last DELETED_KEPT pods' uids the cache saw deleted, oldest first
        self._owners: dict[str, Owner] = {}
        self._workloads: dict[str, WorkloadEntry] = {}  # by namespace/name
        self._by_owner: dict[str, dict[str, WorkloadEntry]] = {}
        self._change: asyncio.Event | None = None  # set at the next change; only while a verb waits
        self._workload_changes = 0  # Workloads taken in or dropped so far
        self._quiet_at = -1  # the count when a wait for a Workload's admission last timed out

    def touched(self) -> None:
        """Something a verdict reads changed: wake the verbs waiting for the cache."""
        if self._change is not None:
            self._change.set()
            self._change = None

    async def changed(self, timeout: float) -> bool:
        if self._change is None:
            self._change = asyncio.Event()
        try:
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can lose a cancellation
                await self._change.wait()
            return True
        except TimeoutError:
            return False

    def workloads_behind(self, resource_version: str | None) -> bool:
        return False  # filled by hand: nothing lags

    @property
    def workloads_quiet(self) -> bool:
        return self._quiet_at == self._workload_changes

    def workloads_went_quiet(self) -> None:
        self._quiet_at = self._workload_changes
        self.touched()  # other waits for an admission end too

    # -- filling -------------------------------------------------------------------------------
    def put_pod(self, pod: CachedPod) -> CachedPod:
        self._pods[pod.uid] = pod
        self.touched()
        return pod

    def drop_pod(self, uid: str) -> None:
        self._pods.pop(uid, None)
        if uid:
            self._deleted[uid] = None
            if len(self._deleted) > DELETED_KEPT:
                del self._deleted[next(iter(self._deleted))]
        self.touched()

    def put_owner(self, owner: Owner) -> Owner:
        self._owners[owner.uid] = owner
        self.touched()
        return owner

    def drop_owner(self, uid: str) -> None:
        self._owners.pop(uid, None)

    def put_workload(self, entry: WorkloadEntry) -> WorkloadEntry:
        self.drop_workload(entry.key)
        self._workloads[entry.key] = entry
        for uid in {entry.owner_uid, *entry.members}:
            self._by_owner.setdefault(uid, {})[entry.key] = entry
        self.touched()
        return entry

    def drop_workload(self, key: str) -> None:
        self._workload_changes += 1  # (put_workload's too)
        old = self._workloads.pop(key, None)
        if old is not None:
            for uid in {old.owner_uid, *old.members}:
                owned = self._by_owner.get(uid, {})
                owned.pop(old.key, None)
                if not owned:
                    self._by_owner.pop(uid, None)

    # -- ClusterView ---------------------------------------------------------------------------
    @property
    def nodes(self) -> NodeCache:
        return self._nodes

    @property
    def enforcement(self) -> EnforcementConfig:
        return self._enforcement

    def pod(self, uid: str) -> CachedPod | None:
        return self._pods.get(uid)

    def pod_deleted(self, uid: str) -> bool:
        return uid in self._deleted

    def owner(self, uid: str) -> Owner | None:
        return self._owners.get(uid)

    def workload_owned_by(self, uid: str) -> WorkloadEntry | None:
        owned = self._by_owner.get(uid)
        if not owned:
            return None
        if len(owned) == 1:
            return next(iter(owned.values()))
        return min(owned.values(), key=lambda e: (_QUOTA_FIRST[e.state], e.name))
