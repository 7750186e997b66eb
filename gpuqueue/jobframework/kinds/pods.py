"""The kinds without a suspend flag, held by Kueue's pod integration: each pod is created with the
scheduling gate ``kueue.x-k8s.io/admission`` (the pod webhook's CREATE mutation, ``gated``), waits
SchedulingGated, and admission removes the gate with the flavor's nodeSelector and tolerations
(``ungated``; Kubernetes lets a gated pod's nodeSelector grow and any pod's tolerations grow).
Eviction deletes the pods: there is nothing to restore. Scheduling gates need Kubernetes 1.27
(beta, on by default; 1.26 alpha behind a feature gate): Kueue refuses to enable the pod
integration on older clusters (``pod integration only supported in Kubernetes 1.27 or newer``).

- ``Pod`` ("pod"): a plain pod is its own Workload ``pod-<name>-<hash>`` with one pod set
  ``main`` of 1. Pods labelled ``kueue.x-k8s.io/pod-group-name`` with the annotation
  ``kueue.x-k8s.io/pod-group-total-count`` form one Workload named as the group; its pod sets
  are the pods' roles (``kueue.x-k8s.io/role-hash``, written on CREATE), each counting the group's
  runnable pods of that role, sorted by name. The group Workload is owned by every pod of it.
- ``Deployment`` ("deployment"): its pod template is marked so that each pod is queued as a plain
  pod (Kueue's ``kueue.x-k8s.io/pod-suspending-parent: deployment`` and the queue label).
- ``StatefulSet`` ("statefulset"): its pods form one group, ``statefulset-<name>-<hash>``, of
  ``replicas`` pods (serving: it never finishes).
- ``LeaderWorkerSet`` ("leaderworkerset.x-k8s.io/leaderworkerset"): one Workload per replica
  (group of ``size`` pods), ``leaderworkerset-<name>-<index>-<hash>``; pod sets ``leader`` (1) and
  ``worker`` (size - 1) with a leader template, else ``main`` (size). Its pods (made by LWS through
  StatefulSets) are gated and named into their group's Workload by label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.jobframework.integration import (Finished, GATE, Integration, PodFacts, count_of, get_path,
                                               json_copy)
from gpuqueue.jobframework.names import role_hash, workload_name
from gpuqueue.jobframework.podset import PodSet, PodSetInfo, merged_template

SCHEDULING_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"  # also the pods' finalizer
GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ROLE_HASH = "kueue.x-k8s.io/role-hash"
SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
GROUP_FAST_ADMISSION = "kueue.x-k8s.io/pod-group-fast-admission"
GROUP_SERVING = "kueue.x-k8s.io/pod-group-serving"
RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"  # "false": a failed pod is not replaced
POD_INDEX_LABEL_ANNOTATION = "kueue.x-k8s.io/pod-group-pod-index-label"
IS_GROUP_WORKLOAD = "kueue.x-k8s.io/is-group-workload"
MAIN = "main"
LEADER, WORKER = "leader", "worker"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0": the group's leader


# -- one pod -------------------------------------------------------------------------------------------

def is_gated(pod: Mapping[str, Any]) -> bool:
    return any((g or {}).get("name") == SCHEDULING_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or ())


def is_terminated(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def never_runs(pod: Mapping[str, Any]) -> bool:
    """Deleted before it got a node: the API server binds no pod that is being deleted, and no
    kubelet will ever act on it (its phase stays Pending until it is gone)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return bool(meta.get("deletionTimestamp")) and not spec.get("nodeName")


def holds_nothing(pod: Mapping[str, Any]) -> bool:
    """Uses no node's resources now and never will: terminated, or deleted before it got a node."""
    return is_terminated(pod) or never_runs(pod)


def ended(pod: Mapping[str, Any]) -> bool:
    """What the controller counts as ended: terminated, or, for a pod Kueue's finalizer keeps (the
    pod integration's, which only the controller lets go), deleted before it got a node. Any other
    pod deleted unbound is removed by the API server and its own controller, and is waited for."""
    return is_terminated(pod) or (never_runs(pod) and MANAGED_LABEL in ((pod.get("metadata") or {}).get(
        "finalizers") or ()))


def gated(pod: Mapping[str, Any]) -> dict | None:
    """The pod as the webhook admits it on CREATE: gated, labelled managed, with Kueue's
    finalizer (so its end is seen even when it is deleted at once), its role hash when in a
    group. None when it already is so."""
    out = json_copy(pod)
    meta = out.setdefault("metadata", {})
    spec = out.setdefault("spec", {})
    if not is_gated(out):
        spec.setdefault("schedulingGates", []).append({"name": SCHEDULING_GATE})
    meta.setdefault("labels", {})[MANAGED_LABEL] = "true"
    if MANAGED_LABEL not in (meta.get("finalizers") or ()):
        meta.setdefault("finalizers", []).append(MANAGED_LABEL)
    if (meta.get("labels") or {}).get(GROUP_NAME_LABEL) and ROLE_HASH not in (meta.get("annotations") or {}):
        meta.setdefault("annotations", {})[ROLE_HASH] = role_hash(spec)
    return None if out == pod else out


