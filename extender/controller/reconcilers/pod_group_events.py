"""The pod group reconciler, for the groups that have no object of their own (plain pod groups,
LeaderWorkerSet groups): a pod or a LeaderWorkerSet changed, its group judged again as a whole
by the Job reconciler; the pods beyond a group's count deleted; Kueue's ErrWorkloadCompose told
to the pods of a group short of pods. It keeps no state of its own: the groups are the kinds'
(PodGroupKind.groups), the tracked Jobs the Job reconciler's."""

from __future__ import annotations

from typing import Callable

from gpuqueue.extender.controller.writes.events import EventRecorder
from gpuqueue.extender.controller.reconcilers.job_reconciler import JobReconciler
from gpuqueue.extender.controller.core.job_state import Scheduling
from gpuqueue.extender.controller.writes.jobs import JobSteering
from gpuqueue.extender.controller.kinds.lws_groups import LwsGroupKind
from gpuqueue.extender.controller.core.owned_workloads import OwnedWorkloads
from gpuqueue.extender.controller.kinds.pod_groups import PodGroupKind
from gpuqueue.extender.controller.writes.workload_writes import WorkloadWrites


class PodGroupReconciler:
    def __init__(self, sched: Scheduling, job_reconciler: JobReconciler, owned: OwnedWorkloads, job_steering: JobSteering,
                 workload_writes: WorkloadWrites, events: EventRecorder, mark_dirty: Callable[[], None]) -> None:
        self.sched = sched
        self.job_reconciler = job_reconciler
        self.owned = owned
        self.job_steering = job_steering
        self.workload_writes = workload_writes
        self.events = events
        self.mark_dirty = mark_dirty

    def on_lws(self, lws: dict, kind: LwsGroupKind) -> None:
        """A LeaderWorkerSet seen or changed: its groups are judged again (its pods may have come first)."""
        meta = lws["metadata"]
        prefix = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}-"
        self.on_groups({g.key for g in kind.groups.groups()
                        if g.key.startswith(prefix) and g.key[len(prefix):].isdigit()}, kind)

    def on_group_pod(self, pod: dict, kind: PodGroupKind, gone: bool) -> None:
        """A pod of a group changed: its group is judged again as a whole (a group has no object
        of its own); a group whose pods are all gone departs as a deleted object does."""
        self.on_groups(kind.groups.on_pod_delete(pod) if gone else kind.groups.on_pod(pod), kind)
        group = kind.groups.key_of(pod)
        if not gone and group is not None and self.sched.recovered \
                and self.sched.kinds_by_kind.get(kind.kind.kind) is kind \
                and self.sched.jobs.get(kind.key(*group.split("/", 1))) is None:  # (Kueue: only while none is made)
            message = kind.groups.compose_error(pod)
            if message is not None:
                meta = pod["metadata"]
                self.events.on_pod(meta["namespace"], meta["name"], meta.get("uid", ""), "ErrWorkloadCompose", message)

    def on_groups(self, changed: set[str], kind: PodGroupKind) -> None:
        if not self.sched.recovered or self.sched.kinds_by_kind.get(kind.kind.kind) is not kind:
            return
        for key in changed:
            obj = kind.cache.get(key)
            if obj is not None:
                self.job_reconciler.on_job(obj, kind=kind)
                self.job_steering.delete_excess(kind.excess(obj))
                st = self.sched.jobs.get(kind.key(obj["metadata"]["namespace"], obj["metadata"]["name"]))
                wl = self.owned.find(obj["metadata"]["namespace"], obj["metadata"]["uid"], st.wl_name) if st else None
                if wl is not None and {r["uid"] for r in kind.owner_references(obj)} - {
                        r.get("uid") for r in wl["metadata"].get("ownerReferences") or ()}:
                    self.workload_writes.add_owners(st)
                continue
            namespace, name = key.split("/", 1)
            st = self.sched.jobs.get(kind.key(namespace, name))
            if st is not None:
                self.job_reconciler.depart(st)
                self.mark_dirty()
