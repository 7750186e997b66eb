"""Validation of Kueue's quota objects, as Kueue's webhooks and CRD schema check them.

Pure functions: ``validate_kueue_object(kind, obj, old, cohorts)`` returns the list of
field errors (empty when the object is fine). The field paths are Kueue's
(``spec.resourceGroups[0].flavors[1].resources[0].lendingLimit``), so a denial tells
the user exactly what to fix. The CRD gpuqueue installs may be schemaless, so the
checks the real CRD schema would make (enums, list limits, name patterns) are here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gpuqueue.api.quantity import Quantity, QuantityError
from gpuqueue.webhook.fielderrors import (
    FieldError,
    duplicate,
    invalid,
    required,
    too_many,
    unsupported,
)
from gpuqueue.api.labelselector import LabelSelectorError, check_label_selector
from gpuqueue.webhook.topology_validation import validate_flavor_topology, validate_topology

KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "WorkloadPriorityClass", "Topology")

MAX_RESOURCE_GROUPS = 16
# Per-group limits differ by API version (v1beta1: 16, v1beta2: 64); totals are v1beta2's.
MAX_PER_GROUP = {"v1beta1": 16, "v1beta2": 64}
MAX_TOTAL_FLAVORS = 256
MAX_TOTAL_RESOURCES = 256
MAX_FLAVOR_NODE_ITEMS = 8  # nodeLabels, nodeTaints, tolerations of a ResourceFlavor

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
QUEUEING_STRATEGIES = ("StrictFIFO", "BestEffortFIFO")
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")
RECLAIM_POLICIES = ("Never", "LowerPriority", "Any")
WITHIN_CQ_POLICIES = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
BORROW_WITHIN_COHORT_POLICIES = ("Never", "LowerPriority")
FUNGIBILITY_POLICIES = ("MayStopSearch", "TryNextFlavor")
FUNGIBILITY_PREFERENCES = ("BorrowingOverPreemption", "PreemptionOverBorrowing")


class CohortView(Protocol):
    def cohort_parent(self, name: str) -> str | None:
        """The parentName of Cohort ``name``, or None when it has none or is unknown."""


class NoCohorts:
    def cohort_parent(self, name: str) -> str | None:
        return None


Errors = list[FieldError]


# -- small checks ----------------------------------------------------------------

def dns_subdomain(value: Any, path: str, errs: Errors) -> None:
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        errs.append(invalid(path, value, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                            "characters, '-' or '.', and must start and end with an alphanumeric character"))


def _qualified_name(value: Any, path: str, errs: Errors) -> None:
    """A label key or resource name: optional DNS-subdomain prefix, '/', a name of <= 63 chars."""
    if not isinstance(value, str) or not value:
        errs.append(invalid(path, value, "name part must be non-empty"))
        return
    prefix, _, name = value.rpartition("/")
    if "/" in value and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        errs.append(invalid(path, value, "prefix part must be a lowercase RFC 1123 subdomain"))
    elif len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errs.append(invalid(path, value, "name part must consist of alphanumeric characters, '-', '_' or '.', "
                            "and must start and end with an alphanumeric character (at most 63 characters)"))


def _label_value(value: Any, path: str, errs: Errors) -> None:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        errs.append(invalid(path, value, "a valid label must be an empty string or consist of alphanumeric characters, "
                            "'-', '_' or '.', and must start and end with an alphanumeric character (at most 63)"))


def _enum(value: Any, allowed: tuple[str, ...], path: str, errs: Errors) -> None:
    if value is not None and value not in allowed:
        errs.append(unsupported(path, value, allowed))


def _mapping(value: Any, path: str, errs: Errors) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errs.append(invalid(path, value, "must be an object"))
        return {}
    return value


def _list(value: Any, path: str, errs: Errors) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        errs.append(invalid(path, value, "must be a list"))
        return []
    return value


def _quantity(value: Any, path: str, errs: Errors, *, required_: bool = False) -> Quantity | None:
    if value is None:
        if required_:
            errs.append(required(path))
        return None
    try:
        q = Quantity.parse(value)
    except QuantityError as exc:
        errs.append(invalid(path, value, str(exc)))
        return None
    if q.value < 0:
        errs.append(invalid(path, str(q), "must be greater than or equal to 0"))
    return q


def _selector(value: Any, path: str, errs: Errors) -> None:
    try:
        check_label_selector(value, path)
    except LabelSelectorError as exc:
        where, _, detail = str(exc).partition(": ")
        errs.append(invalid(where, value, detail))


def _fair_sharing(spec: Mapping[str, Any], path: str, errs: Errors) -> None:
    fs = _mapping(spec.get("fairSharing"), f"{path}.fairSharing", errs)
    if "weight" in fs:
        _quantity(fs["weight"], f"{path}.fairSharing.weight", errs)


# -- resource groups (ClusterQueue and Cohort) -------------------------------------

def _resource_groups(spec: Mapping[str, Any], has_parent: bool, is_cohort: bool, version: str, errs: Errors) -> None:
    path = "spec.resourceGroups"
    groups = _list(spec.get("resourceGroups"), path, errs)
    if len(groups) > MAX_RESOURCE_GROUPS:
        errs.append(too_many(path, len(groups), MAX_RESOURCE_GROUPS))
    per_group = MAX_PER_GROUP.get(version, MAX_PER_GROUP["v1beta2"])
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    total_flavors = total_resources = 0
    for i, rg_raw in enumerate(groups):
        rg_path = f"{path}[{i}]"
        rg = _mapping(rg_raw, rg_path, errs)
        covered = _list(rg.get("coveredResources"), f"{rg_path}.coveredResources", errs)
        flavors = _list(rg.get("flavors"), f"{rg_path}.flavors", errs)
        total_flavors += len(flavors)
        total_resources += len(covered)
        if not covered:
            errs.append(required(f"{rg_path}.coveredResources", "must have at least 1 item"))
        if len(covered) > per_group:
            errs.append(too_many(f"{rg_path}.coveredResources", len(covered), per_group))
        if not flavors:
            errs.append(required(f"{rg_path}.flavors", "must have at least 1 item"))
        if len(flavors) > per_group:
            errs.append(too_many(f"{rg_path}.flavors", len(flavors), per_group))
        for j, name in enumerate(covered):
            rpath = f"{rg_path}.coveredResources[{j}]"
            _qualified_name(name, rpath, errs)
            if isinstance(name, str):
                if name in seen_resources:
                    errs.append(duplicate(rpath, name))
                seen_resources.add(name)
        for j, fq_raw in enumerate(flavors):
            fpath = f"{rg_path}.flavors[{j}]"
            fq = _mapping(fq_raw, fpath, errs)
            fname = fq.get("name")
            if fname is None:
                errs.append(required(f"{fpath}.name"))
            else:
                dns_subdomain(fname, f"{fpath}.name", errs)
                if isinstance(fname, str):
                    if fname in seen_flavors:
                        errs.append(duplicate(f"{fpath}.name", fname))
                    seen_flavors.add(fname)
            _flavor_quotas(fq, covered, has_parent, is_cohort, fpath, errs)
    if total_flavors > MAX_TOTAL_FLAVORS:
        errs.append(too_many(path, total_flavors, MAX_TOTAL_FLAVORS))
    if total_resources > MAX_TOTAL_RESOURCES:
        errs.append(too_many(path, total_resources, MAX_TOTAL_RESOURCES))


def _flavor_quotas(fq: Mapping[str, Any], covered: list[Any], has_parent: bool, is_cohort: bool,
                   fpath: str, errs: Errors) -> None:
    resources = _list(fq.get("resources"), f"{fpath}.resources", errs)
    if len(resources) != len(covered):
        errs.append(invalid(f"{fpath}.resources", len(resources),
                            "flavors must have the same number of resources as the coveredResources"))
    seen: set[str] = set()
    no_parent = "must be nil when " + ("parent" if is_cohort else "cohort") + " is empty"
    for k, rq_raw in enumerate(resources):
        rpath = f"{fpath}.resources[{k}]"
        rq = _mapping(rq_raw, rpath, errs)
        name = rq.get("name")
        if k < len(covered) and name != covered[k]:
            errs.append(invalid(f"{rpath}.name", name, "must match the name in coveredResources"))
        if isinstance(name, str):
            if name in seen:
                errs.append(duplicate(f"{rpath}.name", name))
            seen.add(name)
        nominal = _quantity(rq.get("nominalQuota"), f"{rpath}.nominalQuota", errs, required_=True)
        for limit_name in ("borrowingLimit", "lendingLimit"):
            if rq.get(limit_name) is None:
                continue
            lpath = f"{rpath}.{limit_name}"
            limit = _quantity(rq[limit_name], lpath, errs)
            if limit is None:
                continue
            if not has_parent:
                errs.append(invalid(lpath, str(limit), no_parent))
            if limit_name == "lendingLimit" and not is_cohort and nominal is not None and nominal < limit:
                errs.append(invalid(lpath, str(limit), "must be less than or equal to the nominalQuota"))


# -- the kinds ---------------------------------------------------------------------

def _version(obj: Mapping[str, Any]) -> str:
    api = obj.get("apiVersion")
    return api.rpartition("/")[2] if isinstance(api, str) else "v1beta2"


def _cohort_cycle(start_name: str | None, parent: Any, cohorts: CohortView, path: str, errs: Errors) -> None:
    """Walk parents from ``parent``; refuse when the walk comes back to ``start_name``."""
    if not isinstance(parent, str) or not parent:
        return
    seen = [start_name] if start_name else []
    node: str | None = parent
    while node:
        if node in seen:
            chain = " -> ".join([*seen, node])
            errs.append(invalid(path, parent, f"cohort cycle: {chain}"))
            return
        seen.append(node)
        if len(seen) > 1000:
            return
        node = cohorts.cohort_parent(node)


def validate_cluster_queue(obj: Mapping[str, Any], errs: Errors) -> None:
    spec = _mapping(obj.get("spec"), "spec", errs)
    cohort = spec.get("cohortName", spec.get("cohort"))  # v1beta1 called it spec.cohort
    cohort_field = "spec.cohortName" if "cohortName" in spec else "spec.cohort"
    if cohort not in (None, ""):
        dns_subdomain(cohort, cohort_field, errs)
    _resource_groups(spec, bool(cohort), False, _version(obj), errs)
    if "namespaceSelector" in spec:
        _selector(spec["namespaceSelector"], "spec.namespaceSelector", errs)
    _enum(spec.get("queueingStrategy"), QUEUEING_STRATEGIES, "spec.queueingStrategy", errs)
    _enum(spec.get("stopPolicy"), STOP_POLICIES, "spec.stopPolicy", errs)
    pre = _mapping(spec.get("preemption"), "spec.preemption", errs)
    _enum(pre.get("reclaimWithinCohort"), RECLAIM_POLICIES, "spec.preemption.reclaimWithinCohort", errs)
    _enum(pre.get("withinClusterQueue"), WITHIN_CQ_POLICIES, "spec.preemption.withinClusterQueue", errs)
    bwc = _mapping(pre.get("borrowWithinCohort"), "spec.preemption.borrowWithinCohort", errs)
    _enum(bwc.get("policy"), BORROW_WITHIN_COHORT_POLICIES, "spec.preemption.borrowWithinCohort.policy", errs)
    threshold = bwc.get("maxPriorityThreshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int)
                                  or not -(2**31) <= threshold < 2**31):
        errs.append(invalid("spec.preemption.borrowWithinCohort.maxPriorityThreshold", threshold, "must be a 32-bit integer"))
    if pre.get("reclaimWithinCohort", "Never") == "Never" and bwc.get("policy", "Never") != "Never":
        errs.append(invalid("spec.preemption", dict(pre), "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"))
    ff = _mapping(spec.get("flavorFungibility"), "spec.flavorFungibility", errs)
    _enum(ff.get("whenCanBorrow"), FUNGIBILITY_POLICIES, "spec.flavorFungibility.whenCanBorrow", errs)
    _enum(ff.get("whenCanPreempt"), FUNGIBILITY_POLICIES, "spec.flavorFungibility.whenCanPreempt", errs)
    if "preference" in ff:
        _enum(ff["preference"], FUNGIBILITY_PREFERENCES, "spec.flavorFungibility.preference", errs)
        if ff.get("whenCanBorrow") != "TryNextFlavor" or ff.get("whenCanPreempt") != "TryNextFlavor":
            errs.append(invalid("spec.flavorFungibility.preference", ff["preference"],
                                "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor"))
    _fair_sharing(spec, "spec", errs)


def validate_cohort(obj: Mapping[str, Any], cohorts: CohortView, errs: Errors) -> None:
    spec = _mapping(obj.get("spec"), "spec", errs)
    parent = spec.get("parentName", spec.get("parent"))
    parent_field = "spec.parentName" if "parentName" in spec else "spec.parent"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else None
    if parent not in (None, ""):
        dns_subdomain(parent, parent_field, errs)
        _cohort_cycle(name, parent, cohorts, parent_field, errs)
    _resource_groups(spec, bool(parent), True, _version(obj), errs)
    _fair_sharing(spec, "spec", errs)


def validate_local_queue(obj: Mapping[str, Any], old: Mapping[str, Any] | None, errs: Errors) -> None:
    spec = _mapping(obj.get("spec"), "spec", errs)
    cq = spec.get("clusterQueue")
    if cq in (None, ""):
        errs.append(required("spec.clusterQueue"))
    else:
        dns_subdomain(cq, "spec.clusterQueue", errs)
    _enum(spec.get("stopPolicy"), STOP_POLICIES, "spec.stopPolicy", errs)
    if isinstance(old, Mapping):
        old_spec = old.get("spec") if isinstance(old.get("spec"), Mapping) else {}
        if old_spec.get("clusterQueue") not in (None, "") and old_spec.get("clusterQueue") != cq:
            errs.append(invalid("spec.clusterQueue", cq, "field is immutable"))
    _fair_sharing(spec, "spec", errs)


def validate_resource_flavor(obj: Mapping[str, Any], errs: Errors, old: Mapping[str, Any] | None = None) -> None:
    spec = _mapping(obj.get("spec"), "spec", errs)
    validate_flavor_topology(spec, old if isinstance(old, Mapping) else None, errs)
    labels = _mapping(spec.get("nodeLabels"), "spec.nodeLabels", errs)
    if len(labels) > MAX_FLAVOR_NODE_ITEMS:
        errs.append(too_many("spec.nodeLabels", len(labels), MAX_FLAVOR_NODE_ITEMS))
    for key, value in labels.items():
        _qualified_name(key, "spec.nodeLabels", errs)
        _label_value(value, f"spec.nodeLabels[{key}]", errs)
    taints = _list(spec.get("nodeTaints"), "spec.nodeTaints", errs)
    if len(taints) > MAX_FLAVOR_NODE_ITEMS:
        errs.append(too_many("spec.nodeTaints", len(taints), MAX_FLAVOR_NODE_ITEMS))
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(taints):
        path = f"spec.nodeTaints[{i}]"
        taint = _mapping(raw, path, errs)
        _qualified_name(taint.get("key"), f"{path}.key", errs)
        if taint.get("value") is not None:
            _label_value(taint["value"], f"{path}.value", errs)
        effect = taint.get("effect")
        if effect is None:
            errs.append(required(f"{path}.effect"))
        else:
            _enum(effect, TAINT_EFFECTS, f"{path}.effect", errs)
        ident = (str(taint.get("key")), str(effect))
        if ident in seen:
            errs.append(FieldError(path, "Duplicate value", "taints must be unique by key and effect pair", dict(taint), True))
        seen.add(ident)
    tolerations = _list(spec.get("tolerations"), "spec.tolerations", errs)
    if len(tolerations) > MAX_FLAVOR_NODE_ITEMS:
        errs.append(too_many("spec.tolerations", len(tolerations), MAX_FLAVOR_NODE_ITEMS))
    for i, raw in enumerate(tolerations):
        path = f"spec.tolerations[{i}]"
        tol = _mapping(raw, path, errs)
        op = tol.get("operator")
        _enum(op, TOLERATION_OPERATORS, f"{path}.operator", errs)
        if tol.get("key") in (None, ""):
            if op != "Exists":
                errs.append(invalid(f"{path}.operator", op, "operator must be Exists when 'key' is empty, which means 'match all values and all keys'"))
        else:
            _qualified_name(tol["key"], f"{path}.key", errs)
        if op == "Exists" and tol.get("value") not in (None, ""):
            errs.append(invalid(f"{path}.operator", op, "value must be empty when 'operator' is 'Exists'"))
        elif tol.get("value") not in (None, ""):
            _label_value(tol["value"], f"{path}.value", errs)
        if tol.get("effect") not in (None, ""):
            _enum(tol["effect"], TAINT_EFFECTS, f"{path}.effect", errs)
        if tol.get("tolerationSeconds") is not None and tol.get("effect") != "NoExecute":
            errs.append(invalid(f"{path}.effect", tol.get("effect"), "effect must be 'NoExecute' when 'tolerationSeconds' is set"))


def validate_workload_priority_class(obj: Mapping[str, Any], errs: Errors) -> None:
    value = obj.get("value")
    if value is None:
        errs.append(required("value"))
    elif isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        errs.append(invalid("value", value, "must be a 32-bit integer"))
    desc = obj.get("description")
    if desc is not None and (not isinstance(desc, str) or len(desc) > 2048):
        errs.append(invalid("description", "...", "must be a string of at most 2048 characters"))


def validate_kueue_object(kind: str, obj: Any, old: Any = None, cohorts: CohortView | None = None) -> Errors:
    """All field errors of a Kueue object of ``kind``; ``old`` is the stored object on UPDATE."""
    errs: Errors = []
    if not isinstance(obj, Mapping):
        return [invalid("object", None if obj is None else type(obj).__name__, "must be a JSON object")]
    cohorts = cohorts or NoCohorts()
    checks: dict[str, Callable[[], None]] = {
        "ClusterQueue": lambda: validate_cluster_queue(obj, errs),
        "Cohort": lambda: validate_cohort(obj, cohorts, errs),
        "LocalQueue": lambda: validate_local_queue(obj, old, errs),
        "ResourceFlavor": lambda: validate_resource_flavor(obj, errs, old),
        "WorkloadPriorityClass": lambda: validate_workload_priority_class(obj, errs),
        "Topology": lambda: validate_topology(obj, old if isinstance(old, Mapping) else None, errs),
    }
    check = checks.get(kind)
    if check is None:
        return [unsupported("kind", kind, KINDS)]
    check()
    return errs