def ungated(pod: Mapping[str, Any], info: PodSetInfo | None) -> dict | None:
    """The gate removed, the admitted flavor injected (None: not gated)."""
    if not is_gated(pod):
        return None
    out = merged_template(pod, info) if info is not None else json_copy(pod)
    gates = [g for g in out["spec"].get("schedulingGates") or () if (g or {}).get("name") != SCHEDULING_GATE]
    if gates:
        out["spec"]["schedulingGates"] = gates
    else:
        out["spec"].pop("schedulingGates", None)
    return out


def group_name(pod: Mapping[str, Any]) -> str | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(GROUP_NAME_LABEL)
    return value if isinstance(value, str) and value else None


def group_total_count(pod: Mapping[str, Any]) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(GROUP_TOTAL_COUNT)
    where = f"metadata.annotations[{GROUP_TOTAL_COUNT}]"
    if raw is None:
        raise ValueError(f"{where}: Required value (a pod of group {group_name(pod)!r})")
    try:
        count = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: must be a whole number, got {raw!r}") from None
    if count < 1:
        raise ValueError(f"{where}: group total count should be greater than zero, got {raw!r}")
    return count


def lws_group(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(LeaderWorkerSet name, group index) of a pod the LWS controller made, from its labels."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    name, index = labels.get(LWS_NAME_LABEL), labels.get(LWS_GROUP_INDEX_LABEL)
    if isinstance(name, str) and name and isinstance(index, str) and index.isdigit():
        return name, index
    return None


def lws_role(pod: Mapping[str, Any], has_leader: bool) -> str:
    """Its pod set in its group's Workload: `leader` (worker index 0) or `worker`; `main` without a
    leader template."""
    if not has_leader:
        return MAIN
    return LEADER if ((pod.get("metadata") or {}).get("labels") or {}).get(LWS_WORKER_INDEX_LABEL) == "0" else WORKER


def pod_role(pod: Mapping[str, Any]) -> str:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ROLE_HASH) or role_hash(pod.get("spec") or {})


def runnable_or_succeeded(pod: Mapping[str, Any]) -> bool:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if meta.get("deletionTimestamp") and not spec.get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") != "Failed"


def group_pod_sets(pods: Iterable[Mapping[str, Any]]) -> list[PodSet]:
    """A pod group's pod sets: one per role, counting its runnable (or succeeded) pods."""
    by_role: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for pod in pods:
        if not runnable_or_succeeded(pod):
            continue
        role = pod_role(pod)
        count, template = by_role.get(role, (0, {"spec": json_copy(pod.get("spec") or {})}))
        by_role[role] = (count + 1, template)
    return [PodSet(role, count, template) for role, (count, template) in sorted(by_role.items())]


def group_finished(pods: Iterable[Mapping[str, Any]]) -> Finished | None:
    """Kueue's rule: finished when as many pods succeeded as the group counts - or, for a group a
    pod of which says `kueue.x-k8s.io/retriable-in-group: "false"`, once every pod has terminated
    (no failed pod of it is replaced; its Workload, finished, gives its quota back). Kueue writes
    both with reason Succeeded and the count that did succeed."""
    pods = list(pods)
    if not pods:
        return None
    total = group_total_count(pods[0])
    succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
    unretriable = any(((p.get("metadata") or {}).get("annotations") or {}).get(RETRIABLE_IN_GROUP) == "false"
                      for p in pods)
    if succeeded < total and not (unretriable and all(is_terminated(p) for p in pods)):
        return None
    return Finished(True, f"Pods succeeded: {succeeded}/{total}.")


