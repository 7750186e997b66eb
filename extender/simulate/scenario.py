"""Reading a scenario file (docs/simulate.md): every document checked, every error named."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gpuqueue.api import core, kueue
from gpuqueue.api.quantity import QuantityError
from gpuqueue.extender.simulate import fields
from gpuqueue.extender.simulate import kinds as K
from gpuqueue.extender.simulate.kinds import KindObject

SCENARIO_API = "gpuqueue.io/v1alpha1"
RUNTIME_ANNOTATION = "gpuqueue.io/runtime-seconds"

# kind -> (accepted apiVersions, model)
KINDS: dict[str, tuple[tuple[str, ...], type[BaseModel]]] = {
    "ResourceFlavor": (("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"), kueue.ResourceFlavor),
    "Topology": (("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1"), kueue.Topology),
    "Cohort": (("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1"), kueue.Cohort),
    "ClusterQueue": (("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"), kueue.ClusterQueue),
    "LocalQueue": (("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"), kueue.LocalQueue),
    "WorkloadPriorityClass": (("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"), kueue.WorkloadPriorityClass),
    "Configuration": (("config.kueue.x-k8s.io/v1beta2", "config.kueue.x-k8s.io/v1beta1"), kueue.Configuration),
    "Namespace": (("v1",), core.Namespace),
    "Node": (("v1",), core.Node),
    "PriorityClass": (("scheduling.k8s.io/v1",), core.PriorityClass),
    "Job": (("batch/v1",), core.Job),
}
NAMESPACED = {"LocalQueue", "Job"} | {k for k, (_, namespaced) in K.kinds().items() if namespaced}
WORKLOAD_KINDS = ("Job",) + tuple(k for k in K.kinds() if k not in K.RUNTIME_KINDS)
# Event occurrences a scenario may generate in all (`count` summed over its events): a run keeps a
# record of every job it saw, a few kilobytes each, so this bounds it to about two gigabytes.
MAX_OCCURRENCES = 1_000_000


class ScenarioError(Exception):
    """An invalid scenario: the message names the document and the field."""


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    name: str
    namespace: str | None = None


@dataclass
class Event:
    at: float
    order: int  # position in the file: events at the same instant run in file order
    action: str  # submit | apply | finish | delete
    obj: BaseModel | KindObject | None = None  # submit / apply
    job: str | None = None  # finish: namespace/name
    ref: ObjectRef | None = None  # delete
    where: str = ""  # for messages: "events[3]"
    count: int = 1  # occurrences, at `at`, `at + every`, ...
    every: float = 0.0
    repeated: bool = False  # `count` was given: submitted jobs are named NAME-0, NAME-1, ...

    def occurrence(self, n: int, at: float) -> "Event":
        if not self.repeated:
            return self
        obj = _nth_job(self.obj, n) if self.action == "submit" else self.obj
        return Event(at, self.order, self.action, obj, self.job, self.ref, self.where)

    def submitted_keys(self) -> Iterator[str]:
        """The namespace/name of every job this event submits (those with a generateName excepted)."""
        if self.action in ("submit", "apply") and is_workload(self.obj) and self.obj.metadata.name:
            if self.repeated and self.action == "submit":
                for n in range(self.count):
                    yield from workload_keys(_nth_job(self.obj, n))
            else:
                yield from workload_keys(self.obj)


def timeline(events: list[Event]) -> Iterator[Event]:
    """Every occurrence of every event, in order of time, then of the file (the copies of one
    event in turn). Repeated events are expanded as the run reaches them: a large `count` costs
    memory only for the jobs the run has seen."""
    heap = [(e.at, e.order, 0, e) for e in events]
    heapq.heapify(heap)
    while heap:
        at, order, n, e = heap[0]
        if n + 1 < e.count:
            heapq.heapreplace(heap, (e.at + (n + 1) * e.every, order, n + 1, e))
        else:
            heapq.heappop(heap)
        yield e.occurrence(n, at)


def is_workload(obj) -> bool:
    """A batch/v1 Job, or a document of another kind gpuqueue queues."""
    return isinstance(obj, core.Job) or (isinstance(obj, KindObject) and obj.integration is not None)


def workload_keys(obj) -> list[str]:
    """The keys a finish or delete event may name for a submitted object: the object's, and each
    Workload's it makes (a Deployment's pods, a LeaderWorkerSet's groups)."""
    key = job_key(obj)
    if isinstance(obj, KindObject):
        namespace = key.split("/", 1)[0]
        return [key] + [f"{namespace}/{name}" for name, _ in K.workloads(obj, None) if f"{namespace}/{name}" != key] \
            if obj.kind in ("Deployment", "LeaderWorkerSet") else [key]
    return [key]


