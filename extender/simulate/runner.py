"""The simulator's timeline: scripted events and job completions drive the real engine."""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.placement.model import GPU_RESOURCE
from gpuqueue.extender.quota.engine import QuotaEngine
from gpuqueue.extender.quota.model import WorkloadSpec
from gpuqueue.extender.quota.tas.flavors import TopologyFlavors
from gpuqueue.extender.controller.clusterview.tas_nodes import NodeCapacities
from gpuqueue.extender.simulate import kinds as K
from gpuqueue.extender.simulate.kinds import KindObject
from gpuqueue.extender.simulate.placement import NodePlacer
from gpuqueue.extender.simulate.scenario import Event, Scenario, job_runtime, timeline
from gpuqueue.api import core, kueue
from gpuqueue.api.topology import TopologyAssignment
from gpuqueue.jobframework.kinds import pods as P
from gpuqueue.jobframework.managed import DEFAULT_PRIORITY_CLASS_ANNOTATION, ManagedJobsConfig, StaticQueueView
from gpuqueue.jobframework.mutation import mutate_job
from gpuqueue.jobframework.podset import PodSet
from gpuqueue.jobframework.registry import IntegrationsConfig, supported_frameworks

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class JobRecord:
    key: str
    cluster_queue: str | None = None
    runtime: float | None = None  # total admitted seconds it needs; None: until finished
    progress: float = 0.0
    admitted_at: float | None = None
    state: str = "pending"  # pending | admitted | finished | deleted | unmanaged
    token: int = 0  # bumped whenever the job stops running: stale completion entries are skipped


@dataclass
class Step:
    time: float
    events: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)