class Pod(Integration):
    framework = "pod"
    group, version, kind, plural = "", "v1", "Pod", "pods"
    hold = GATE
    pod_keys = (GROUP_NAME_LABEL, ROLE_HASH)

    def workload_name(self, obj):
        return group_name(obj) or super().workload_name(obj)

    def pod_sets(self, obj, lookup=None):
        """A single pod's (a group's: ``group_pod_sets`` over its pods)."""
        return [PodSet(MAIN, 1, {"spec": json_copy(obj.get("spec") or {})})]

    def is_suspended(self, obj):
        return is_gated(obj) or is_terminated(obj)

    def finished(self, obj):
        phase = (obj.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed"):
            return None
        return Finished(phase == "Succeeded", (obj.get("status") or {}).get("message") or "")

    def is_active(self, obj):
        return (obj.get("status") or {}).get("phase") == "Running"

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return pod_set_of_pod(pod)


def pod_set_of_pod(pod: PodFacts) -> str | None:
    """A queued pod's pod set: ``main`` alone, its role in a group."""
    if pod.labels.get(GROUP_NAME_LABEL) or pod.labels.get(LWS_NAME_LABEL):
        return pod.annotations.get(ROLE_HASH) or None
    return MAIN


class PodTemplateOwner(Integration):
    """A kind whose pods the pod integration queues: its own object is never suspended, its pod
    template is marked on CREATE (``marked``) so that its pods are."""

    hold = GATE
    pod_keys = Pod.pod_keys
    template_paths: tuple[tuple, ...] = (("spec", "template"),)

    def marked(self, obj: Mapping[str, Any], queue_name: str | None) -> dict | None:
        out = json_copy(obj)
        for path in self.template_paths:
            template = get_path(out, path, required=False)
            if template is None:
                continue
            meta = template.setdefault("metadata", {})
            meta.setdefault("annotations", {})[SUSPENDING_PARENT] = self.framework
            if queue_name:
                meta.setdefault("labels", {})[QUEUE_NAME_LABEL] = queue_name
            self.mark_template(obj, meta, queue_name)
        return None if out == obj else out

    def mark_template(self, obj: Mapping[str, Any], meta: dict, queue_name: str | None) -> None:
        """More the kind writes into its pod template's metadata."""

    def is_suspended(self, obj):
        return False

    def finished(self, obj):
        return None  # serving: it runs until deleted

    def is_active(self, obj):
        return bool((obj.get("status") or {}).get("readyReplicas"))

    def pod_set_of(self, pod: PodFacts) -> str | None:
        return pod_set_of_pod(pod)


class Deployment(PodTemplateOwner):
    framework = "deployment"
    group, version, kind, plural = "apps", "v1", "Deployment", "deployments"

    def workload_name(self, obj):
        raise ValueError("each pod of a Deployment is a Workload of its own (pod-<pod name>-<hash>)")

    def pod_sets(self, obj, lookup=None):
        """What each of its pods asks for (each pod is a Workload of its own)."""
        return [PodSet(MAIN, 1, get_path(obj, ("spec", "template")))]


class StatefulSet(PodTemplateOwner):
    framework = "statefulset"
    group, version, kind, plural = "apps", "v1", "StatefulSet", "statefulsets"

    def workload_name(self, obj):
        # Named before the StatefulSet has a uid (its webhook writes it into the pod template).
        return workload_name(self.kind, self.group, (obj.get("metadata") or {}).get("name") or "", "")

    def replicas(self, obj) -> int:
        return count_of((obj.get("spec") or {}).get("replicas"), "spec.replicas")

    def mark_template(self, obj, meta, queue_name):
        if not queue_name:
            return
        meta["labels"][GROUP_NAME_LABEL] = self.workload_name(obj)
        annotations = meta["annotations"]
        annotations[GROUP_TOTAL_COUNT] = str(self.replicas(obj))
        annotations[GROUP_FAST_ADMISSION] = "true"
        annotations[GROUP_SERVING] = "true"
        annotations[POD_INDEX_LABEL_ANNOTATION] = "apps.kubernetes.io/pod-index"

    def pod_sets(self, obj, lookup=None):
        template = get_path(obj, ("spec", "template"))
        return [PodSet(role_hash(template.get("spec") or {}), self.replicas(obj), template)]


class LeaderWorkerSet(PodTemplateOwner):
    framework = "leaderworkerset.x-k8s.io/leaderworkerset"
    group, version, kind, plural = "leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"
    template_paths = (("spec", "leaderWorkerTemplate", "leaderTemplate"),
                      ("spec", "leaderWorkerTemplate", "workerTemplate"))

    def replicas(self, obj) -> int:
        return count_of((obj.get("spec") or {}).get("replicas"), "spec.replicas")

    def workload_names(self, obj) -> list[str]:
        """One per replica (group of pods)."""
        return [self.group_workload_name(obj, str(i)) for i in range(self.replicas(obj))]

    def group_workload_name(self, obj, index: str) -> str:
        meta = obj.get("metadata") or {}
        return workload_name(self.kind, self.group, f"{meta.get('name') or ''}-{index}", meta.get("uid") or "")

    def size(self, obj) -> int:
        return count_of(get_path(obj, ("spec", "leaderWorkerTemplate")).get("size"), "spec.leaderWorkerTemplate.size")

    def has_leader(self, obj) -> bool:
        return get_path(obj, ("spec", "leaderWorkerTemplate")).get("leaderTemplate") is not None

    def workload_name(self, obj):
        raise ValueError("a LeaderWorkerSet has one Workload per replica: see workload_names")

    def pod_sets(self, obj, lookup=None):
        """The pod sets of each of its groups."""
        lwt = get_path(obj, ("spec", "leaderWorkerTemplate"))
        size = count_of(lwt.get("size"), "spec.leaderWorkerTemplate.size")
        worker = get_path(obj, ("spec", "leaderWorkerTemplate", "workerTemplate"))
        if lwt.get("leaderTemplate") is None:
            return [PodSet(MAIN, size, worker)]
        return [PodSet(LEADER, 1, lwt["leaderTemplate"]), PodSet(WORKER, size - 1, worker)]