@dataclass
class Scenario:
    objects: list[BaseModel | KindObject] = field(default_factory=list)  # quota objects, namespaces, nodes, ... in order
    jobs: list[core.Job | KindObject] = field(default_factory=list)  # workloads submitted at time 0
    events: list[Event] = field(default_factory=list)
    configuration: kueue.Configuration | None = None
    source: str = "<scenario>"

    def cluster_queue_names(self) -> list[str]:
        """Every ClusterQueue the scenario defines, at the start or by an event, by name."""
        objs = self.objects + [e.obj for e in self.events if e.action == "apply"]
        return sorted({o.metadata.name for o in objs if isinstance(o, kueue.ClusterQueue)})

    @property
    def has_nodes(self) -> bool:
        return self._defines(core.Node)

    @property
    def has_topologies(self) -> bool:
        return self._defines(kueue.Topology)

    def _defines(self, model: type) -> bool:
        return any(isinstance(o, model) for o in self.objects) or any(
            e.action == "apply" and isinstance(e.obj, model) for e in self.events
        )


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _describe(doc: Any) -> str:
    if not isinstance(doc, dict):
        return ""
    kind = doc.get("kind")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = meta.get("name") or meta.get("generateName")
    if kind and name:
        ns = meta.get("namespace")
        return f" ({kind} {ns + '/' if ns else ''}{name})"
    return f" ({kind})" if kind else ""


def _validation_message(exc: ValidationError, prefix: str) -> str:
    err = exc.errors()[0]
    path = _loc(tuple(err["loc"]))
    if prefix:
        path = f"{prefix}.{path}" if path else prefix
    msg = err["msg"]
    if err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "value_error" and msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return f"{path}: {msg}" if path else msg


def parse_object(doc: Any, where: str, prefix: str = "") -> BaseModel:
    """One Kubernetes object of a kind the scenario accepts; ScenarioError otherwise."""
    if not isinstance(doc, dict):
        raise ScenarioError(f"{where}: {prefix + ': ' if prefix else ''}expected an object, got {type(doc).__name__}")
    kind = doc.get("kind")
    api = doc.get("apiVersion")
    pre = f"{prefix}." if prefix else ""
    if kind is None:
        raise ScenarioError(f"{where}: {pre}kind: required field is missing")
    if kind in K.kinds():
        return _parse_kind_object(doc, where, prefix, pre)
    if kind not in KINDS:
        known = ", ".join(sorted(set(KINDS) | set(K.kinds())))
        raise ScenarioError(f"{where}: {pre}kind: unknown kind {kind!r} (known: {known}, Scenario)")
    versions, model = KINDS[kind]
    if api not in versions:
        raise ScenarioError(f"{where}: {pre}apiVersion: {kind} must be one of {', '.join(versions)}, got {api!r}")
    unknown = fields.unknown_field(doc, fields.document_shape(kind, model, api, versions[0]), prefix)
    if unknown:
        raise ScenarioError(f"{where}: {unknown}")
    try:
        obj = model.model_validate(doc)
    except ValidationError as exc:
        raise ScenarioError(f"{where}: {_validation_message(exc, prefix)}") from None
    except QuantityError as exc:  # pragma: no cover - pydantic wraps these
        raise ScenarioError(f"{where}: {prefix}: {exc}") from None
    meta = getattr(obj, "metadata", None)
    if meta is not None and not meta.name and not (kind == "Job" and meta.generate_name):
        raise ScenarioError(f"{where}: {pre}metadata.name: required field is missing")
    if kind == "Job":
        _check_job(obj, where, pre)
    return obj


def _parse_kind_object(doc: dict, where: str, prefix: str, pre: str) -> KindObject:
    kind = doc["kind"]
    api_version, _ = K.kinds()[kind]
    if doc.get("apiVersion") != api_version:
        raise ScenarioError(f"{where}: {pre}apiVersion: {kind} must be {api_version}, got {doc.get('apiVersion')!r}")
    try:
        obj = K.parse(doc, prefix)
        K.check_pod_sets(obj, prefix, None)
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    if not obj.metadata.name and not (obj.integration is not None and obj.metadata.generate_name):
        raise ScenarioError(f"{where}: {pre}metadata.name: required field is missing")
    replicas = (obj.doc.get("spec") or {}).get("replicas")
    if obj.kind in ("Deployment", "LeaderWorkerSet") and isinstance(replicas, int) and replicas > MAX_OCCURRENCES:
        raise ScenarioError(f"{where}: {pre}spec.replicas: {replicas} Workloads (one per "
                            f"{'pod' if obj.kind == 'Deployment' else 'group'}), more than the simulator's limit of "
                            f"{MAX_OCCURRENCES}")
    _check_runtime(obj.metadata, where, pre)
    return obj


