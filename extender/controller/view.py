"""The scheduler extender's ClusterView over the controller's watch caches: nodes and the GPUs
bound pods take from the Node and Pod informers, admission from the Workload informer (so a
follower, whose engine is idle, answers as well as the leader)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.placement.kube import InvalidObject, job_key, node_info_from_dict, pod_gpus
from gpuqueue.api.base import Toleration
from gpuqueue.api.core import Pod
from gpuqueue.extender.placement.model import FlavorSelector
from gpuqueue.extender.scheduler.view import UNMANAGED, Admitted, NotAdmitted, PodRef, Verdict

if TYPE_CHECKING:
    from gpuqueue.extender.controller.controller import Controller

log = logging.getLogger("gpuqueue.controller")


class ControllerClusterView:
    def __init__(self, ctl: "Controller") -> None:
        self.ctl = ctl
        self._nodes = NodeCache()
        self._pods: dict[str, PodRef] = {}
        ctl.informers["nodes"].add_handler(on_add=self._node, on_update=lambda old, new: self._node(new),
                                           on_delete=lambda o: self._nodes.remove_node(o["metadata"]["name"]))
        ctl.informers["pods"].add_handler(on_add=self._pod, on_update=lambda old, new: self._pod(new),
                                          on_delete=self._pod_gone)

    @property
    def nodes(self) -> NodeCache:
        return self._nodes

    def _node(self, obj: dict) -> None:
        try:
            self._nodes.upsert_node(node_info_from_dict(obj))
        except (InvalidObject, ValidationError) as exc:
            log.warning("node %s ignored: %s", obj["metadata"].get("name"), exc)

    def _pod(self, obj: dict) -> None:
        try:
            pod = Pod.model_validate(obj)
        except ValidationError as exc:
            log.warning("pod %s ignored: %s", obj["metadata"].get("name"), exc)
            return
        uid = pod.metadata.uid
        self._pods[uid] = pod.metadata
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName")
        if phase in ("Succeeded", "Failed"):
            self._nodes.release(uid)
        elif node:
            try:
                gpus, rest = pod_gpus(pod.spec)
            except InvalidObject:
                return
            self._nodes.bind(uid, node, gpus, rest, job_key(pod.metadata))

    def _pod_gone(self, obj: dict) -> None:
        uid = obj["metadata"].get("uid", "")
        self._pods.pop(uid, None)
        self._nodes.release(uid)

    def workload_for(self, pod: PodRef) -> Verdict:
        key = job_key(pod)
        if key is None:
            return UNMANAGED
        job = self.ctl.informers["jobs"].get(key)
        if job is None or not self.ctl.is_managed(job):
            return UNMANAGED
        wl = self.ctl.informers["workloads"].get(
            f"{job['metadata']['namespace']}/{W.workload_name(job['metadata']['name'], job['metadata']['uid'])}")
        admission = ((wl or {}).get("status") or {}).get("admission")
        if not admission or not W.is_true(wl, "QuotaReserved"):
            c = W.condition(wl, "QuotaReserved") or {}
            return NotAdmitted(c.get("message") or "the Workload has no quota reservation yet")
        names = sorted({f for psa in admission.get("podSetAssignments") or () for f in (psa.get("flavors") or {}).values()})
        labels: dict[str, str] = {}
        tolerations = []
        for name in names:
            obj = self.ctl.informers["resourceflavors"].get(name) or {}
            spec = obj.get("spec") or {}
            labels.update(spec.get("nodeLabels") or {})
            tolerations.extend(spec.get("tolerations") or ())
        tols = tuple(Toleration.model_validate(t).to_spec() for t in tolerations)
        return Admitted(FlavorSelector.of(",".join(names), labels, tols), key)

    def pod_by_uid(self, uid: str) -> PodRef | None:
        return self._pods.get(uid)

    def may_evict(self, pod: PodRef) -> bool:
        """kube-scheduler may not evict pods of admitted Workloads: quota preemption is the
        controller's job (it suspends the whole Job)."""
        return isinstance(self.workload_for(pod), type(UNMANAGED))



