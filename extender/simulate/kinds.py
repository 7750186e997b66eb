"""The workload kinds a scenario may submit besides batch/v1 Job (JobSet, PyTorchJob, MPIJob,
TrainJob, RayJob, RayCluster, LeaderWorkerSet, Deployment, StatefulSet, Pod), and the Trainer
runtimes a TrainJob names. Each is read strictly with its published CRD's field names
(``crd_fields.json``, generated from the CRDs by tests/tools/crd_fields.py) or, for Kubernetes'
own kinds, the kubernetes_asyncio model's; defaulted as the API server would from the CRD's
``default``s; then turned into the Workloads its integration makes
(``gpuqueue.jobframework.registry``): one for most kinds, one per pod of a Deployment, one per
group of a LeaderWorkerSet. Pods labelled ``kueue.x-k8s.io/pod-group-name`` are gathered into
their group's Workload by the runner.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pydantic import ValidationError

from gpuqueue.api import base, core
from gpuqueue.jobframework.integration import Integration, Lookup
from gpuqueue.jobframework.kinds.pods import Deployment, LeaderWorkerSet, Pod, group_name
from gpuqueue.jobframework.podset import PodSet
from gpuqueue.jobframework.registry import BY_KIND
from gpuqueue.extender.simulate import fields

RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
BUILTIN = {"Deployment": ("apps/v1", "V1Deployment", True), "StatefulSet": ("apps/v1", "V1StatefulSet", True),
           "Pod": ("v1", "V1Pod", True)}


@functools.cache
def _crd_shapes() -> dict[str, Any]:
    return json.loads(resources.files("gpuqueue.extender.simulate").joinpath("crd_fields.json").read_text())


def kinds() -> dict[str, tuple[str, bool]]:
    """kind -> (apiVersion, namespaced) of every kind read here."""
    out = {k: (v["apiVersion"], v["namespaced"]) for k, v in _crd_shapes().items()}
    out.update({k: (api, ns) for k, (api, _, ns) in BUILTIN.items()})
    return out


def shape(kind: str) -> fields.Shape:
    if kind in BUILTIN:
        return fields.KubeObj(BUILTIN[kind][1])
    root = fields.from_json(_crd_shapes()[kind]["shape"])
    root.fields.update(apiVersion=None, kind=None, metadata=fields.OBJECT_META)
    root.fields.setdefault("status", None)
    return root


@dataclass
class KindObject:
    """A document of one of these kinds, defaulted; ``metadata`` is its metadata read."""

    doc: dict
    metadata: base.ObjectMeta

    @property
    def kind(self) -> str:
        return self.doc["kind"]

    @property
    def integration(self) -> Integration | None:
        return BY_KIND.get(self.kind) if self.kind not in RUNTIME_KINDS else None

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.metadata.name}" if kinds()[self.kind][1] else self.metadata.name or ""

    def named(self, name: str) -> "KindObject":
        doc = copy.deepcopy(self.doc)
        doc.setdefault("metadata", {})["name"] = name
        return KindObject(doc, self.metadata.model_copy(update={"name": name}))

    def with_metadata(self, meta: base.ObjectMeta) -> "KindObject":
        doc = dict(self.doc)
        doc["metadata"] = meta.to_dict()
        return KindObject(doc, meta)


def parse(doc: dict, prefix: str) -> KindObject:
    """Strictly checked and defaulted; ValueError names the field."""
    kind = doc["kind"]
    unknown = fields.unknown_field(doc, shape(kind), prefix)
    if unknown:
        raise ValueError(str(unknown))
    doc = copy.deepcopy(doc)
    if kind not in BUILTIN:
        fields.apply_defaults(doc, shape(kind))
    try:
        meta = base.ObjectMeta.model_validate(doc.get("metadata") or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{prefix + '.' if prefix else ''}metadata{'.' + loc if loc else ''}: {err['msg']}") from None
    return KindObject(doc, meta)


def check_pod_sets(obj: KindObject, prefix: str, lookup: Lookup | None) -> None:
    """Its pod sets can be read and each template is a pod template (ValueError names the field)."""
    integration = obj.integration
    if integration is None or (obj.kind == "TrainJob" and lookup is None):
        return
    pre = f"{prefix}." if prefix else ""
    try:
        sets = integration.pod_sets(obj.doc, lookup)
    except ValueError as exc:
        raise ValueError(f"{pre}{exc}") from None
    for ps in sets:
        try:
            template = ps.model()
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"{pre}pod set {ps.name}: template.{loc}: {err['msg']}") from None
        if not template.spec.containers:
            raise ValueError(f"{pre}pod set {ps.name}: template.spec.containers: Required value")


def workloads(obj: KindObject, lookup: Lookup | None) -> list[tuple[str, list[PodSet]]]:
    """The Workloads (name, pod sets) one object makes; a grouped pod makes none by itself."""
    integration = obj.integration
    name = obj.metadata.name or ""
    if isinstance(integration, Pod) and group_name(obj.doc):
        return []
    sets = integration.pod_sets(obj.doc, lookup)
    if isinstance(integration, (Deployment, LeaderWorkerSet)):
        replicas = (obj.doc.get("spec") or {}).get("replicas")
        return [(f"{name}-{i}", sets) for i in range(1 if replicas is None else replicas)]
    return [(name, sets)]


def template_models(sets: list[PodSet]) -> list[tuple[str, int, core.PodTemplateSpec]]:
    return [(ps.name, ps.count, ps.model()) for ps in sets]
