"""The controller's answers to the events of pod groups (plain groups, LeaderWorkerSet groups),
which have no object of their own: a pod or a LeaderWorkerSet changed, its group judged again as
a whole; the pods beyond a group's count deleted; Kueue's ErrWorkloadCompose told to the pods of a
group short of pods; Kueue's finalizer released from a pod that holds nothing. A part of
Controller (a mixin over its caches, engine and writers), kept apart for its size."""

from __future__ import annotations

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller.kubeapi import is_status
from gpuqueue.extender.controller.lws_groups import LwsGroupKind
from gpuqueue.extender.controller.pod_groups import PodGroupKind
from gpuqueue.extender.controller.records import read_modify_write
from gpuqueue.extender.controller.managed_kinds import without_finalizer


class PodGroupEvents:
    def _on_lws(self, lws: dict, kind: LwsGroupKind) -> None:
        """A LeaderWorkerSet seen or changed: its groups are judged again (its pods may have come first)."""
        meta = lws["metadata"]
        prefix = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}-"
        self._on_groups({g.key for g in kind.groups.groups()
                         if g.key.startswith(prefix) and g.key[len(prefix):].isdigit()}, kind)

    def _on_group_pod(self, pod: dict, kind: PodGroupKind, gone: bool) -> None:
        """A pod of a group changed: its group is judged again as a whole (a group has no object
        of its own); a group whose pods are all gone departs as a deleted object does."""
        self._on_groups(kind.groups.on_pod_delete(pod) if gone else kind.groups.on_pod(pod), kind)
        group = kind.groups.key_of(pod)
        if not gone and group is not None and self.recovered and self.kinds_by_kind.get(kind.kind.kind) is kind \
                and self.jobs.get(kind.key(*group.split("/", 1))) is None:  # (Kueue: only while none is made)
            message = kind.groups.compose_error(pod)
            if message is not None:
                meta = pod["metadata"]
                self.events.on_pod(meta["namespace"], meta["name"], meta.get("uid", ""), "ErrWorkloadCompose", message)

    def _on_groups(self, changed: set[str], kind: PodGroupKind) -> None:
        if not self.recovered or self.kinds_by_kind.get(kind.kind.kind) is not kind:
            return
        for key in changed:
            obj = kind.cache.get(key)
            if obj is not None:
                self._on_job(obj, kind=kind)
                self.job_steering.delete_excess(kind.excess(obj))
                st = self.jobs.get(kind.key(obj["metadata"]["namespace"], obj["metadata"]["name"]))
                wl = self.owned.find(obj["metadata"]["namespace"], obj["metadata"]["uid"], st.wl_name) if st else None
                if wl is not None and {r["uid"] for r in kind.owner_references(obj)} - {
                        r.get("uid") for r in wl["metadata"].get("ownerReferences") or ()}:
                    self.workload_writes.add_owners(st)
                continue
            namespace, name = key.split("/", 1)
            st = self.jobs.get(kind.key(namespace, name))
            if st is not None:
                self._depart(st)
                self.mark_dirty()

    def _release_pod(self, key: str, pod: dict) -> None:
        """Kueue's finalizer off a pod that holds nothing any more, after whatever its Workload's
        writes are (its end is recorded first; a deleted pod then goes, and its Workload with it)."""
        uid = pod["metadata"]["uid"]

        async def write():
            def change(live: dict) -> dict | None:
                return without_finalizer(live) if live["metadata"].get("uid") == uid else None
            try:
                await read_modify_write(self.kube, K.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"],
                                        None, change)
            except Exception as exc:
                if not is_status(exc, 404):
                    raise

        self.writes.chain(key, write)