def _check_job(job: core.Job, where: str, pre: str) -> None:
    if not job.spec.template.spec.containers:
        raise ScenarioError(f"{where}: {pre}spec.template.spec.containers: Required value")
    _check_runtime(job.metadata, where, pre)


def _check_runtime(meta, where: str, pre: str) -> None:
    raw = meta.annotations.get(RUNTIME_ANNOTATION)
    if raw is not None:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not (seconds > 0) or seconds != seconds or seconds == float("inf"):
            raise ScenarioError(
                f"{where}: {pre}metadata.annotations[{RUNTIME_ANNOTATION}]: must be a positive number of seconds, got {raw!r}"
            )


def job_runtime(job: core.Job | KindObject) -> float | None:
    raw = job.metadata.annotations.get(RUNTIME_ANNOTATION)
    return float(raw) if raw is not None else None


def job_key(job: core.Job | KindObject) -> str:
    return f"{job.metadata.namespace or 'default'}/{job.metadata.name}"


def _number(value: Any, where: str, name: str, minimum: float, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{where}.{name}: must be a number, got {value!r}")
    if integer and int(value) != value:
        raise ScenarioError(f"{where}.{name}: must be a whole number, got {value!r}")
    if value < minimum or value != value or value == float("inf"):
        raise ScenarioError(f"{where}.{name}: must be >= {minimum:g}, got {value!r}")
    return float(value)


_EVENT_ACTIONS = ("submit", "apply", "finish", "delete")


def _parse_events(doc: dict, where: str) -> list[Event]:
    raw = doc.get("events")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: events: must be a list")
    out: list[Event] = []
    occurrences = 0
    for i, ev in enumerate(raw):
        ew = f"events[{i}]"
        if not isinstance(ev, dict):
            raise ScenarioError(f"{where}: {ew}: must be a mapping")
        if "at" not in ev:
            raise ScenarioError(f"{where}: {ew}.at: required field is missing")
        at = _number(ev["at"], f"{where}: {ew}", "at", 0)
        actions = [a for a in _EVENT_ACTIONS if a in ev]
        if len(actions) != 1:
            raise ScenarioError(f"{where}: {ew}: needs exactly one of {', '.join(_EVENT_ACTIONS)}")
        action = actions[0]
        every = count = None
        if "every" in ev or "count" in ev:
            if "count" not in ev:
                raise ScenarioError(f"{where}: {ew}.count: required with every")
            count = int(_number(ev["count"], f"{where}: {ew}", "count", 1, integer=True))
            every = _number(ev.get("every", 0), f"{where}: {ew}", "every", 0)
        occurrences += count or 1
        if occurrences > MAX_OCCURRENCES:
            raise ScenarioError(f"{where}: {ew}.count: the events would occur {occurrences} times in all, "
                                f"more than the simulator's limit of {MAX_OCCURRENCES}")
        body = ev[action]
        template = _parse_action(action, body, f"{where}: {ew}.{action}", where, f"{ew}.{action}")
        out.append(Event(at=at, order=i, action=action, where=f"{where}: {ew}", count=count or 1,
                         every=every or 0.0, repeated=count is not None, **template))
    return out


def _nth_job(job: core.Job | KindObject, n: int) -> core.Job | KindObject:
    """The n-th job of a repeated submit: its own metadata, the template's spec shared
    (nothing changes a submitted spec, and thousands of copies would cost)."""
    if not job.metadata.name:
        return job
    if isinstance(job, KindObject):
        return job.named(f"{job.metadata.name}-{n}")
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"name": f"{job.metadata.name}-{n}"})})


def _parse_action(action: str, body: Any, full: str, where: str, prefix: str) -> dict[str, Any]:
    if action == "submit":
        obj = parse_object(body, where, prefix)
        if not is_workload(obj):
            name = obj.kind if isinstance(obj, KindObject) else obj.__class__.__name__
            raise ScenarioError(f"{full}: submit takes a workload ({', '.join(WORKLOAD_KINDS)}), got {name}")
        return {"obj": obj}
    if action == "apply":
        return {"obj": parse_object(body, where, prefix)}
    if action == "finish":
        if not isinstance(body, str) or body.count("/") != 1 or not all(body.split("/")):
            raise ScenarioError(f"{full}: must be NAMESPACE/NAME of a Job, got {body!r}")
        return {"job": body}
    # delete
    if not isinstance(body, dict):
        raise ScenarioError(f"{full}: must be a mapping with kind, name and (for namespaced kinds) namespace")
    kind = body.get("kind")
    if (kind not in KINDS and kind not in K.kinds()) or kind == "Configuration":
        raise ScenarioError(f"{full}.kind: unknown kind {kind!r}")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"{full}.name: required field is missing")
    ns = body.get("namespace")
    if kind in NAMESPACED:
        ns = ns or "default"
    return {"ref": ObjectRef(kind, name, ns)}


