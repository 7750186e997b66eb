"""Pod groups as the controller sees them (Kueue's pod controller, group half): the pods that carry
one `kueue.x-k8s.io/pod-group-name` in a namespace, kept from the pods' watch events, and what
their one Workload is made of - its name (the group's), its owners (every pod, none the
controller), a pod set per role, whether the group is complete enough to be queued, finished.

This is the record a group's Workload is built from; a group has no object of its own in the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from gpuqueue.jobframework.kinds import pods as P
from gpuqueue.jobframework.managed import job_queue_name
from gpuqueue.jobframework.podset import PodSet
from gpuqueue.jobframework.integration import Finished
from gpuqueue.kube import object_key


def group_key(pod: Mapping[str, Any]) -> str | None:
    """`namespace/group name` of a queued pod of a group (the webhook's managed label), else None."""
    meta = pod.get("metadata") or {}
    name = P.group_name(pod)
    if not name or (meta.get("labels") or {}).get(P.MANAGED_LABEL) != "true":
        return None
    return f"{meta.get('namespace') or ''}/{name}"


def _created(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("name") or "")


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
            return f"'{self.name}' group has fewer runnable pods than expected"
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
        fast = P.GROUP_FAST_ADMISSION in ((first.get("metadata") or {}).get("annotations") or {})
        if not fast and len(self.active()) < total:
            return f"'{self.name}' group has fewer runnable pods than expected"
        return None

    def total_count(self) -> int:
        return P.group_total_count(self.pods[0])

    def members(self) -> list[dict]:
        """The pods its Workload counts: the oldest runnable ones up to its total count."""
        return self.active()[:self.total_count()]

    def excess(self) -> list[dict]:
        """Runnable pods beyond its total count, newest last (Kueue deletes them)."""
        return self.active()[self.total_count():]

    def pod_sets(self) -> list[PodSet]:
        """A pod set per role hash, counting its members."""
        return P.group_pod_sets(self.members())

    def owner_references(self) -> list[dict]:
        """Every pod of it owns its Workload, none as its controller (Kueue's)."""
        return [{"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                for p in self.pods if (p.get("metadata") or {}).get("uid")]

    def finished(self) -> Finished | None:
        return P.group_finished(self.pods) if self.pods else None

    def queue_name(self) -> str | None:
        return job_queue_name(self.pods[0]) if self.pods else None


class PodGroups:
    """The queued pods of groups, by group, from the pods' watch events."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, dict]] = {}  # group key -> pod key -> pod
        self._group_of: dict[str, str] = {}  # pod key -> group key

    def on_pod(self, pod: dict) -> set[str]:
        """The groups it changed (a pod may leave one: its label is immutable, but a new pod may
        take a deleted one's name)."""
        key = object_key(pod)
        changed = self._drop(key)
        group = group_key(pod)
        if group is not None:
            self._pods.setdefault(group, {})[key] = pod
            self._group_of[key] = group
            changed.add(group)
        return changed

    def on_pod_delete(self, pod: dict) -> set[str]:
        return self._drop(object_key(pod))

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
