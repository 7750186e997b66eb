"""Pod groups as the controller sees them (Kueue's pod controller, group half): the pods that carry
one `kueue.x-k8s.io/pod-group-name` in a namespace, kept from the pods' watch events, and what
their one Workload is made of - its name (the group's), its owners (every pod, none the
controller), a pod set per role, whether the group is complete enough to be queued, finished.

A group has no object of its own in the API: PodGroupKind hands the controller's common path a
record built from its pods (group_object), keyed `namespace/group name`, and writes what that path
decides to each pod (run: JobSteering._update_group; stop: every pod deleted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.kinds.managed_kinds import (EnabledKinds, ManagedKind, PodKind, group_key, group_uid,
                                                          plain_group_key)
from gpuqueue.jobframework.integration import Finished, Integration
from gpuqueue.jobframework.kinds import pods as P
from gpuqueue.jobframework.managed import job_queue_name
from gpuqueue.jobframework.podset import PodSet, PodSetInfo
from gpuqueue.kube import object_key


def _created(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("name") or "")


FEWER_PODS = " has fewer runnable pods than expected"  # Kueue's words, after the group's name


@dataclass(frozen=True)
class PodGroup:
    namespace: str
    name: str
    pods: tuple[dict, ...]  # oldest first

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def workload_name(self) -> str:
        """Kueue names a group's Workload after the group."""
        return self.name

    def active(self) -> list[dict]:
        """Its runnable or succeeded pods (Kueue's runnableOrSucceededPods), oldest first."""
        return [p for p in self.pods if P.runnable_or_succeeded(p)]

    def problem(self) -> str | None:
        """Why no Workload can be made of it now, in Kueue's words (its ErrWorkloadCompose event),
        else None: a count or queue its pods disagree on, or fewer runnable pods than it counts
        (unless it asks for fast admission, as a StatefulSet's pods do)."""
        if not self.pods:
            return f"'{self.name}' group{FEWER_PODS}"
        first = self.pods[0]
        try:
            total = P.group_total_count(first)
        except ValueError as exc:
            return str(exc)
        queue = job_queue_name(first)
        for pod in self.pods[1:]:
            if (pod.get("status") or {}).get("phase") == "Failed":
                continue
            try:
                other = P.group_total_count(pod)
            except ValueError as exc:
                return str(exc)
            if other != total:
                return (f"pods '{first['metadata']['name']}' and '{pod['metadata']['name']}' has different "
                        f"'{P.GROUP_TOTAL_COUNT}' values: {total}!={other}")
            if job_queue_name(pod) != queue:
                return (f"pods '{first['metadata']['name']}' and '{pod['metadata']['name']}' has different queue "
                        f"names: {queue}!={job_queue_name(pod)}")
        if not self.active() or (not self.fast() and len(self.active()) < total):
            return f"'{self.name}' group{FEWER_PODS}"
        return None

    def incomplete(self) -> str | None:
        """Kueue's ErrWorkloadCompose Warning while the group waits for more pods (fewer runnable
        than its total count, no fast admission), else None."""
        problem = self.problem()
        return problem if problem is not None and problem.endswith(FEWER_PODS) else None

    def total_count(self) -> int:
        return P.group_total_count(self.pods[0])

    def members(self) -> list[dict]:
        """The pods its Workload counts: the oldest runnable ones up to its total count."""
        return self.active()[:self.total_count()]

    def excess(self) -> list[dict]:
        """Runnable pods beyond its total count, newest last (Kueue deletes them)."""
        return self.active()[self.total_count():]

    def fast(self) -> bool:
        return bool(self.pods) and P.GROUP_FAST_ADMISSION in ((self.pods[0].get("metadata") or {}).get("annotations") or {})

    def pod_sets(self) -> list[PodSet]:
        """A pod set per role hash, counting its members; with fast admission (a StatefulSet's),
        Kueue's: one pod set, the first runnable pod's role, of the group's total count."""
        if self.fast():
            first = P.group_pod_sets(self.active()[:1])
            return [PodSet(first[0].name, self.total_count(), first[0].template)] if first else []
        return P.group_pod_sets(self.members())

    def owner_references(self) -> list[dict]:
        """Every pod it counts owns its Workload, none as its controller (Kueue's); the pods
        beyond its count are deleted (PodGroupKind.excess)."""
        return [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                for p in self.members() if (p.get("metadata") or {}).get("uid")]

    def finished(self) -> Finished | None:
        return P.group_finished(self.pods) if self.pods else None

    def queue_name(self) -> str | None:
        return job_queue_name(self.pods[0]) if self.pods else None


