"""From Kubernetes objects (the pydantic models) to the engine's specs."""

from __future__ import annotations

from typing import Mapping

from gpuqueue.extender.quota.fairsharing import FairSharing
from gpuqueue.api import core, kueue
from gpuqueue.api.duration import parse_duration
from gpuqueue.api.podrequests import engine_pod_requests
from gpuqueue.api.quantity import to_engine_int
from gpuqueue.api.topology import PLACEMENT_AWARE_ANNOTATION
from gpuqueue.extender.quota.tas.request import from_annotations as topology_request
from gpuqueue.extender.quota.model import (
    ClusterQueueSpec,
    CohortSpec,
    FlavorResource,
    FlavorSpec,
    LocalQueueSpec,
    PodSetSpec,
    PreemptionSpec,
    Quota,
    ResourceGroupSpec,
    WorkloadSpec,
)

MAIN_POD_SET = "main"


def _quotas(groups: list[kueue.ResourceGroup]) -> tuple[tuple[ResourceGroupSpec, ...], dict[FlavorResource, Quota]]:
    specs = []
    quotas: dict[FlavorResource, Quota] = {}
    for rg in groups:
        specs.append(ResourceGroupSpec(tuple(rg.covered_resources), tuple(f.name for f in rg.flavors)))
        for f in rg.flavors:
            for r in f.resources:
                quotas[(f.name, r.name)] = Quota(
                    nominal=to_engine_int(r.name, r.nominal_quota),
                    borrowing_limit=None if r.borrowing_limit is None else to_engine_int(r.name, r.borrowing_limit),
                    lending_limit=None if r.lending_limit is None else to_engine_int(r.name, r.lending_limit),
                )
    return tuple(specs), quotas


def _weight_milli(fs: kueue.FairSharing | None) -> int:
    if fs is None or fs.weight is None:
        return 1000
    w = fs.weight.value * 1000
    return int(w) if w.denominator == 1 else int(w) + 1


def fair_sharing_spec(cfg: kueue.Configuration) -> FairSharing | None:
    """The engine's fair-sharing settings from Kueue's Configuration (None: fair sharing off)."""
    fs = cfg.fair_sharing
    if fs is None:
        return None
    return FairSharing(
        strategies=tuple(fs.preemption_strategies),
        usage_half_life=parse_duration(fs.usage_half_life_time) if fs.usage_half_life_time else None,
        minimum_admitted_time=parse_duration(fs.minimum_admitted_time) if fs.minimum_admitted_time else None,
    )


def flavor_spec(obj: kueue.ResourceFlavor, topologies: Mapping[str, tuple[str, ...]] | None = None) -> FlavorSpec:
    """``topologies``: the levels of each Topology by name (a TAS flavor whose Topology is not among
    them has none yet)."""
    s = obj.spec
    return FlavorSpec(
        name=obj.metadata.name or "",
        node_labels=tuple(sorted(s.node_labels.items())),
        node_taints=tuple(t.to_spec() for t in s.node_taints),
        tolerations=tuple(t.to_spec() for t in s.tolerations),
        topology_name=s.topology_name or None,
        topology_levels=(topologies or {}).get(s.topology_name) if s.topology_name else None,
        placement_aware=(obj.metadata.annotations.get(PLACEMENT_AWARE_ANNOTATION) or "").lower() == "true",
    )


def cohort_spec(obj: kueue.Cohort) -> CohortSpec:
    _, quotas = _quotas(obj.spec.resource_groups)
    return CohortSpec(
        name=obj.metadata.name or "",
        parent=obj.spec.parent_name or None,
        quotas=quotas,
        fair_weight_milli=_weight_milli(obj.spec.fair_sharing),
    )


def cluster_queue_spec(obj: kueue.ClusterQueue) -> ClusterQueueSpec:
    s = obj.spec
    groups, quotas = _quotas(s.resource_groups)
    bwc = s.preemption.borrow_within_cohort
    return ClusterQueueSpec(
        name=obj.metadata.name or "",
        cohort=s.cohort_name or None,
        resource_groups=groups,
        quotas=quotas,
        namespace_selector=s.namespace_selector.to_dict() if s.namespace_selector is not None else None,
        queueing_strategy=s.queueing_strategy,
        preemption=PreemptionSpec(
            reclaim_within_cohort=s.preemption.reclaim_within_cohort,
            within_cluster_queue=s.preemption.within_cluster_queue,
            borrow_within_cohort=bwc.policy if bwc else "Never",
            max_priority_threshold=bwc.max_priority_threshold if bwc else None,
        ),
        when_can_borrow=s.flavor_fungibility.when_can_borrow,
        when_can_preempt=s.flavor_fungibility.when_can_preempt,
        fair_weight_milli=_weight_milli(s.fair_sharing),
        stop_policy=s.stop_policy,
    )


