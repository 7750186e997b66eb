"""The scheduler extender's ClusterView over Kubernetes objects: nodes and the GPUs bound pods
take from Node and Pod objects, pods and their owners (Jobs, and every kind the controller
queues, with the owners between them and their pods) by UID, Workloads by their
owner's UID, the resources ClusterQueues cover. ``ControllerClusterView`` keeps it current from
the controller's watch caches (so a follower, whose engine is idle, answers as well as the
leader); ``gpuqueue explain`` fills one from lists."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from pydantic import ValidationError

from gpuqueue.api.base import Toleration
from gpuqueue.api import topology
from gpuqueue.api.core import Pod
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.clusterview.tas_nodes import NodeCapacities
from gpuqueue.extender.placement.kube import InvalidObject, node_info_from_dict
from gpuqueue.extender.placement.model import GPU_RESOURCE, FlavorSelector
from gpuqueue.extender.scheduler.indexes import ViewIndexes
from gpuqueue.extender.scheduler.ownership import count_key
from gpuqueue.extender.scheduler.view import (ADMITTED, EVICTED, FINISHED, PENDING, CachedPod, Owner, PodSetAdmission,
                                              Violation, WorkloadEntry)
from gpuqueue.jobframework.enforcement import AUDIT, EnforcementConfig, covered_resources
from gpuqueue.jobframework.kinds.pods import IS_GROUP_WORKLOAD
from gpuqueue.jobframework.registry import BY_KIND
from gpuqueue.api.kueue import JOB_UID_LABEL

if TYPE_CHECKING:
    from gpuqueue.extender.controller.controller import Controller

log = logging.getLogger("gpuqueue.controller")

_TERMINATED = ("Succeeded", "Failed")


def _controller_uid(meta: Mapping) -> str | None:
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref.get("uid") or None
    return None


def revision(resource_version: str | None) -> int:
    """A resourceVersion as the integer etcd makes it (0: none, or not one)."""
    return int(resource_version) if isinstance(resource_version, str) and resource_version.isdigit() else 0


def group_members(meta: Mapping) -> frozenset[str]:
    """A pod group's Workload (Kueue's is-group-workload annotation): the uids of its pods, each an
    owner of it and none its controller."""
    if (meta.get("annotations") or {}).get(IS_GROUP_WORKLOAD) != "true":
        return frozenset()
    return frozenset(ref["uid"] for ref in meta.get("ownerReferences") or ()
                     if isinstance(ref, Mapping) and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1"
                     and not ref.get("controller") and isinstance(ref.get("uid"), str) and ref["uid"])


def flavor_selector(names: Iterable[str], flavors: Mapping[str, dict]) -> FlavorSelector:
    """The admitted flavors' nodeLabels and tolerations merged, named by their joined names."""
    names = sorted(set(names))
    labels: dict[str, str] = {}
    tolerations = []
    for name in names:
        spec = (flavors.get(name) or {}).get("spec") or {}
        labels.update(spec.get("nodeLabels") or {})
        tolerations.extend(Toleration.model_validate(t).to_spec() for t in spec.get("tolerations") or ())
    return FlavorSelector.of(",".join(names), labels, tuple(tolerations))


def workload_entry(wl: dict, flavors: Mapping[str, dict]) -> WorkloadEntry | None:
    """A Workload as its pods are judged against it (None: no controller owner and no pod group's
    pods, nothing's Workload). ``flavors``: ResourceFlavor objects by name."""
    meta = wl.get("metadata") or {}
    members = group_members(meta)
    owner = _controller_uid(meta) or (((meta.get("labels") or {}).get(JOB_UID_LABEL) or "") if members else "")
    if not owner:
        return None
    entry = functools.partial(WorkloadEntry, members=members)
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    admission = (wl.get("status") or {}).get("admission")
    if W.is_true(wl, "Finished"):
        return entry(namespace, name, owner, FINISHED)
    if not admission or not W.is_true(wl, "QuotaReserved"):
        message = (W.condition(wl, "QuotaReserved") or {}).get("message") or ""
        return entry(namespace, name, owner, PENDING, message)
    evicted = W.is_true(wl, "Evicted")
    message = ((W.condition(wl, "Evicted") or {}).get("message") or "") if evicted else ""
    try:
        counts = {ps.get("name", W.MAIN): ps.get("count", 1) for ps in (wl.get("spec") or {}).get("podSets") or ()}
        pod_sets, names = {}, []
        for psa in admission.get("podSetAssignments") or ():
            ps = psa.get("name", W.MAIN)
            count = psa.get("count", counts.get(ps, 1))
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"podSetAssignments {ps}: count {count!r}")
            usage = {r: W.parse_engine_int(r, q) for r, q in (psa.get("resourceUsage") or {}).items()}
            own = list((psa.get("flavors") or {}).values())
            placed = topology.from_v1beta2(psa["topologyAssignment"]) if psa.get("topologyAssignment") else None
            # each pod set's pods go to its own flavors' nodes (a JobSet's driver on cpu nodes,
            # its workers on GPU nodes), not to the union of the Workload's
            pod_sets[ps] = PodSetAdmission(count, usage, flavor_selector(own, flavors), placed)
            names.extend(own)
        flavor = flavor_selector(names, flavors)
    except (ValueError, TypeError, AttributeError) as exc:  # pydantic's ValidationError is a ValueError
        # Fail closed: pods of a Workload whose admission cannot be read get no node.
        log.warning("workload %s/%s: admission not readable: %s", namespace, name, exc)
        return entry(namespace, name, owner, PENDING, f"gpuqueue cannot read the Workload's admission: {exc}")
    return entry(namespace, name, owner, EVICTED if evicted else ADMITTED, message, flavor, pod_sets)