class PodGroups:
    """The queued pods of groups, by group (`key_of` a pod), from the pods' watch events."""

    def __init__(self, key_of=plain_group_key) -> None:
        self.key_of = key_of
        self._pods: dict[str, dict[str, dict]] = {}  # group key -> pod key -> pod
        self._group_of: dict[str, str] = {}  # pod key -> group key
        self._told: dict[str, str] = {}  # pod uid -> the ErrWorkloadCompose message it was given

    def on_pod(self, pod: dict) -> set[str]:
        """The groups it changed (a pod may leave one: its label is immutable, but a new pod may
        take a deleted one's name)."""
        key = object_key(pod)
        changed = self._drop(key)
        group = self.key_of(pod)
        if group is not None:
            self._pods.setdefault(group, {})[key] = pod
            self._group_of[key] = group
            changed.add(group)
        return changed

    def on_pod_delete(self, pod: dict) -> set[str]:
        self._told.pop(pod["metadata"].get("uid", ""), None)
        return self._drop(object_key(pod))

    def compose_error(self, pod: dict) -> str | None:
        """What the pod is to be told of its group that cannot be queued yet (Kueue's
        ErrWorkloadCompose), once for each message."""
        group_key = self._group_of.get(object_key(pod))
        group = self.get(group_key) if group_key is not None else None
        message = group.incomplete() if group is not None else None
        uid = pod["metadata"].get("uid", "")
        if message is None or self._told.get(uid) == message:
            return None
        self._told[uid] = message
        return message

    def _drop(self, pod_key: str) -> set[str]:
        group = self._group_of.pop(pod_key, None)
        if group is None:
            return set()
        members = self._pods.get(group)
        if members is not None:
            members.pop(pod_key, None)
            if not members:
                del self._pods[group]
        return {group}

    def get(self, key: str) -> PodGroup | None:
        members = self._pods.get(key)
        if not members:
            return None
        namespace, name = key.split("/", 1)
        return PodGroup(namespace, name, tuple(sorted(members.values(), key=_created)))

    def groups(self) -> Iterable[PodGroup]:
        for key in list(self._pods):
            group = self.get(key)
            if group is not None:
                yield group


# -- the group as a kind the controller queues ---------------------------------------------------------

# A group has no API object: its record is kept under this kind (its key, its events' kind); its
# pods are read and written as pods.
GROUP_KIND = K.Kind("podgroups", "", "v1", "pods", True, "PodGroup")


def group_object(group: PodGroup) -> dict:
    """The group as the controller's common path reads an object of a kind: its metadata (the
    queue and priority labels of its first pod), its pods under `pods`."""
    first = group.pods[0]["metadata"] if group.pods else {}
    labels = {k: v for k, v in (first.get("labels") or {}).items() if k in (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL)}
    return {"apiVersion": "v1", "kind": GROUP_KIND.kind,
            "metadata": {"name": group.name, "namespace": group.namespace,
                         "uid": group_uid(group.namespace, group.name), "generation": 1,
                         "creationTimestamp": first.get("creationTimestamp"), "labels": labels},
            "pods": list(group.pods)}


def _group(obj: dict) -> PodGroup:
    meta = obj["metadata"]
    return PodGroup(meta["namespace"], meta["name"], tuple(obj.get("pods") or ()))


class GroupCache:
    """What the controller's common path reads a kind from (an informer's get and list), over
    the groups (every one: PodGroupKind.queued takes those whose Workload can be made)."""

    def __init__(self, groups: PodGroups) -> None:
        self.groups = groups

    def get(self, key: str) -> dict | None:
        group = self.groups.get(key)
        return group_object(group) if group is not None else None

    def list(self) -> list[dict]:
        return [group_object(g) for g in self.groups.groups()]