def local_queue_spec(obj: kueue.LocalQueue) -> LocalQueueSpec:
    return LocalQueueSpec(
        namespace=obj.metadata.namespace or "default",
        name=obj.metadata.name or "",
        cluster_queue=obj.spec.cluster_queue,
        stop_policy=obj.spec.stop_policy,
    )


class PriorityResolver:
    """A Job's priority as Kueue sees it: its WorkloadPriorityClass label, else its pod
    template's PriorityClass, else the global default PriorityClass, else 0."""

    def __init__(self) -> None:
        self.workload_classes: dict[str, int] = {}
        self.pod_classes: dict[str, int] = {}
        self.global_default: str | None = None

    def set_workload_priority_class(self, obj: kueue.WorkloadPriorityClass) -> None:
        self.workload_classes[obj.metadata.name or ""] = obj.value

    def set_priority_class(self, obj: core.PriorityClass) -> None:
        name = obj.metadata.name or ""
        self.pod_classes[name] = obj.value
        if obj.global_default:
            self.global_default = name
        elif self.global_default == name:
            self.global_default = None

    def priority_of(self, job: core.Job) -> int:
        spec = job.spec.template.spec
        return self.priority_for(job.metadata.labels, spec.priority_class_name, spec.priority)

    def priority_for(self, labels: dict[str, str], pod_class: str | None, pod_priority: int | None = None) -> int:
        """Of any workload: its labels, and the PriorityClass (or priority) its pods ask for."""
        wpc = labels.get(kueue.PRIORITY_CLASS_LABEL)
        if wpc and wpc in self.workload_classes:
            return self.workload_classes[wpc]
        if pod_class and pod_class in self.pod_classes:
            return self.pod_classes[pod_class]
        if pod_priority is not None:
            return pod_priority
        if self.global_default:
            return self.pod_classes[self.global_default]
        return 0


_POD_SETS: dict[tuple[int, str, int], tuple[core.PodTemplateSpec, PodSetSpec]] = {}


def pod_set_from_template(name: str, count: int, template: core.PodTemplateSpec) -> PodSetSpec:
    """The engine's pod set; computed once per template object (Jobs generated from one
    template share it)."""
    key = (id(template), name, count)
    hit = _POD_SETS.get(key)
    if hit is not None and hit[0] is template:
        return hit[1]
    ps = _pod_set(name, count, template)
    if len(_POD_SETS) > 10_000:
        _POD_SETS.clear()
    _POD_SETS[key] = (template, ps)
    return ps


def _pod_set(name: str, count: int, template: core.PodTemplateSpec) -> PodSetSpec:
    spec = template.spec
    per_pod = engine_pod_requests(spec)
    terms: list[tuple[tuple[str, str, tuple[str, ...]], ...]] = []
    na = spec.affinity.node_affinity if spec.affinity else None
    if na and na.required_during_scheduling_ignored_during_execution:
        for term in na.required_during_scheduling_ignored_during_execution.node_selector_terms:
            terms.append(tuple((r.key, r.operator, tuple(r.values)) for r in term.match_expressions))
    return PodSetSpec(
        name=name,
        count=count,
        per_pod=per_pod,
        tolerations=tuple(t.to_spec() for t in spec.tolerations),
        node_selector=tuple(sorted(spec.node_selector.items())),
        affinity_terms=tuple(terms),
        topology=topology_request(template.metadata.annotations),
    )


def workload_from_job(job: core.Job, priorities: PriorityResolver, created: float, seq: int = 0) -> WorkloadSpec:
    ns = job.metadata.namespace or "default"
    return WorkloadSpec(
        key=f"{ns}/{job.metadata.name}",
        namespace=ns,
        queue_name=job.metadata.labels.get(kueue.QUEUE_NAME_LABEL, ""),
        pod_sets=(pod_set_from_template(MAIN_POD_SET, job.pod_count(), job.spec.template),),
        priority=priorities.priority_of(job),
        created=created,
        seq=seq,
        uid=job.metadata.uid or "",
    )
