"""An integration: how gpuqueue queues one workload kind (Kueue's jobframework GenericJob), as pure
functions over the object as the API server stores it (a dict). Every function leaves the
object it is given as it was; an edit returns a new object, or None when the object already is
so. The webhook, the controller, the extender and the simulator ask an integration, never the
kind itself (``registry.py`` finds it by group/version/kind or by Kueue's framework name).

Two ways to hold a workload until it is admitted, as in Kueue:

- ``SUSPEND``: the kind has a suspend flag (batch/v1 Job, JobSet, Kubeflow jobs, TrainJob, RayJob,
  RayCluster). Admission unsuspends it with each pod set's flavor injected into that pod set's
  template (``run``); eviction suspends it (``suspend``) and, once stopped, puts the templates'
  own scheduling fields back (``restore``).
- ``GATE``: the kind has no suspend flag (plain Pods and pod groups; Deployments, StatefulSets
  and LeaderWorkerSets through their pods): each pod carries the scheduling gate
  ``kueue.x-k8s.io/admission`` from CREATE, and admission removes it with the flavor injected
  (``kinds/pods.py``); eviction deletes the pods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gpuqueue.jobframework.names import workload_name
from gpuqueue.jobframework.podset import PodSet, PodSetInfo, json_copy, merged_template, scheduling, with_scheduling

SUSPEND, GATE = "suspend", "gate"
# The templates' own nodeSelector/tolerations before admission injected a flavor's, by pod set.
ORIGINAL_POD_SET_SCHEDULING = "gpuqueue.io/original-pod-set-scheduling"

Path = tuple  # keys (str) and indices (int) from the object's root
# (kind, namespace, name) -> the object, or None: what some kinds read besides themselves
Lookup = Callable[[str, str, str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Finished:
    succeeded: bool
    message: str


@dataclass(frozen=True)
class PodFacts:
    """What the extender knows of a pod when it asks which pod set the pod is in: the labels and
    annotations its cache keeps (``Integration.pod_keys``), and the kind of the object between
    the pod and the workload's owner (None: the owner controls the pod itself)."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    via: str | None = None


@dataclass(frozen=True)
class Slot:
    """Where a pod set's template lives in the object."""

    name: str
    count: int
    path: Path