class PodGroupKind(ManagedKind):
    """A pod group of the pod integration (Kueue's pod controller, group half): one Workload named
    after the group, owned by every pod, a pod set per role; queued once the group is complete;
    run by ungating each pod with its role's flavor; stopped by deleting every pod."""

    deletes_to_stop = True
    workload_annotations = {P.IS_GROUP_WORKLOAD: "true"}

    def __init__(self, integration: Integration) -> None:
        super().__init__(integration)
        self.kind = GROUP_KIND
        self.groups = PodGroups()
        self.cache = GroupCache(self.groups)

    def cached(self, informers: dict) -> GroupCache:
        return self.cache

    def queued(self, obj: dict) -> bool:
        return bool(obj.get("pods")) and _group(obj).problem() is None

    def excess(self, obj: dict) -> list[dict]:
        """Its runnable pods beyond its total count (none while its pods disagree on the count)."""
        group = _group(obj)
        return group.excess() if group.pods and group.problem() is None else []

    def workload_name(self, obj: dict) -> str:
        return obj["metadata"]["name"]

    def owner_references(self, obj: dict) -> list[dict]:
        return _group(obj).owner_references()

    def _sets(self, obj: dict) -> list[PodSet]:
        return _group(obj).pod_sets()

    def _models(self, obj: dict, own: bool = False):
        return [(ps, self.template_model(ps.template, f"pod set {ps.name}: template")) for ps in self._sets(obj)]

    def workload_pod_sets(self, obj: dict) -> list[dict]:
        return [{"name": ps.name, "count": ps.count, "template": ps.template} for ps in self._sets(obj)]

    def priority_class_name(self, obj: dict) -> str | None:
        return next((ps.template["spec"].get("priorityClassName") for ps in self._sets(obj)
                     if ps.template["spec"].get("priorityClassName")), None)

    def members(self, obj: dict) -> list[dict]:
        """Every pod of it (deleted to stop it)."""
        return list(obj.get("pods") or ())

    @staticmethod
    def counted(obj: dict) -> list[dict]:
        """The pods its Workload counts (ungated to run it)."""
        return _group(obj).members()

    def releasable(self, obj: dict) -> list[dict]:
        return [p for p in obj.get("pods") or () if PodKind.finished_with(p)]

    def run(self, obj: dict, infos: dict[str, PodSetInfo]) -> dict | None:
        """The group with its infos attached when a pod of it is still gated (each pod is then
        ungated from a live read: run_pod)."""
        if not any(P.is_gated(p) for p in self.counted(obj)):
            return None
        return {**obj, "infos": infos}

    @staticmethod
    def run_pod(pod: dict, infos: dict[str, PodSetInfo]) -> dict | None:
        return P.ungated(pod, infos.get(P.pod_role(pod)))

    def suspend(self, obj: dict) -> dict | None:
        return None

    def restore(self, obj: dict) -> dict | None:
        return None

    def suspended(self, obj: dict) -> bool:
        return all(P.is_gated(p) or P.is_terminated(p) for p in obj.get("pods") or ())

    def held(self, obj: dict) -> bool:
        """A pod it counts is still gated (a pod that joined after its admission, with fast admission)."""
        return any(P.is_gated(p) for p in self.counted(obj))

    def stopped(self, obj: dict) -> bool:
        """Every pod of it gated or holding nothing (terminated, or deleted before it got a node)."""
        return all(P.is_gated(p) or P.holds_nothing(p) for p in obj.get("pods") or ())

    def finished(self, obj: dict) -> Finished | None:
        return _group(obj).finished()


def with_groups(enabled: EnabledKinds) -> EnabledKinds:
    """The pod integration queues pod groups too: a PodGroupKind beside its PodKind."""
    for kind in list(enabled.managed):
        if isinstance(kind, PodKind):
            enabled.managed.append(PodGroupKind(kind.integration))
    return enabled