def load_scenario(text: str, source: str = "<scenario>") -> Scenario:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(f"{source}: {where}not valid YAML: {problem}") from None
    sc = Scenario(source=source)
    seen_scenario = False
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        where = f"{source}: document {i + 1}{_describe(doc)}"
        if isinstance(doc, dict) and doc.get("kind") == "Scenario":
            if doc.get("apiVersion") != SCENARIO_API:
                raise ScenarioError(f"{where}: apiVersion: Scenario must be {SCENARIO_API}, got {doc.get('apiVersion')!r}")
            if seen_scenario:
                raise ScenarioError(f"{where}: at most one Scenario document")
            seen_scenario = True
            unknown = fields.unknown_field(doc, fields.SCENARIO)
            if unknown:
                raise ScenarioError(f"{where}: {unknown}")
            sc.events.extend(_parse_events(doc, where))
            continue
        obj = parse_object(doc, where)
        if isinstance(obj, kueue.Configuration):
            if sc.configuration is not None:
                raise ScenarioError(f"{where}: at most one Configuration document")
            _check_configuration(obj, where)
            sc.configuration = obj
        elif is_workload(obj):
            sc.jobs.append(obj)
        else:
            sc.objects.append(obj)
    _check_references(sc)
    _check_runtimes(sc)
    if not sc.jobs and not any(True for e in sc.events if e.action == "submit" or is_workload(e.obj)):
        raise ScenarioError(f"{source}: no Jobs: the scenario submits none (a batch/v1 Job document, or a "
                            f"submit event), so there is nothing to simulate")
    return sc


def _check_runtimes(sc: Scenario) -> None:
    """A TrainJob must name a Trainer runtime the scenario defines (at the start or by an event)."""
    from gpuqueue.jobframework.kinds.trainjob import runtime_ref
    objs = sc.objects + [e.obj for e in sc.events if e.action == "apply"]
    defined = {(o.kind, o.key) for o in objs if isinstance(o, KindObject) and o.kind in K.RUNTIME_KINDS}
    trainjobs = [(j, f"{sc.source}: TrainJob {job_key(j)}") for j in sc.jobs] + [(e.obj, e.where) for e in sc.events]
    for obj, where in trainjobs:
        if not isinstance(obj, KindObject) or obj.kind != "TrainJob":
            continue
        kind, name = runtime_ref(obj.doc)
        key = f"{obj.namespace}/{name}" if kind == "TrainingRuntime" else name
        if (kind, key) not in defined:
            raise ScenarioError(f"{where}: spec.runtimeRef: {kind} {key} is never defined in the scenario")


def _check_configuration(cfg: kueue.Configuration, where: str) -> None:
    if cfg.integrations is not None:
        from gpuqueue.jobframework.registry import IntegrationsConfig
        try:
            IntegrationsConfig.from_kueue_configuration({"integrations": cfg.integrations})
        except ValueError as exc:
            raise ScenarioError(f"{where}: {exc}") from None
    if cfg.fair_sharing is not None:
        strategies = cfg.fair_sharing.preemption_strategies
        allowed = (
            ["LessThanOrEqualToFinalShare"],
            ["LessThanInitialShare"],
            ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
        )
        if strategies not in allowed:
            raise ScenarioError(
                f"{where}: fairSharing.preemptionStrategies: must be [LessThanOrEqualToFinalShare], "
                f"[LessThanInitialShare] or [LessThanOrEqualToFinalShare, LessThanInitialShare], got {strategies}"
            )


def _check_references(sc: Scenario) -> None:
    """A finish or delete event must name a job that is submitted (at time 0 or by an event)."""
    if not any(e.action == "finish" or (e.ref and e.ref.kind in WORKLOAD_KINDS) for e in sc.events):
        return
    submitted = {k for j in sc.jobs if j.metadata.name for k in workload_keys(j)}
    for e in sc.events:
        submitted.update(e.submitted_keys())
    for e in sc.events:
        if e.action == "finish" and e.job not in submitted:
            raise ScenarioError(f"{e.where}.finish: job {e.job} is never submitted")
        if e.action == "delete" and e.ref and e.ref.kind in WORKLOAD_KINDS:
            key = f"{e.ref.namespace}/{e.ref.name}"
            if key not in submitted:
                raise ScenarioError(f"{e.where}.delete: job {key} is never submitted")