def dotted(path: Path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out


def get_path(obj: Any, path: Path, required: bool = True) -> Any:
    """The value at ``path``; ValueError naming the field when it is missing (``required``) or
    when something on the way has the wrong type."""
    value = obj
    for i, p in enumerate(path):
        here = path[: i + 1]
        if isinstance(p, int):
            if not isinstance(value, list) or p >= len(value):
                raise ValueError(f"{dotted(here)}: Required value")
        elif not isinstance(value, Mapping):
            raise ValueError(f"{dotted(path[:i])}: must be an object")
        elif p not in value or value[p] is None:
            if not required:
                return None
            raise ValueError(f"{dotted(here)}: Required value")
        value = value[p]
    return value


def set_path(obj: dict, path: Path, value: Any) -> None:
    target = obj
    for p in path[:-1]:
        target = target[p] if isinstance(p, int) else target.setdefault(p, {})
    target[path[-1]] = value


def count_of(value: Any, where: str, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: must be a non-negative integer, got {value!r}")
    return value


def conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    conds = (obj.get("status") or {}).get("conditions") if isinstance(obj.get("status"), Mapping) else None
    return [c for c in conds or () if isinstance(c, Mapping)]


def true_condition(obj: Mapping[str, Any], *types: str) -> Mapping[str, Any] | None:
    for c in conditions(obj):
        if c.get("type") in types and c.get("status") == "True":
            return c
    return None


def finished_by_condition(obj: Mapping[str, Any], succeeded: str, failed: str = "Failed") -> "Finished | None":
    """Finished when its controller sets the ``succeeded`` or ``failed`` condition True."""
    c = true_condition(obj, succeeded, failed)
    return None if c is None else Finished(c["type"] == succeeded, c.get("message") or "")


def any_active(obj: Mapping[str, Any], field: str) -> bool:
    """Some entry of ``status.<field>`` (per child job) counts active pods."""
    return any((s or {}).get("active", 0) > 0 for s in (obj.get("status") or {}).get(field) or ())


class Integration:
    """One workload kind. Subclasses set the class attributes and the methods their kind needs."""

    framework: str = ""  # Kueue's name in `integrations.frameworks`
    group: str = ""
    version: str = ""
    kind: str = ""
    plural: str = ""
    namespaced: bool = True
    hold: str = SUSPEND
    # labels and annotations of its pods that pod_set_of reads (the extender's pod cache keeps them)
    pod_keys: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return workload_name(self.kind, self.group, meta.get("name") or "", meta.get("uid") or "")

    def queued_elsewhere(self, obj: Mapping[str, Any]) -> str | None:
        """Why an object of this kind is not queued on its own, though it asks to be (None: it is)."""
        return None

    # -- what to admit --------------------------------------------------------------------------
    def pod_sets(self, obj: Mapping[str, Any], lookup: Lookup | None = None) -> list[PodSet]:
        raise NotImplementedError

    def own_pod_sets(self, obj: Mapping[str, Any], lookup: Lookup | None = None) -> list[PodSet]:
        """Its pod sets as its owner wrote them, before any admission's flavor."""
        return self.pod_sets(obj, lookup)

    def priority_class_name(self, obj: Mapping[str, Any], lookup: Lookup | None = None) -> str | None:
        """Kueue's order: the WorkloadPriorityClass label (the caller checks that one), else the
        first pod set's template that names a PriorityClass."""
        for ps in self.pod_sets(obj, lookup):
            name = (ps.template.get("spec") or {}).get("priorityClassName")
            if name:
                return name
        return None

    # -- holding and running (SUSPEND kinds; GATE kinds hold their pods, see kinds/pods.py) --------
    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def suspend(self, obj: Mapping[str, Any]) -> dict | None:
        raise NotImplementedError

    def run(self, obj: Mapping[str, Any], infos: Mapping[str, PodSetInfo]) -> dict | None:
        raise NotImplementedError

    def restore(self, obj: Mapping[str, Any]) -> dict | None:
        raise NotImplementedError

    def adopted(self, obj: Mapping[str, Any], workload_pod_sets: Sequence[Mapping[str, Any]]) -> dict | None:
        """An object another controller (Kueue) started, with what ``restore`` needs to stop it
        as that one would (None: nothing to add)."""
        return None

    # -- how it is doing --------------------------------------------------------------------------
    def finished(self, obj: Mapping[str, Any]) -> Finished | None:
        raise NotImplementedError

    def is_active(self, obj: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def stopped(self, obj: Mapping[str, Any]) -> bool:
        """Suspended, and its own controller reports nothing running (the pods' own end is the
        caller's to watch)."""
        return self.is_suspended(obj) and not self.is_active(obj)

    # -- its pods -----------------------------------------------------------------------------------
    def pod_set_of(self, pod: PodFacts) -> str | None:
        """Which of its pod sets a pod it owns is in (None: the pod says none)."""
        raise NotImplementedError


class TemplatedJob(Integration):
    """A kind with a suspend flag and its pod templates at known places (``slots``)."""

    suspend_path: Path = ("spec", "suspend")

    def slots(self, obj: Mapping[str, Any]) -> list[Slot]:
        raise NotImplementedError

    def pod_sets(self, obj: Mapping[str, Any], lookup: Lookup | None = None) -> list[PodSet]:
        out = []
        for slot in self.slots(obj):
            template = get_path(obj, slot.path)
            if not isinstance(template, Mapping):
                raise ValueError(f"{dotted(slot.path)}: must be an object")
            out.append(PodSet(slot.name, slot.count, template))
        return out

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return get_path(obj, self.suspend_path, required=False) is True

    def suspend(self, obj: Mapping[str, Any]) -> dict | None:
        if self.is_suspended(obj):
            return None
        out = json_copy(obj)
        set_path(out, self.suspend_path, True)
        return out

    def run(self, obj: Mapping[str, Any], infos: Mapping[str, PodSetInfo]) -> dict | None:
        out = json_copy(obj)
        originals = self.originals(out) or {}
        recorded = dict(originals)
        for slot in self.slots(out):
            template = get_path(out, slot.path)
            own = originals.setdefault(slot.name, scheduling(template))
            template = with_scheduling(template, own)
            info = infos.get(slot.name)
            set_path(out, slot.path, merged_template(template, info) if info is not None else template)
        if originals != recorded or self.originals(obj) is None:
            self.record_originals(out, originals)
        set_path(out, self.suspend_path, False)
        return None if out == obj else out

    def restore(self, obj: Mapping[str, Any]) -> dict | None:
        if not self.is_suspended(obj):
            return None
        originals = self.originals(obj)
        out = json_copy(obj)
        if originals is not None:
            for slot in self.slots(out):
                if slot.name in originals:
                    set_path(out, slot.path, with_scheduling(get_path(out, slot.path), originals[slot.name]))
        annotations = (out.get("metadata") or {}).get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(self.original_annotation(), None)
        return None if out == obj else out

    def adopted(self, obj: Mapping[str, Any], workload_pod_sets: Sequence[Mapping[str, Any]]) -> dict | None:
        """Kueue started it, so no record of its own scheduling fields is on it: they are recorded
        from its Workload's pod sets, which Kueue puts back when it stops a Job (podset's
        RestorePodSpec). None when a record is there or the Workload lacks one of its pod sets."""
        if self.originals(obj) is not None:
            return None
        templates = {ps.get("name"): ps.get("template") for ps in workload_pod_sets}
        slots = self.slots(obj)
        if not all(isinstance(templates.get(slot.name), Mapping) for slot in slots):
            return None
        out = json_copy(obj)
        self.record_originals(out, {slot.name: scheduling(templates[slot.name]) for slot in slots})
        return out

    def own_pod_sets(self, obj: Mapping[str, Any], lookup: Lookup | None = None) -> list[PodSet]:
        """Its pod sets with the templates' own scheduling fields (an admission's flavor taken
        out): what its Workload records and compares."""
        originals = self.originals(obj) or {}
        return [PodSet(ps.name, ps.count, with_scheduling(ps.template, originals[ps.name]))
                if ps.name in originals else ps for ps in self.pod_sets(obj, lookup)]

    # -- the record of the templates' own scheduling fields -------------------------------------------
    def original_annotation(self) -> str:
        return ORIGINAL_POD_SET_SCHEDULING

    def originals(self, obj: Mapping[str, Any]) -> dict[str, dict] | None:
        """The recorded scheduling fields by pod set (None: none recorded, or unreadable: a
        tampered record is ignored, the templates stay as they are)."""
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(self.original_annotation())
        if not isinstance(raw, str):
            return None
        try:
            return self.from_record(orjson.loads(raw))
        except orjson.JSONDecodeError:
            return None

    def record_originals(self, obj: dict, originals: Mapping[str, dict]) -> None:
        annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[self.original_annotation()] = orjson.dumps(self.to_record(originals)).decode()

    def from_record(self, value: Any) -> dict[str, dict] | None:
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            return None
        return value

    def to_record(self, originals: Mapping[str, dict]) -> Any:
        return dict(originals)


def replica_specs(obj: Mapping[str, Any], field: str, order: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """The replica specs of a Kubeflow-style job (``spec.<field>``: a map by replica type), in
    ``order`` (Kueue's OrderedReplicaTypes), then any other type by name."""
    specs = get_path(obj, ("spec", field))
    if not isinstance(specs, Mapping):
        raise ValueError(f"spec.{field}: must be an object")
    known = [t for t in order if t in specs]
    rest = sorted(t for t in specs if t not in order)
    return [(t, specs[t]) for t in known + rest]
