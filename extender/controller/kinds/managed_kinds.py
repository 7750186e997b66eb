"""A workload kind as the controller manages it (Kueue's GenericJob inside its reconciler): the
integration of gpuqueue/jobframework/ (pod sets, suspend, run with the admitted flavors,
restore, finished) with what the controller adds around it - the engine's pod sets, computed
once per distinct pod template, the priority, where the kind lives on the REST path, and which
of its objects a pod belongs to.

Every edit returns a new object, or None when the object already is so, and leaves the one it
is given as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import hashlib

import orjson
from pydantic import ValidationError

from gpuqueue.api import core
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota.model import Admission, FlavorSpec, PodSetSpec
from gpuqueue.jobframework import registry
from gpuqueue.jobframework.integration import SUSPEND, Finished, Integration, Lookup, TemplatedJob, dotted
from gpuqueue.jobframework.kinds import pods
from gpuqueue.jobframework.kinds.trainjob import CLUSTER_RUNTIME, NAMESPACED_RUNTIME
from gpuqueue.jobframework.managed import job_queue_name
from gpuqueue.jobframework.podset import PodSet, PodSetInfo
from gpuqueue.jobframework.registry import IntegrationsConfig

if TYPE_CHECKING:
    from gpuqueue.kube import Informer

# A Job's UID on its pods, kept when the Job is deleted with its pods orphaned (which drops their
# ownerReferences): the legacy label and the one Kubernetes 1.27 added.
JOB_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
_TEMPLATE_CACHE_SIZE = 4096


def kind_of(integration: Integration) -> K.Kind:
    return K.Kind(integration.plural, integration.group, integration.version, integration.plural,
                  integration.namespaced, integration.kind)


class ManagedKind:
    # A pod cannot be suspended: stopping one deletes it (Kueue's pod integration), and its cached
    # copy is trimmed (cached_fields.py), so it is written from a live read only.
    deletes_to_stop = False
    workload_annotations: dict[str, str] = {}  # on its Workload (a pod group's: Kueue's is-group-workload)

    def __init__(self, integration: Integration) -> None:
        self.integration = integration
        self.lookup: Lookup | None = None  # what its pod sets are read from besides itself (a TrainJob's runtime)
        self.kind = K.JOBS if integration.framework == "batch/job" else kind_of(integration)
        self._templates: dict[bytes, core.PodTemplateSpec] = {}

    def cached(self, informers: dict[str, "Informer"]):
        """Where its objects are cached (get by `namespace/name`, list): its informer."""
        return informers[self.kind.name]

    def workload_name(self, obj: dict) -> str:
        return self.integration.workload_name(obj)

    def owner_references(self, obj: dict) -> list[dict]:
        """Its Workload's ownerReferences: the object, as its controller."""
        meta = obj["metadata"]
        return [{"apiVersion": self.kind.api_version, "kind": self.kind.kind, "name": meta["name"],
                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]

    def priority_class_name(self, obj: dict) -> str | None:
        return self.integration.priority_class_name(obj, self.lookup)

    def members(self, obj: dict) -> list[dict]:
        """The pods it stops by deleting them (deletes_to_stop): a pod is its own."""
        return [obj]

    def releasable(self, obj: dict) -> list[dict]:
        """Its pods whose Kueue finalizer may go (the pod integration's)."""
        return []

    def key(self, namespace: str, name: str) -> str:
        """The engine's key of one of its objects: `namespace/name` for a Job (as always), with the
        kind for another (a RayJob's submitter Job has the RayJob's name; '#' is in no name)."""
        return f"{namespace}/{name}" if self.kind is K.JOBS else f"{namespace}/{name}#{self.kind.kind}"

    # -- what to admit -------------------------------------------------------------------------------
    def template_model(self, template: Any, where: str = "template") -> core.PodTemplateSpec:
        """The pod template validated, once per distinct template: objects made from one template
        (most of them) share one model - validating each whole Job was a twelfth of the
        controller's CPU in bench/kueue_realtime.py - and the engine computes the pod set of a
        shared template once (convert.pod_set_from_template). ValueError names a bad field from
        the object's root (`where`: the template's path)."""
        key = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
        model = self._templates.get(key)
        if model is None:
            try:
                model = core.PodTemplateSpec.model_validate(template)
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(p) for p in err["loc"])
                raise ValueError(f"{where}.{loc}: {err['msg']}") from None
            if len(self._templates) >= _TEMPLATE_CACHE_SIZE:
                self._templates.clear()
            self._templates[key] = model
        return model

    def _paths(self, obj: dict) -> dict[str, str]:
        if not isinstance(self.integration, TemplatedJob):
            return {}
        try:
            return {slot.name: dotted(slot.path) for slot in self.integration.slots(obj)}
        except (ValueError, NotImplementedError):
            return {}

    def _models(self, obj: dict, own: bool = False) -> list[tuple[PodSet, core.PodTemplateSpec]]:
        sets = self.integration.own_pod_sets(obj, self.lookup) if own else self.integration.pod_sets(obj, self.lookup)
        paths = self._paths(obj)
        return [(ps, self.template_model(ps.template, paths.get(ps.name, f"pod set {ps.name}: template")))
                for ps in sets]

    def pod_sets(self, obj: dict) -> tuple[PodSetSpec, ...]:
        """Its pod sets as the engine counts them (Kueue's PodSets), from its pod templates as
        they are now. Raises ValueError for an object that cannot be read."""
        return tuple(convert.pod_set_from_template(ps.name, ps.count, model) for ps, model in self._models(obj))

    def workload_pod_sets(self, obj: dict) -> list[dict]:
        """The Workload's `spec.podSets`: its own pod templates (without any flavor's)."""
        return [{"name": ps.name, "count": ps.count, "template": ps.template}
                for ps in self.integration.own_pod_sets(obj, self.lookup)]

    def priority(self, obj: dict, priorities: convert.PriorityResolver) -> int:
        """Kueue's: the WorkloadPriorityClass label, the PriorityClass its pods ask for, their
        priority, the global default."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        pod_priority = next((m.spec.priority for _, m in self._models(obj) if m.spec.priority is not None), None)
        return priorities.priority_for(labels, self.priority_class_name(obj), pod_priority)

    def queued(self, obj: dict) -> bool:
        """Whether the kind queues this object at all (besides Kueue's rule, is_managed)."""
        return True

    @staticmethod
    def queue_name(obj: dict) -> str | None:
        return job_queue_name(obj)

    @staticmethod
    def generation(obj: dict) -> int:
        """Bumped by the API server on every change of the spec."""
        return int(obj["metadata"].get("generation") or 0)

    # -- holding and running ------------------------------------------------------------------------
    def run(self, obj: dict, infos: dict[str, PodSetInfo]) -> dict | None:
        return self.integration.run(obj, infos)

    def suspend(self, obj: dict) -> dict | None:
        return self.integration.suspend(obj)

    def restore(self, obj: dict) -> dict | None:
        return self.integration.restore(obj)

    def adopted(self, obj: dict, workload: dict) -> dict | None:
        return self.integration.adopted(obj, (workload.get("spec") or {}).get("podSets") or ())

    def suspended(self, obj: dict) -> bool:
        return self.integration.is_suspended(obj)

    def stopped(self, obj: dict) -> bool:
        return self.integration.stopped(obj)

    def held(self, obj: dict) -> bool:
        """Something of it waits to be run by its admission (run would change it)."""
        return self.suspended(obj)

    def finished(self, obj: dict) -> Finished | None:
        """How it ended (with its own message, which Kueue puts in the Workload's Finished), else None."""
        return self.integration.finished(obj)


class PodKind(ManagedKind):
    """A plain pod of the pod integration (Kueue's pod controller): one Workload `pod-<name>-<hash>`
    controlled by the pod, pod set `main` of 1; held by its scheduling gate, run by removing the gate
    with the admitted flavor's nodeSelector and tolerations (pods.ungated); stopped by deleting it;
    nothing to restore. Only a pod the webhook gated (the managed label) is queued; a pod of a
    group (pod_groups.py) is not queued here."""

    deletes_to_stop = True

    def __init__(self, integration: Integration) -> None:
        super().__init__(integration)
        self.kind = K.PODS

    def queued(self, obj: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels.get(pods.MANAGED_LABEL) == "true" and group_key(obj) is None and pods.group_name(obj) is None

    def run(self, obj: dict, infos: dict[str, PodSetInfo]) -> dict | None:
        return pods.ungated(obj, infos.get(pods.MAIN))

    def suspend(self, obj: dict) -> dict | None:
        return None  # deleted instead (deletes_to_stop)

    def stopped(self, obj: dict) -> bool:
        return super().stopped(obj) or pods.holds_nothing(obj)

    def restore(self, obj: dict) -> dict | None:
        return None

    def releasable(self, obj: dict) -> list[dict]:  # type: ignore[override]
        return [obj] if self.finished_with(obj) else []

    @staticmethod
    def finished_with(pod: dict) -> bool:
        """Kueue's finalizer may go: the pod holds nothing any more and its end has been seen -
        terminated, or deleted before it got a node (gated, or ungated and not yet bound: kept, its
        finalizer would keep it, and an eviction waiting for it, for ever)."""
        meta = pod.get("metadata") or {}
        return pods.MANAGED_LABEL in (meta.get("finalizers") or ()) and pods.holds_nothing(pod)


def plain_group_key(pod: dict) -> str | None:
    """`namespace/group name` of a queued pod of a plain group (the webhook's managed label, the
    group name label, not a LeaderWorkerSet's), else None."""
    meta = pod.get("metadata") or {}
    name = pods.group_name(pod)
    if not name or (meta.get("labels") or {}).get(pods.MANAGED_LABEL) != "true" or pods.lws_group(pod):
        return None
    return f"{meta.get('namespace') or ''}/{name}"


def lws_group_key(pod: dict) -> str | None:
    """`namespace/<LeaderWorkerSet name>-<group index>` of a queued pod of a LeaderWorkerSet's
    group (the group index is digits: no two groups share a key), else None."""
    meta = pod.get("metadata") or {}
    group = pods.lws_group(pod)
    if group is None or (meta.get("labels") or {}).get(pods.MANAGED_LABEL) != "true":
        return None
    return f"{meta.get('namespace') or ''}/{group[0]}-{group[1]}"


def group_key(pod: dict) -> str | None:
    """The key of the group a queued pod belongs to (a plain group's or a LeaderWorkerSet's), else None."""
    return lws_group_key(pod) or plain_group_key(pod)


def group_uid(namespace: str, name: str) -> str:
    """A pod group's stand-in for a UID (its pods are indexed under it, its Workload's job-uid
    label names it): stable for a name, valid as a label value."""
    return "pod-group-" + hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:40]


def without_finalizer(pod: dict) -> dict | None:
    meta = pod.get("metadata") or {}
    if pods.MANAGED_LABEL not in (meta.get("finalizers") or ()):
        return None
    out = {**pod, "metadata": {**meta, "finalizers": [f for f in meta["finalizers"] if f != pods.MANAGED_LABEL]}}
    return out


def pod_set_infos(admission: Admission, flavors: dict[str, FlavorSpec]) -> dict[str, PodSetInfo]:
    """Each admitted pod set's own flavors' nodeSelector and tolerations (`flavors`: the engine's
    specs by name)."""
    return {ps: PodSetInfo.from_flavors(ps, [flavors[f] for f in sorted(set(by_res.values())) if f in flavors])
            for ps, by_res in admission.flavors.items()}


BATCH_JOB = ManagedKind(registry.BY_FRAMEWORK["batch/job"])


def batch_job() -> ManagedKind:
    return BATCH_JOB


def controller_ref(obj: dict) -> dict | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid"):
            return ref
    return None


class PodOwners:
    """Which objects a pod belongs to: itself, and the UIDs up its chain of controller ownerReferences through
    the objects the controller's caches hold (pod -> Job -> JobSet, pod -> RayCluster -> RayJob,
    pod -> Job -> JobSet -> TrainJob), each in the pod's namespace; an orphaned pod of a Job by the
    Job's UID label."""

    MAX_DEPTH = 4

    def __init__(self, caches: dict[str, "Informer"]) -> None:
        """`caches`: by kind (Job, JobSet, RayCluster, ...): the owners a chain may pass through."""
        self.caches = caches

    def chain(self, pod: dict) -> tuple[set[str], dict | None]:
        """(the UIDs on the pod's chain, the reference where the chain breaks: an owner of a kind
        the caches hold but not found there - deleted, or not seen yet - else None)."""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or ""
        own = {meta["uid"]} if meta.get("uid") else set()  # a plain pod is its own Workload's owner
        group = group_key(pod)
        if group is not None:
            own.add(group_uid(*group.split("/", 1)))  # a group's pods: its Workload's
        ref = controller_ref(pod)
        if ref is None:
            labels = meta.get("labels") or {}
            return own | {labels[k] for k in JOB_UID_LABELS if labels.get(k)}, None
        uids: set[str] = set(own)
        for _ in range(self.MAX_DEPTH):
            uids.add(ref["uid"])
            cache = self.caches.get(ref.get("kind") or "")
            if cache is None:
                return uids, None
            owner = cache.get(f"{ns}/{ref.get('name')}")
            if owner is None or owner["metadata"].get("uid") != ref["uid"]:
                return uids, ref
            ref = controller_ref(owner)
            if ref is None:
                return uids, None
        return uids, None

    def uids(self, pod: dict) -> set[str]:
        return self.chain(pod)[0]


# Kinds whose objects sit between a kind's pods and the kind (besides Jobs, always watched): their
# caches complete the chains, whether or not they are queued themselves.
CHAIN_FRAMEWORKS = {"trainer.kubeflow.org/trainjob": ("jobset.x-k8s.io/jobset",),
                    "ray.io/rayjob": ("ray.io/raycluster",)}
# What else a kind's pod sets are read from: a TrainJob's runtime (Lookup's kind -> where it lives).
RUNTIMES = {"trainer.kubeflow.org/trainjob": (
    K.Kind("clustertrainingruntimes", "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", False,
           CLUSTER_RUNTIME),
    K.Kind("trainingruntimes", "trainer.kubeflow.org", "v1alpha1", "trainingruntimes", True, NAMESPACED_RUNTIME))}


@dataclass
class EnabledKinds:
    """What `integrations.frameworks` asks the controller to watch."""

    managed: list[ManagedKind]  # the kinds it queues
    needs: dict[str, list[K.Kind]]  # by framework: the other kinds it reads (owners on its pods' chains, runtimes)

    @property
    def watched(self) -> list[K.Kind]:
        """Every kind to watch besides the controller's own (Jobs and pods among them), once each.
        The pod groups' kinds are read from the pods' cache (no object of their own)."""
        out: dict[str, K.Kind] = {}
        for kind in (*(m.kind for m in self.managed), *(k for ks in self.needs.values() for k in ks)):
            if kind is not K.JOBS and kind.path() != K.PODS.path():
                out.setdefault(kind.name, kind)
        return list(out.values())


def managed_kinds(config: IntegrationsConfig) -> EnabledKinds:
    managed = []
    for integration in config.integrations():
        if integration.framework == "pod":
            managed.append(PodKind(integration))  # (its groups: pod_groups.with_groups)
        elif integration.hold == SUSPEND:
            managed.append(BATCH_JOB if integration.framework == "batch/job" else ManagedKind(integration))
        # else a kind whose pods are queued by the pod integration: each its own Workload (a
        # Deployment's), or a group (a StatefulSet's, a LeaderWorkerSet's: pod_groups.with_groups,
        # lws_groups.with_lws_groups)
    needs = {m.integration.framework: [kind_of(registry.BY_FRAMEWORK[f])
                                       for f in CHAIN_FRAMEWORKS.get(m.integration.framework, ())]
             + list(RUNTIMES.get(m.integration.framework, ())) for m in managed}
    return EnabledKinds(managed, needs)


def informer_lookup(informers: dict[str, "Informer"], kinds: tuple[K.Kind, ...]):
    """A Lookup (integration.Lookup) over the informers of `kinds`, by Kind.kind."""
    by_kind = {k.kind: k for k in kinds}

    def lookup(kind: str, namespace: str, name: str) -> dict | None:
        k = by_kind.get(kind)
        inf = informers.get(k.name) if k is not None else None
        return inf.get(f"{namespace}/{name}" if namespace else name) if inf is not None else None

    return lookup