class CacheView(ViewIndexes):
    """A ClusterView over objects handed to it one by one (``upsert_*``/``remove_*``)."""

    def __init__(self, enforcement: EnforcementConfig | None = None,
                 cluster_queues: Callable[[], Iterable[dict] | None] = lambda: None,
                 flavors: Mapping[str, dict] | None = None) -> None:
        """``cluster_queues``: the ClusterQueue objects, or None while they are not known yet;
        ``flavors``: the ResourceFlavor objects by name (a live mapping)."""
        super().__init__(enforcement=enforcement)
        self._cluster_queues = cluster_queues
        self._flavors = flavors if flavors is not None else {}
        self._covered: frozenset[str] | None = None
        self._covered_stale = True
        self._workloads_rv = 0  # the newest Workload version taken in (etcd's revisions are integers)

    # -- objects in ----------------------------------------------------------------------------
    def upsert_node(self, obj: dict) -> None:
        try:
            self._nodes.upsert_node(node_info_from_dict(obj))
        except (InvalidObject, ValidationError) as exc:
            log.warning("node %s ignored: %s", (obj.get("metadata") or {}).get("name"), exc)
            return
        self.touched()

    def remove_node(self, obj: dict) -> None:
        self._nodes.remove_node((obj.get("metadata") or {}).get("name", ""))
        self.touched()

    def upsert_pod(self, obj: dict, old: dict | None = None) -> None:
        """``old``: the version of the pod the cache held before ``obj`` (a watch update)."""
        pod = self._held_pod_at(obj, old) if old is not None else None
        if pod is None:
            try:
                pod = CachedPod.of(Pod.model_validate(obj))
            except ValidationError as exc:
                log.warning("pod %s ignored: %s", (obj.get("metadata") or {}).get("name"), exc)
                return
        self.put_pod(pod)
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName")
        if phase in _TERMINATED:
            self._nodes.release(pod.uid)
        elif node:  # bound and not terminated (deleted or not: the kubelet frees its GPUs when it is gone)
            rest = {r: v for r, v in pod.requests.items() if r != GPU_RESOURCE}
            # counted with its pod set's other pods (a Job's: under the Job's uid, as before)
            self._nodes.bind(pod.uid, node, pod.gpus, rest, count_key(self, pod))

    def _held_pod_at(self, obj: dict, old: dict) -> CachedPod | None:
        """The CachedPod made from ``old``, at ``obj``'s resourceVersion, when ``obj`` would make
        the same one (CachedPod.made_alike). Most updates of a pod are such (its binding, its
        status, its deletion), and a full read of the object is most of what the pod watch costs."""
        meta = obj.get("metadata") or {}
        held = self.pod(meta.get("uid") or "")
        if (held is None or not held.resource_version
                or held.resource_version != (old.get("metadata") or {}).get("resourceVersion")
                or not CachedPod.made_alike(obj, old)):
            return None
        return held.at_version(meta.get("resourceVersion") or "")

    def remove_pod(self, obj: dict) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        self.drop_pod(uid)
        self._nodes.release(uid)

    def upsert_job(self, obj: dict) -> None:
        self.upsert_owner("Job", obj)

    def upsert_owner(self, kind: str, obj: dict) -> None:
        """An object pods belong to, directly or through others (a Job, a JobSet, a PyTorchJob, a
        RayCluster, ...): ``kind`` names its integration."""
        meta = obj.get("metadata") or {}
        if meta.get("uid"):
            self.put_owner(Owner(meta["uid"], meta.get("namespace") or "", kind, meta.get("name") or "",
                                 _controller_uid(meta)))

    def remove_job(self, obj: dict) -> None:
        self.drop_owner((obj.get("metadata") or {}).get("uid", ""))

    def upsert_workload(self, obj: dict) -> None:
        self._workloads_rv = max(self._workloads_rv, revision((obj.get("metadata") or {}).get("resourceVersion")))
        entry = workload_entry(obj, self._flavors)
        if entry is None:
            self.remove_workload(obj)
        else:
            self.put_workload(entry)

    def remove_workload(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        self.drop_workload(f"{meta.get('namespace') or ''}/{meta.get('name') or ''}")

    def cluster_queues_changed(self) -> None:
        self._covered_stale = True

    # -- ClusterView ---------------------------------------------------------------------------
    def covered_resources(self) -> frozenset[str] | None:
        if self._covered_stale:
            cqs = self._cluster_queues()
            if cqs is None:
                return None
            self._covered, self._covered_stale = covered_resources(cqs), False
        return self._covered

    def workloads_behind(self, resource_version: str | None) -> bool:
        return revision(resource_version) > self._workloads_rv

    def may_evict(self, pod: CachedPod) -> bool:
        """kube-scheduler may not evict pods of Workloads holding quota: quota preemption is the
        controller's job (it suspends the whole Job)."""
        return False

    def report(self, violation: Violation) -> None:
        if self._enforcement.mode == AUDIT:
            log.warning("enforcement (Audit, not refused): %s", violation.message)


AUDIT_EVENT_REASON = "QuotaNotEnforced"


class ControllerClusterView(CacheView):
    def __init__(self, ctl: "Controller", enforcement: EnforcementConfig | None = None) -> None:
        informers = ctl.informers
        cqs = informers["clusterqueues"]
        super().__init__(enforcement or ctl.options.enforcement,
                         lambda: cqs.list() if cqs.synced.is_set() else None, informers["resourceflavors"].store)
        self.ctl = ctl
        self._violations = ctl.metrics.enforcement_violations
        self._audited: set[tuple[str, str]] = set()

        def on(name: str, upsert, remove) -> None:
            informers[name].add_handler(on_add=upsert, on_update=lambda old, new: upsert(new), on_delete=remove)

        on("nodes", self.upsert_node, self.remove_node)
        informers["pods"].add_handler(on_add=self.upsert_pod, on_update=lambda old, new: self.upsert_pod(new, old),
                                      on_delete=self.remove_pod)
        on("jobs", self.upsert_job, self.remove_job)
        for kind in ctl.crd_kinds:  # every other kind it queues, and the owners between them and their pods
            if kind.kind in BY_KIND:
                on(kind.name, functools.partial(self.upsert_owner, kind.kind), self.remove_job)
        on("workloads", self.upsert_workload, self.remove_workload)
        on("clusterqueues", lambda obj: self.cluster_queues_changed(), lambda obj: self.cluster_queues_changed())
        on("resourceflavors", self._flavors_changed, self._flavors_changed)
        self._recounted = False
        # admission that places pods reads the nodes from this view's cache, and hears when they change
        ctl.node_source = NodeCapacities(self)
        if ctl.engine is not None:
            ctl.engine.nodes = ctl.node_source
        on("nodes", self._capacity_changed, self._capacity_changed)
        on("pods", self._capacity_changed, self._capacity_changed)

    def _capacity_changed(self, obj: dict) -> None:
        engine = self.ctl.engine
        if engine is not None and engine.capacity_changed():
            self.ctl.mark_dirty()

    def _recount_once_synced(self) -> None:
        """A pod is counted on its node under its pod set's key, which its Workload and the owners
        between them decide; at a start the pods may be listed before those, and counted under
        their controller's uid. Once every cache is whole, every pod is counted again, once -
        before any verb or event is answered from the caches."""
        if self._recounted or not self.ctl.synced:
            return
        self._recounted = True
        for pod in self.ctl.informers["pods"].list():
            CacheView.upsert_pod(self, pod)

    def upsert_pod(self, obj: dict, old: dict | None = None) -> None:
        self._recount_once_synced()
        super().upsert_pod(obj, old)

    def upsert_owner(self, kind: str, obj: dict) -> None:
        self._recount_once_synced()
        super().upsert_owner(kind, obj)

    def upsert_workload(self, obj: dict) -> None:
        self._recount_once_synced()
        super().upsert_workload(obj)

    def workload_owned_by(self, uid: str):
        self._recount_once_synced()
        return super().workload_owned_by(uid)

    def workloads_behind(self, resource_version: str | None) -> bool:
        """The leader's own writes (every admission) are in its cache as it makes them; a
        follower's cache holds what its watch brought so far (its bookmarks count too)."""
        if self.ctl.leader:
            return False
        seen = revision(self.ctl.informers["workloads"].resource_version)
        return revision(resource_version) > max(seen, self._workloads_rv)

    def _flavors_changed(self, obj: dict) -> None:
        for wl in self.ctl.informers["workloads"].list():  # admitted Workloads carry their flavors' labels
            self.upsert_workload(wl)

    def report(self, violation: Violation) -> None:
        self._violations.labels(violation.reason).inc()
        super().report(violation)
        pod = violation.pod
        if self._enforcement.mode == AUDIT and (pod.uid, violation.reason) not in self._audited:
            if len(self._audited) >= 4096:
                self._audited.clear()
            self._audited.add((pod.uid, violation.reason))  # one Event per pod and reason, not per attempt
            self.ctl.events.on_pod(pod.namespace, pod.name, pod.uid, AUDIT_EVENT_REASON,
                                   f"{violation.message} (enforcement Audit: not refused)")
