"""A LeaderWorkerSet's groups as the controller queues them (Kueue's LeaderWorkerSet integration
over its pod group machinery): the pods of one group - the LWS controller's labels
`leaderworkerset.sigs.k8s.io/name` and `group-index` - are one pod group (pod_groups.py) of the
LeaderWorkerSet's `size` pods, its Workload named as `LeaderWorkerSet.workload_names` names it
(`leaderworkerset-<name>-<index>-<hash>`), controlled by the LeaderWorkerSet and owned by the
group's pods, pod sets `leader` (the pod of worker index 0) and `worker`, or `main` without a
leader template. Its pods stay gated until it is admitted; each is ungated with its pod set's
flavor and annotated with its pod set (`kueue.x-k8s.io/role-hash`, which the extender reads);
evicted, every pod is deleted. A group whose LeaderWorkerSet is not in the cache is not queued
(its pods stay gated).
"""

from __future__ import annotations

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.kinds.managed_kinds import EnabledKinds, kind_of, lws_group_key
from gpuqueue.extender.controller.kinds.pod_groups import GroupCache, PodGroupKind, PodGroups, group_object
from gpuqueue.jobframework import registry
from gpuqueue.jobframework.integration import json_copy
from gpuqueue.jobframework.kinds import pods as P
from gpuqueue.jobframework.podset import PodSetInfo

LWS = registry.BY_FRAMEWORK["leaderworkerset.x-k8s.io/leaderworkerset"]
LWS_KIND = kind_of(LWS)
# A group's record (as pod_groups.GROUP_KIND): its pods are read and written as pods.
LWS_GROUP_KIND = K.Kind("leaderworkersetgroups", "", "v1", "pods", True, "LeaderWorkerSetGroup")


class LwsGroupCache(GroupCache):
    """The groups as records, each with its LeaderWorkerSet (`lws`, from its informer) and its
    pods as the pod group machinery reads them: each annotated with its pod set (role) and the
    group's count (the LeaderWorkerSet's size), as Kueue's LWS pod webhook labels them."""

    def __init__(self, groups: PodGroups) -> None:
        super().__init__(groups)
        self.lws_cache = None  # the LeaderWorkerSets' informer (bind)

    def get(self, key: str) -> dict | None:
        group = self.groups.get(key)
        return self.record(group) if group is not None else None

    def list(self) -> list[dict]:
        return [self.record(g) for g in self.groups.groups()]

    def record(self, group) -> dict:
        obj = group_object(group)
        name, index = group.name.rsplit("-", 1)
        lws = self.lws_cache.get(f"{group.namespace}/{name}") if self.lws_cache is not None else None
        obj["lwsIndex"] = index
        if lws is None:
            return obj
        try:
            size, has_leader = LWS.size(lws), LWS.has_leader(lws)
        except ValueError:
            return obj  # (its webhook refuses such a LeaderWorkerSet)
        obj["lws"] = lws
        obj["pods"] = [_as_grouped(p, P.lws_role(p, has_leader), size) for p in obj["pods"]]
        return obj


def _as_grouped(pod: dict, role: str, size: int) -> dict:
    out = json_copy(pod)
    annotations = out["metadata"].setdefault("annotations", {})
    annotations[P.ROLE_HASH] = role
    annotations[P.GROUP_TOTAL_COUNT] = str(size)
    return out


class LwsGroupKind(PodGroupKind):
    """One group of a LeaderWorkerSet, queued as a pod group with the LeaderWorkerSet's name,
    count and ownership."""

    def __init__(self, integration) -> None:
        super().__init__(integration)
        self.kind = LWS_GROUP_KIND
        self.groups = PodGroups(lws_group_key)
        self.cache = LwsGroupCache(self.groups)
        self.records: dict[tuple[str, str], str] = {}  # (namespace, Workload name) -> group record name

    def bind(self, informers: dict) -> None:
        self.cache.lws_cache = informers.get(LWS_KIND.name)

    def queued(self, obj: dict) -> bool:
        return obj.get("lws") is not None and super().queued(obj)

    def workload_name(self, obj: dict) -> str:
        meta = obj["metadata"]
        name = LWS.group_workload_name(obj["lws"], obj["lwsIndex"])
        self.records[(meta["namespace"], name)] = meta["name"]
        return name

    def record_name(self, namespace: str, workload_name: str) -> str | None:
        """The group whose Workload this is (named by workload_name)."""
        return self.records.get((namespace, workload_name))

    def owner_references(self, obj: dict) -> list[dict]:
        if obj.get("lws") is None:
            return super().owner_references(obj)
        meta = obj["lws"]["metadata"]
        return [{"apiVersion": LWS_KIND.api_version, "kind": LWS_KIND.kind, "name": meta["name"],
                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True},
                *super().owner_references(obj)]

    def run_pod(self, pod: dict, infos: dict[str, PodSetInfo]) -> dict | None:  # type: ignore[override]
        """Ungated with its pod set's flavor, annotated with its pod set (from a live read, which
        carries neither)."""
        role = P.MAIN if P.MAIN in infos else P.lws_role(pod, True)
        out = P.ungated(pod, infos.get(role))
        if out is None:
            return None
        meta = out["metadata"]
        return {**out, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), P.ROLE_HASH: role}}}


def with_lws_groups(enabled: EnabledKinds, frameworks) -> EnabledKinds:
    """The pod integration queues a LeaderWorkerSet's groups when LeaderWorkerSets are enabled;
    their LeaderWorkerSets are watched (needs)."""
    if LWS.framework in frameworks:
        enabled.managed.append(LwsGroupKind(LWS))
        enabled.needs[LWS.framework] = [LWS_KIND]
    return enabled
