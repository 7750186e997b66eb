"""The Workloads of each owner, by the owner's UID (its `kueue.x-k8s.io/job-uid` label, or its
controller ownerReference), not by name: a Workload keeps the name it was created with, so
Workloads created before gpuqueue took Kueue's names (`job-<name>-<sha256(uid)[:5]>`) are still
found, kept and not duplicated after an upgrade."""

from __future__ import annotations

from gpuqueue.api.kueue import JOB_UID_LABEL
from gpuqueue.kube import Informer, object_key


def owner_uids(wl: dict) -> set[str]:
    meta = wl.get("metadata") or {}
    uids = {ref.get("uid") for ref in meta.get("ownerReferences") or () if ref.get("controller") and ref.get("uid")}
    label = (meta.get("labels") or {}).get(JOB_UID_LABEL)
    if label:
        uids.add(label)
    return uids


class OwnedWorkloads:
    def __init__(self, workloads: Informer) -> None:
        """Register before any other handler of `workloads`: they may ask it about the Workload
        their event is for."""
        self.cache = workloads
        self._by_owner: dict[str, set[str]] = {}
        self._owners_of: dict[str, set[str]] = {}
        workloads.add_handler(on_add=self._put, on_update=lambda old, new: self._put(new), on_delete=self._drop)

    def _put(self, wl: dict) -> None:
        self._drop(wl)
        key = object_key(wl)
        uids = owner_uids(wl)
        self._owners_of[key] = uids
        for uid in uids:
            self._by_owner.setdefault(uid, set()).add(key)

    def _drop(self, wl: dict) -> None:
        key = object_key(wl)
        for uid in self._owners_of.pop(key, ()):
            keys = self._by_owner.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_owner[uid]

    def of(self, namespace: str, uid: str) -> list[dict]:
        """The cached Workloads of the owner with that UID, in its namespace."""
        out = []
        for key in sorted(self._by_owner.get(uid, ())):
            wl = self.cache.get(key)
            if wl is not None and wl["metadata"].get("namespace") == namespace:
                out.append(wl)
        return out

    def find(self, namespace: str, uid: str, name: str) -> dict | None:
        """The owner's Workload: the one named `name` (Kueue's name) if there is one, else the
        oldest (one created under an earlier name). A second one is the controller's to judge
        (delete_extra)."""
        found = self.of(namespace, uid)
        for wl in found:
            if wl["metadata"]["name"] == name:
                return wl
        if not found:
            return None
        return min(found, key=lambda wl: (wl["metadata"].get("creationTimestamp") or "", wl["metadata"]["name"]))
