"""The quota objects - ResourceFlavors, Cohorts, ClusterQueues, LocalQueues - with the priority
classes and the namespaces, from the watch caches into the engine (and into the queue view that
tells which Jobs are managed)."""

from __future__ import annotations

import functools
import logging
from typing import Callable, Mapping

from pydantic import ValidationError

from gpuqueue.api import core, kueue
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.kube import Informer, object_key
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.tas.flavors import TopologyFlavors
from gpuqueue.jobframework.managed import StaticQueueView

log = logging.getLogger("gpuqueue.controller")

KINDS = (K.PRIORITY_CLASSES, K.WORKLOAD_PRIORITY_CLASSES, K.TOPOLOGIES, K.RESOURCE_FLAVORS, K.COHORTS, K.CLUSTER_QUEUES,
         K.LOCAL_QUEUES)


class QuotaObjects:
    def __init__(self, priorities: convert.PriorityResolver, queue_view: StaticQueueView,
                 engine: Callable[[], QuotaEngine | None], regroup: Callable[[], None],
                 status_changed: Callable[[], None], mark_dirty: Callable[[], None],
                 priority_class_changed: Callable[[str], None]) -> None:
        """`engine`: the engine to feed (None: none yet, only the priorities and the queue view are
        kept); `regroup`: the cohort trees may have changed (Releases.regroup); `mark_dirty`: ask
        for a scheduling pass; `priority_class_changed`: a WorkloadPriorityClass (by name) came or
        took another value."""
        self.priorities = priorities
        self.queue_view = queue_view
        self.engine = engine
        self.regroup = regroup
        self.status_changed = status_changed
        self.mark_dirty = mark_dirty
        self.priority_class_changed = priority_class_changed
        # TAS: each Topology's levels, and the flavors that name one, re-read when it changes
        self.tas = TopologyFlavors()

    def watch(self, informers: Mapping[str, Informer]) -> None:
        informers["namespaces"].add_handler(on_add=self.on_namespace, on_update=lambda old, new: self.on_namespace(new),
                                            on_delete=self._on_namespace_delete)
        for kind in KINDS:
            upsert = functools.partial(self._on_object, kind.kind)
            informers[kind.name].add_handler(on_add=upsert, on_update=functools.partial(self._on_update, upsert),
                                             on_delete=functools.partial(self._on_delete, kind.kind))

    def load(self, engine: QuotaEngine, informers: Mapping[str, Informer]) -> None:
        """Everything the caches hold, into a new engine."""
        for obj in informers["namespaces"].list():
            self.on_namespace(obj)
        for kind in KINDS:
            for obj in informers[kind.name].list():
                self._apply(engine, kind.kind, obj)

    def on_namespace(self, obj: dict) -> None:
        name = obj["metadata"]["name"]
        labels = {"kubernetes.io/metadata.name": name, **(obj["metadata"].get("labels") or {})}
        self.queue_view.namespaces[name] = labels
        engine = self.engine()
        if engine is not None:
            engine.set_namespace(name, labels)
            self.mark_dirty()

    def _on_namespace_delete(self, obj: dict) -> None:
        self.queue_view.namespaces.pop(obj["metadata"]["name"], None)

    def _apply(self, engine: QuotaEngine | None, kind: str, obj: dict) -> None:
        try:
            if kind == "PriorityClass":
                self.priorities.set_priority_class(core.PriorityClass.model_validate(obj))
            elif kind == "WorkloadPriorityClass":
                self.priorities.set_workload_priority_class(kueue.WorkloadPriorityClass.model_validate(obj))
            elif engine is None:
                return
            elif kind == "Topology":
                self._set_topology(engine, obj["metadata"]["name"], kueue.Topology.model_validate(obj).level_keys())
            elif kind == "ResourceFlavor":
                engine.set_flavor(self.tas.flavor(kueue.ResourceFlavor.model_validate(obj)))
            elif kind == "Cohort":
                engine.set_cohort(convert.cohort_spec(kueue.Cohort.model_validate(obj)))
            elif kind == "ClusterQueue":
                engine.set_cluster_queue(convert.cluster_queue_spec(kueue.ClusterQueue.model_validate(obj)))
            elif kind == "LocalQueue":
                spec = convert.local_queue_spec(kueue.LocalQueue.model_validate(obj))
                engine.set_local_queue(spec)
                self.queue_view.local_queues.add((spec.namespace, spec.name))
        except (ValidationError, ValueError, KeyError) as exc:
            log.warning("ignoring %s %s: %s", kind, object_key(obj), exc)

    def _set_topology(self, engine: QuotaEngine, name: str, levels: tuple[str, ...] | None) -> None:
        for spec in self.tas.topology(name, levels):
            engine.set_flavor(spec)

    def _on_object(self, kind: str, obj: dict) -> None:
        self._apply(self.engine(), kind, obj)
        if kind == "WorkloadPriorityClass" and self.engine() is not None:
            self.priority_class_changed(obj["metadata"]["name"])
        if kind in ("ClusterQueue", "Cohort"):
            self.regroup()  # the cohort trees may have changed
        self.status_changed()
        self.mark_dirty()

    def _on_update(self, upsert, old: dict, new: dict) -> None:
        """A write to the status alone (our own ClusterQueue/LocalQueue status writes, once a second
        per queue, come back this way) changes nothing the engine reads: no engine update, no pass.
        Re-applying the spec and running a pass for each was a fifth of the controller's CPU in
        bench/kueue_realtime.py."""
        if _spec_of(old) == _spec_of(new):
            self.status_changed()  # someone else may have written over ours
            return
        upsert(new)

    def _on_delete(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if kind in ("ClusterQueue", "Cohort"):
            self.regroup()
        if kind == "PriorityClass":
            self.priorities.pod_classes.pop(name, None)
        elif kind == "WorkloadPriorityClass":
            self.priorities.workload_classes.pop(name, None)
        elif (e := self.engine()) is not None:
            if kind == "ResourceFlavor":
                self.tas.remove_flavor(name)
            {"ResourceFlavor": lambda: e.remove_flavor(name),
             "Topology": lambda: self._set_topology(e, name, None), "Cohort": lambda: e.remove_cohort(name),
             "ClusterQueue": lambda: e.remove_cluster_queue(name),
             "LocalQueue": lambda: e.remove_local_queue(obj["metadata"].get("namespace", "default"), name),
             }.get(kind, lambda: None)()
        if kind == "LocalQueue":
            self.queue_view.local_queues.discard((obj["metadata"].get("namespace", "default"), name))
        self.status_changed()
        self.mark_dirty()


_BOOKKEEPING = ("resourceVersion", "managedFields", "generation")


def _spec_of(obj: dict) -> tuple:
    """Everything of a quota object but its status and the metadata the API server keeps."""
    meta = obj.get("metadata") or {}
    return ({k: v for k, v in obj.items() if k not in ("status", "metadata")},
            {k: v for k, v in meta.items() if k not in _BOOKKEEPING})