class Simulation:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        cfg = scenario.configuration or kueue.Configuration()
        self.engine = QuotaEngine(fair_sharing=convert.fair_sharing_spec(cfg))
        self.priorities = convert.PriorityResolver()
        self.queue_view = StaticQueueView()
        self.jobs_config = ManagedJobsConfig.from_kueue_configuration(cfg.to_dict())
        # Without an integrations section every kind is queued: a scenario that submits a kind asks
        # for it (Kueue's own default is batch/job alone).
        self.integrations = (IntegrationsConfig.from_kueue_configuration(cfg.to_dict()) if cfg.integrations is not None
                             else IntegrationsConfig(tuple(supported_frameworks())))
        self.runtimes: dict[tuple[str, str], dict] = {}  # Trainer runtimes by (kind, namespace/name or name)
        self.objects: dict[str, list[str]] = {}  # a submitted object's key -> the keys of its Workloads
        self.groups: dict[str, dict[str, dict]] = {}  # a pod group gathering: "ns/group" -> pod key -> pod
        # The nodes: where admitted pods go (only when the scenario gives Nodes), and what admission
        # to TAS and placement-aware flavors reads (also with a Topology and no Nodes: nothing fits)
        self.placer = NodePlacer() if scenario.has_nodes or scenario.has_topologies else None
        self.places_pods = scenario.has_nodes
        if self.placer is not None:
            self.engine.nodes = NodeCapacities(self.placer)
        self.tas = TopologyFlavors()
        self.jobs: dict[str, JobRecord] = {}
        self.cq_order: list[str] = []
        self.flavor_order: list[str] = []
        self.preemptions = 0
        self._generated = 0
        self._last_usage: dict[str, dict[tuple[str, str], int]] = {}
        self._completions: list[tuple[float, str, int]] = []  # (end time, job, token)
        self._touched: set[str] = set()  # ClusterQueues whose usage may have changed in this step
        self._all_touched = True
        self.now = 0.0

    # -- objects -------------------------------------------------------------------------------
    def apply(self, obj: BaseModel | KindObject) -> list[dict[str, Any]]:
        """Create or replace an object; returns report events (for Jobs)."""
        e = self.engine
        if isinstance(obj, KindObject):
            if obj.integration is not None:
                return self.submit(obj)
            self.runtimes[(obj.kind, obj.key)] = obj.doc
            return []
        if not isinstance(obj, core.Job):
            self._all_touched = True
        if isinstance(obj, kueue.ResourceFlavor):
            e.set_flavor(self.tas.flavor(obj))
            if obj.metadata.name not in self.flavor_order:
                self.flavor_order.append(obj.metadata.name)
        elif isinstance(obj, kueue.Topology):
            for spec in self.tas.topology(obj.metadata.name, obj.level_keys()):
                e.set_flavor(spec)
        elif isinstance(obj, kueue.Cohort):
            e.set_cohort(convert.cohort_spec(obj))
        elif isinstance(obj, kueue.ClusterQueue):
            e.set_cluster_queue(convert.cluster_queue_spec(obj))
            if obj.metadata.name not in self.cq_order:
                self.cq_order.append(obj.metadata.name)
            for rg in obj.spec.resource_groups:
                for f in rg.flavors:
                    if f.name not in self.flavor_order:
                        self.flavor_order.append(f.name)
        elif isinstance(obj, kueue.LocalQueue):
            spec = convert.local_queue_spec(obj)
            e.set_local_queue(spec)
            self.queue_view.local_queues.add((spec.namespace, spec.name))
        elif isinstance(obj, kueue.WorkloadPriorityClass):
            self.priorities.set_workload_priority_class(obj)
            if obj.metadata.annotations.get(DEFAULT_PRIORITY_CLASS_ANNOTATION) == "true":
                self.queue_view.default_priority_class_name = obj.metadata.name
        elif isinstance(obj, core.PriorityClass):
            self.priorities.set_priority_class(obj)
        elif isinstance(obj, core.Namespace):
            labels = {"kubernetes.io/metadata.name": obj.metadata.name, **obj.metadata.labels}
            e.set_namespace(obj.metadata.name, labels)
            self.queue_view.namespaces[obj.metadata.name] = labels
        elif isinstance(obj, core.Node):
            assert self.placer is not None
            self.placer.set_node(obj)
            e.capacity_changed()
        elif isinstance(obj, core.Job):
            return self.submit(obj)
        return []

    def delete(self, kind: str, name: str, namespace: str | None) -> list[dict[str, Any]]:
        e = self.engine
        if kind in K.RUNTIME_KINDS:
            self.runtimes.pop((kind, f"{namespace}/{name}" if namespace else name), None)
            return []
        if kind == "Job" or kind in K.kinds():
            return self.remove_job(f"{namespace}/{name}", "Deleted")
        self._all_touched = True
        if kind == "ResourceFlavor":
            self.tas.remove_flavor(name)
            e.remove_flavor(name)
        elif kind == "Topology":
            for spec in self.tas.topology(name, None):
                e.set_flavor(spec)
        elif kind == "Cohort":
            e.remove_cohort(name)
        elif kind == "ClusterQueue":
            e.remove_cluster_queue(name)
        elif kind == "LocalQueue":
            e.remove_local_queue(namespace or "default", name)
            self.queue_view.local_queues.discard((namespace or "default", name))
        elif kind == "WorkloadPriorityClass":
            self.priorities.workload_classes.pop(name, None)
        elif kind == "PriorityClass":
            self.priorities.pod_classes.pop(name, None)
        elif kind == "Namespace":
            e.set_namespace(name, {"kubernetes.io/metadata.name": name})
            self.queue_view.namespaces.pop(name, None)
        elif kind == "Node" and self.placer is not None:
            self.placer.remove_node(name)
            e.capacity_changed()
        return []

    # -- jobs -------------------------------------------------------------------------------------
    def _generate_name(self, prefix: str) -> str:
        self._generated += 1
        digest = hashlib.sha256(f"{prefix}{self._generated}".encode()).digest()
        return prefix + "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:5])

    def submit(self, job: core.Job | KindObject) -> list[dict[str, Any]]:
        if isinstance(job, KindObject):
            return self._submit_kind(job)
        meta = job.metadata.model_copy()
        meta.namespace = meta.namespace or "default"
        if not meta.name:
            meta.name = self._generate_name(meta.generate_name or "job-")
        key = f"{meta.namespace}/{meta.name}"
        existing = self.jobs.get(key)
        if existing is not None and existing.state not in ("deleted",):
            return [{"kind": "Rejected", "job": key, "message": f'jobs.batch "{meta.name}" already exists'}]
        # The webhook's mutation reads and writes only metadata and spec.suspend.
        seen = {"apiVersion": job.api_version, "kind": job.kind, "metadata": meta.to_dict(), "spec": {"suspend": job.spec.suspend}}
        result = mutate_job(seen, self.queue_view, self.jobs_config)
        if not result.managed:
            self.jobs[key] = JobRecord(key, state="unmanaged")
            return [{"kind": "Ignored", "job": key, "message": f"not managed by gpuqueue: {result.reason.removeprefix('unmanaged: ')}"}]
        meta.labels = dict(result.job["metadata"].get("labels") or {})
        mutated = job.model_copy(update={"metadata": meta})
        wl = convert.workload_from_job(mutated, self.priorities, created=self.now, seq=self.engine.next_seq())
        if result.queue_name is None:
            wl.queue_name = ""
        self.engine.submit(wl)
        self.jobs[key] = JobRecord(key, runtime=job_runtime(job))
        return []

    # -- the other workload kinds ----------------------------------------------------------------------
    def _lookup(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.runtimes.get((kind, f"{namespace}/{name}" if namespace else name))

    def _submit_kind(self, obj: KindObject) -> list[dict[str, Any]]:
        integration = obj.integration
        meta = obj.metadata.model_copy()
        meta.namespace = meta.namespace or "default"
        if not meta.name:
            meta.name = self._generate_name(meta.generate_name or f"{obj.kind.lower()}-")
        key = f"{meta.namespace}/{meta.name}"
        if key in self.objects and any(self.jobs[k].state != "deleted" for k in self.objects[key] if k in self.jobs):
            return [{"kind": "Rejected", "job": key,
                     "message": f'{integration.plural}{"." + integration.group if integration.group else ""} '
                                f'"{meta.name}" already exists'}]
        seen = {"apiVersion": obj.doc["apiVersion"], "kind": obj.kind, "metadata": meta.to_dict(), "spec": {}}
        result = mutate_job(seen, self.queue_view, self.jobs_config)
        why = None if result.managed else result.reason.removeprefix("unmanaged: ")
        if why is None and not self.integrations.enabled(integration):
            why = f"integration {integration.framework} is not enabled (integrations.frameworks)"
        if why is not None:
            self.objects[key] = [key]
            self.jobs[key] = JobRecord(key, state="unmanaged")
            return [{"kind": "Ignored", "job": key, "message": f"not managed by gpuqueue: {why}"}]
        meta.labels = dict(result.job["metadata"].get("labels") or {})
        obj = obj.with_metadata(meta)
        try:
            made = self._group_workloads(obj, key) if P.group_name(obj.doc) and obj.kind == "Pod" \
                else K.workloads(obj, self._lookup)
        except ValueError as exc:
            return [{"kind": "Rejected", "job": key, "message": str(exc)}]
        priority = self.priorities.priority_for(meta.labels, integration.priority_class_name(obj.doc, self._lookup))
        keys = []
        for name, sets in made:
            wl_key = f"{meta.namespace}/{name}"
            spec = WorkloadSpec(wl_key, meta.namespace, "" if result.queue_name is None else result.queue_name,
                                tuple(convert.pod_set_from_template(n, c, t) for n, c, t in K.template_models(sets)),
                                priority=priority, created=self.now, seq=self.engine.next_seq(), uid=wl_key)
            self.engine.submit(spec)
            self.jobs[wl_key] = JobRecord(wl_key, runtime=job_runtime(obj))
            keys.append(wl_key)
        self.objects[key] = keys or [key]
        return []

    def _group_workloads(self, pod: KindObject, key: str) -> list[tuple[str, list[PodSet]]]:
        """A pod of a group waits for its group: the group's Workload is made when as many pods as
        it counts are there (Kueue's pod-group-total-count)."""
        group = f"{pod.namespace}/{P.group_name(pod.doc)}"
        gathering = self.groups.setdefault(group, {})
        gathering[key] = pod.doc
        if group in self.jobs or len(gathering) < P.group_total_count(pod.doc):
            return []
        return [(P.group_name(pod.doc), P.group_pod_sets(gathering.values()))]

    def remove_job(self, key: str, kind: str) -> list[dict[str, Any]]:
        if key in self.objects and self.objects[key] != [key]:
            return [ev for wl_key in self.objects[key] for ev in self.remove_job(wl_key, kind)]
        rec = self.jobs.get(key)
        if rec is None or rec.state in ("finished", "deleted"):
            return []
        if rec.state == "unmanaged":
            rec.state = "deleted" if kind == "Deleted" else "finished"
            return [{"kind": kind, "job": key}]
        cq = self.engine.admission(key).cluster_queue if self.engine.is_admitted(key) else rec.cluster_queue
        if cq:
            self._touched.add(cq)
        rec.token += 1
        self.engine.finish(key)
        if self.placer is not None:
            self.placer.release(key)
        rec.state = "finished" if kind == "Finished" else "deleted"
        rec.admitted_at = None
        ev: dict[str, Any] = {"kind": kind, "job": key}
        if cq:
            ev["clusterQueue"] = cq
        return [ev]

    # -- the timeline -------------------------------------------------------------------------
    def _next_completion(self) -> float | None:
        heap = self._completions
        while heap:
            t, key, token = heap[0]
            rec = self.jobs.get(key)
            if rec is not None and rec.state == "admitted" and rec.token == token:
                return t
            heapq.heappop(heap)
        return None

    def _due(self, t: float) -> list[str]:
        """Jobs whose runtime is up at `t`, in key order."""
        due = []
        heap = self._completions
        while heap and heap[0][0] <= t + 1e-9:
            _, key, token = heapq.heappop(heap)
            rec = self.jobs.get(key)
            if rec is not None and rec.state == "admitted" and rec.token == token:
                due.append(key)
        return sorted(due)

    def run(self, until: float | None = None):
        """Yields one Step per instant at which anything happened."""
        events = timeline(self.scenario.events)
        upcoming = next(events, None)
        first = True
        while True:
            candidates = []
            if first:
                candidates.append(0.0)
            if upcoming is not None:
                candidates.append(upcoming.at)
            completion = self._next_completion()
            if completion is not None:
                candidates.append(completion)
            wakeup = self.engine.next_wakeup()
            if wakeup is not None:
                candidates.append(wakeup)
            if not candidates:
                return
            t = min(candidates)
            if until is not None and t > until:
                return
            self.now = t
            self.engine.advance(t)
            step = Step(time=t)
            if first:
                for obj in self.scenario.objects:
                    step.events.extend(self.apply(obj))
                for job in self.scenario.jobs:
                    step.events.extend(self.submit(job))
                first = False
            # completions first: a job whose time is up is done before anything else happens
            for key in self._due(t):
                step.events.extend(self.remove_job(key, "Finished"))
            while upcoming is not None and upcoming.at == t:
                step.events.extend(self._run_event(upcoming))
                upcoming = next(events, None)
            step.events.extend(self._schedule(t))
            step.usage = self._usage_changes()
            if step.events or step.usage:
                yield step

    def _run_event(self, ev: Event) -> list[dict[str, Any]]:
        if ev.action == "submit":
            assert isinstance(ev.obj, (core.Job, KindObject))
            return self.submit(ev.obj)
        if ev.action == "apply":
            assert ev.obj is not None
            return self.apply(ev.obj)
        if ev.action == "finish":
            assert ev.job is not None
            return self.remove_job(ev.job, "Finished")
        assert ev.ref is not None
        return self.delete(ev.ref.kind, ev.ref.name, ev.ref.namespace)

    def _schedule(self, now: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for dec in self.engine.schedule(now):
            if isinstance(dec, d.Admitted):
                out.extend(self._on_admitted(dec, now))
            elif isinstance(dec, d.Preempted):
                self._stop_running(dec.key, now)
                self.preemptions += 1
                out.append({"kind": "Preempted", "job": dec.key, "clusterQueue": dec.cluster_queue,
                            "preemptor": dec.preemptor, "reason": dec.reason})
            elif isinstance(dec, d.Evicted):
                self._stop_running(dec.key, now)
                out.append({"kind": "Evicted", "job": dec.key, "clusterQueue": dec.cluster_queue,
                            "reason": dec.reason, "message": dec.message})
            elif isinstance(dec, d.Pending):
                rec = self.jobs[dec.key]
                rec.cluster_queue = dec.cluster_queue
                ev: dict[str, Any] = {"kind": "Pending", "job": dec.key}
                if dec.cluster_queue is not None:
                    ev["clusterQueue"] = dec.cluster_queue
                ev["message"] = dec.message
                out.append(ev)
        return out

    def _stop_running(self, key: str, now: float) -> None:
        rec = self.jobs[key]
        rec.token += 1
        if rec.cluster_queue:
            self._touched.add(rec.cluster_queue)
        if rec.admitted_at is not None:
            rec.progress += now - rec.admitted_at
        rec.admitted_at = None
        rec.state = "pending"
        if self.placer is not None:
            self.placer.release(key)

    def _on_admitted(self, dec: d.Admitted, now: float) -> list[dict[str, Any]]:
        rec = self.jobs[dec.key]
        rec.state = "admitted"
        rec.admitted_at = now
        rec.cluster_queue = dec.admission.cluster_queue
        self._touched.add(rec.cluster_queue)
        if rec.runtime is not None:
            rec.token += 1
            heapq.heappush(self._completions, (now + rec.runtime - rec.progress, dec.key, rec.token))
        ev: dict[str, Any] = {
            "kind": "Admitted",
            "job": dec.key,
            "clusterQueue": dec.admission.cluster_queue,
            "flavors": admitted_flavors(dec.admission.flavors),
            "borrowing": dec.admission.borrowing,
        }
        if len(dec.admission.flavors) > 1:
            ev["podSets"] = {ps: {"count": dec.admission.counts.get(ps, 1), "flavors": dict(sorted(f.items()))}
                             for ps, f in sorted(dec.admission.flavors.items())}
        if dec.admission.topology:
            ev["topologyAssignment"] = {ps: topology_assignment(ta) for ps, ta in sorted(dec.admission.topology.items())}
        out = [ev]
        if self.placer is not None and self.places_pods:
            placed = self.placer.place(dec.key, self.engine, dec.admission)
            if placed.nodes is not None:
                ev["nodes"] = placed.nodes
            else:
                out.append({"kind": "Unschedulable", "job": dec.key, "clusterQueue": dec.admission.cluster_queue,
                            "message": placed.message})
        return out

    # -- reporting --------------------------------------------------------------------------------
    def usage_of(self, cq: str) -> dict[tuple[str, str], int]:
        return {fr: v for fr, v in self.engine.usage(cq).items() if v}

    def pictured_resource(self) -> str | None:
        """The resource the pictures count: nvidia.com/gpu, or the first one a ClusterQueue covers."""
        specs = self.engine.state.cq_specs.values()
        covered = [r for s in specs for rg in s.resource_groups for r in rg.covered_resources]
        if GPU_RESOURCE in covered:
            return GPU_RESOURCE
        return covered[0] if covered else None

    def capacity(self, flavor: str, resource: str) -> int:
        """All the quota there is of `resource` in `flavor`: every cohort tree's, summed."""
        roots = {id(n.root()): n.root() for n in self.engine.state.cq_nodes.values()}
        return sum(r.subtree_quota.get((flavor, resource), 0) for r in roots.values())

    def nominal_quota(self, cq: str, flavor: str, resource: str) -> int:
        spec = self.engine.state.cq_specs.get(cq)
        quota = spec.quotas.get((flavor, resource)) if spec is not None else None
        return quota.nominal if quota is not None else 0

    def pending_by_cluster_queue(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.engine.pending.values():
            if p.cluster_queue:
                counts[p.cluster_queue] = counts.get(p.cluster_queue, 0) + 1
        return counts

    def _usage_changes(self) -> dict[str, dict[str, dict[str, str]]]:
        changed: dict[str, dict[str, dict[str, str]]] = {}
        if self._all_touched:
            names = set(self.engine.state.cq_specs) | set(self._last_usage)
        else:
            names = self._touched
        self._touched = set()
        self._all_touched = False
        for cq in sorted(names, key=self._cq_sort_key):
            now = self.usage_of(cq)
            if now != self._last_usage.get(cq, {}):
                changed[cq] = format_usage(now)
                self._last_usage[cq] = now
        return changed

    def _cq_sort_key(self, cq: str) -> tuple[int, str]:
        return (self.cq_order.index(cq) if cq in self.cq_order else len(self.cq_order), cq)

    def summary(self, last_time: float) -> dict[str, Any]:
        admitted = sorted(k for k, r in self.jobs.items() if r.state == "admitted")
        finished = sorted(k for k, r in self.jobs.items() if r.state == "finished")
        pending = [
            {"job": k, "message": self.engine.pending_message(k) or ""}
            for k, r in sorted(self.jobs.items())
            if r.state == "pending"
        ]
        usage = {cq: format_usage(self.usage_of(cq)) for cq in sorted(self.engine.state.cq_specs, key=self._cq_sort_key)}
        return {"final": {"time": last_time, "admitted": admitted, "finished": finished, "pending": pending,
                          "preemptions": self.preemptions, "usage": usage}}


def admitted_flavors(by_pod_set: dict[str, dict[str, str]]) -> dict[str, str]:
    """Each resource's flavor; where pod sets of one workload took a resource in several flavors,
    those flavors joined by commas (``podSets`` has each pod set's)."""
    out: dict[str, set[str]] = {}
    for flavors in by_pod_set.values():
        for res, flavor in flavors.items():
            out.setdefault(res, set()).add(flavor)
    return {res: ",".join(sorted(fs)) for res, fs in sorted(out.items())}


def topology_assignment(ta: TopologyAssignment) -> dict[str, Any]:
    """A pod set's topology assignment as Kueue's v1beta1 Workload writes it: the levels, and each
    domain's values at those levels with its pod count."""
    return {"levels": list(ta.levels), "domains": [{"values": list(v), "count": c} for v, c in ta.domains]}


def format_usage(usage: dict[tuple[str, str], int]) -> dict[str, dict[str, str]]:
    from gpuqueue.api.quantity import format_engine_int

    out: dict[str, dict[str, str]] = {}
    for (flavor, res), v in sorted(usage.items()):
        out.setdefault(flavor, {})[res] = format_engine_int(res, v)
    return out
