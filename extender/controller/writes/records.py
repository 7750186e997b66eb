"""The API's record of the objects the controller writes: read from the watch caches, changed by
read-modify-writes retried on conflict."""

from __future__ import annotations

from typing import Callable

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.core.job_state import JobState
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status
from gpuqueue.kube import Informer, object_key, retry_on_conflict


async def read_modify_write(kube: KubeApi, kind: K.Kind, namespace: str | None, name: str, cached: dict | None,
                            change: Callable[[dict], dict | None], subresource: str | None = None,
                            protect: Callable[[dict], dict] = W.json_copy) -> dict | None:
    """Read-modify-write of one object, retried on conflict. The cached object saves the first
    read: if it is stale, the write it leads to fails with 409 and is made again from a live
    read. But a cache behind the API can also make a needed write look needless (a watch
    stalled or cut, our own last write not seen yet): "nothing to write" is trusted only when
    judged on a live read.

    The write is a JSON merge patch of what `change` changed, carrying the resourceVersion of the
    object it was computed from: the server refuses it with 409 if the object changed since, as
    it refuses a stale PUT, so nothing is ever written over a record the controller has not seen
    (issue 16: a PUT sent the whole object, managedFields and pod template included).

    `change` gets the object through `protect` - a copy deep enough that what change edits is
    not the original (W.status_copy for changes that only set status fields, identity for
    changes that build a new object) - so the patch is the difference between the two."""
    first = None
    if cached is not None:
        body = change(protect(cached))
        if body is not None:
            first = _Computed(cached, body)

    async def read():
        nonlocal first
        if first is not None:
            computed, first = first, None
            return computed
        return await kube.get(kind, namespace, name)

    async def send(computed: _Computed):
        return await kube.merge_patch(kind, namespace, name, computed.patch(), subresource)

    def guarded(obj):
        if isinstance(obj, _Computed):
            return obj
        body = change(protect(obj))
        return None if body is None else _Computed(obj, body)

    return await retry_on_conflict(read, guarded, send, attempts=8)


def merge_patch_between(old: dict, new: dict) -> dict:
    """The JSON merge patch (RFC 7386) that makes `new` of `old`: fields added or changed, fields
    removed as null, lists whole (a merge patch replaces a list)."""
    patch: dict = {}
    for key, value in new.items():
        before = old.get(key, _ABSENT)
        if before is _ABSENT or before != value:
            patch[key] = merge_patch_between(before, value) if isinstance(before, dict) and isinstance(
                value, dict) else value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


_ABSENT = object()


class _Computed:
    """A change worked out from `base` (the cached object, or a live read): `body` is the object as
    it is to be."""

    __slots__ = ("base", "body")

    def __init__(self, base: dict, body: dict) -> None:
        self.base, self.body = base, body

    def patch(self) -> dict:
        patch = merge_patch_between(self.base, self.body)
        patch["metadata"] = {**(patch.get("metadata") or {}),
                             "resourceVersion": self.base["metadata"]["resourceVersion"]}
        return patch


class WorkloadRecords:
    """The Workload of each tracked Job."""

    def __init__(self, kube: KubeApi, workloads: Informer) -> None:
        self.kube = kube
        self.cache = workloads
        # Workloads our creates returned, kept only until the watch brings them (issue 16: kept
        # for good, with managedFields, they were a quarter of the controller's memory)
        self._created: dict[str, dict] = {}
        workloads.add_handler(on_add=self._seen, on_update=lambda _old, new: self._seen(new), on_delete=self._seen)

    def _seen(self, wl: dict) -> None:
        self._created.pop(object_key(wl), None)

    def created(self, st: JobState, wl: dict) -> None:
        """Our create of `st`'s Workload returned `wl` (trimmed as the cache trims what it keeps)."""
        key = f"{st.namespace}/{st.wl_name}"
        if self.cache.get(key) is None:
            self._created[key] = self.cache.transform(wl) if self.cache.transform is not None else wl

    def get(self, st: JobState) -> dict | None:
        """The cached Workload; until the watch brings it, the one our create returned."""
        cached = self.cached(st)
        return cached if cached is not None else self._created.get(f"{st.namespace}/{st.wl_name}")

    def cached(self, st: JobState) -> dict | None:
        """The Workload as the watch last showed it (what the extender judges its pods by)."""
        return self.cache.get(f"{st.namespace}/{st.wl_name}")

    async def mark_evicted(self, st: JobState, reason: str, message: str,
                           preempted_reason: str | None = None, status_fields: dict | None = None) -> dict | None:
        """Evicted written, and in our cache at once - ahead of the watch (Informer.observe) - so
        the extender, which judges pods by this cache, refuses the Workload's pods from now on.
        None when there was nothing to mark."""
        marked = await self.update(st, lambda wl: W.evicted(wl, reason, message, preempted_reason, status_fields))
        if marked is not None:
            await self.cache.observe(marked)
        return marked

    def refuses_pods(self, st: JobState) -> bool:
        """The cache (the extender's) no longer lets the Workload's pods onto nodes."""
        return not W.lets_pods_in(self.cached(st))

    def uid(self, st: JobState | None) -> str:
        if st is None:
            return ""
        return st.wl_uid or (self.get(st) or {}).get("metadata", {}).get("uid", "")

    async def update(self, st: JobState, change: Callable[[dict], dict | None]) -> dict | None:
        """`change` edits only `status` fields (it sets them, and replaces lists rather than
        editing them in place)."""
        try:
            return await read_modify_write(self.kube, K.WORKLOADS, st.namespace, st.wl_name, self.get(st), change,
                                           "status", protect=W.status_copy)
        except Exception as exc:
            if is_status(exc, 404):
                return None  # the Job (and with it the Workload) is gone
            raise
