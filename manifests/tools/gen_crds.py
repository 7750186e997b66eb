"""Generate charts/gpuqueue/files/crds/*.yaml (the chart installs them): the kueue.x-k8s.io/v1beta2 CRDs gpuqueue serves.

The schemas follow Kueue's API types (field names, enums, limits, defaults and CEL rules) for
the fields gpuqueue reads and writes. Shared pieces (quantities, conditions, resource groups) are
built once here instead of being repeated in six YAML files; tests/test_manifests_crds.py checks
that the committed files are exactly what this script prints, so edit here and re-run:

    python manifests/tools/gen_crds.py
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "gpuqueue" / "files" / "crds"

# resource.Quantity as Kubernetes publishes it: an int or a string in quantity syntax.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def quantity(description: str, **extra) -> dict:
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
        **extra,
    }


def string(description: str, **extra) -> dict:
    return {"description": description, "type": "string", **extra}


def int32(description: str, **extra) -> dict:
    return {"description": description, "type": "integer", "format": "int32", **extra}


def obj(description: str, properties: dict, required: list[str] | None = None, **extra) -> dict:
    node = {"description": description, "type": "object", "properties": properties}
    if required:
        node["required"] = required
    node.update(extra)
    return node


def array(description: str, items: dict, **extra) -> dict:
    return {"description": description, "type": "array", "items": items, **extra}


def map_list(description: str, items: dict, keys: list[str], max_items: int, **extra) -> dict:
    return array(
        description, items, maxItems=max_items, **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys}, **extra
    )


def ref(description: str) -> dict:
    return string(description, maxLength=253, pattern=DNS1123_SUBDOMAIN)


def resource_list(description: str) -> dict:
    return {"description": description, "type": "object", "additionalProperties": quantity("quantity of the resource")}


def conditions(max_items: int = 16) -> dict:
    condition = obj(
        "One observation of the object's state (metav1.Condition).",
        {
            "type": string(
                "Condition type, e.g. QuotaReserved, Admitted, Evicted, Finished, Active.",
                maxLength=316,
                pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            ),
            "status": string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": string(
                "CamelCase reason for the last transition; never empty.",
                minLength=1,
                maxLength=1024,
                pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            ),
            "message": string("Human readable details.", maxLength=32768),
            "lastTransitionTime": string("When the status last changed.", format="date-time"),
            "observedGeneration": {
                "description": "metadata.generation the condition was set for.",
                "type": "integer",
                "format": "int64",
                "minimum": 0,
            },
        },
        required=["lastTransitionTime", "message", "reason", "status", "type"],
    )
    return map_list("Latest observations of the object's state.", condition, ["type"], max_items)


def label_selector(description: str) -> dict:
    return obj(
        description,
        {
            "matchExpressions": array(
                "Label selector requirements, ANDed.",
                obj(
                    "A key, an operator and values.",
                    {
                        "key": string("Label key."),
                        "operator": string("In, NotIn, Exists or DoesNotExist."),
                        "values": array("Values for In and NotIn.", {"type": "string"}, **{"x-kubernetes-list-type": "atomic"}),
                    },
                    required=["key", "operator"],
                ),
                **{"x-kubernetes-list-type": "atomic"},
            ),
            "matchLabels": {"description": "Labels that must match exactly.", "type": "object", "additionalProperties": {"type": "string"}},
        },
        **{"x-kubernetes-map-type": "atomic"},
    )


def resource_groups() -> dict:
    resource_quota = obj(
        "Quota of one resource in one flavor.",
        {
            "name": string("Resource name, e.g. nvidia.com/gpu."),
            "nominalQuota": quantity("Quantity guaranteed to this queue (non-negative)."),
            "borrowingLimit": quantity("Most this queue may borrow from its cohort; unset means no limit."),
            "lendingLimit": quantity("Most of its unused quota this queue lends to its cohort; unset means all of it."),
        },
        required=["name", "nominalQuota"],
    )
    flavor_quotas = obj(
        "Quotas a flavor provides for the group's resources.",
        {
            "name": ref("Name of a ResourceFlavor."),
            "resources": map_list("One quota per covered resource.", resource_quota, ["name"], 64, minItems=1),
        },
        required=["name", "resources"],
    )
    group = obj(
        "Resources that are quota'd together and the flavors that provide them.",
        {
            "coveredResources": array(
                "Resources this group covers.", {"type": "string"}, minItems=1, maxItems=64, **{"x-kubernetes-list-type": "atomic"}
            ),
            "flavors": map_list("Flavors, in order of preference.", flavor_quotas, ["name"], 64, minItems=1),
        },
        required=["coveredResources", "flavors"],
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "self.flavors.all(x, size(x.resources) == size(self.coveredResources))",
                    "message": "flavors must have the same number of resources as the coveredResources",
                }
            ]
        },
    )
    return array("Groups of resources with their flavors' quotas.", group, maxItems=16, **{"x-kubernetes-list-type": "atomic"})


def fair_sharing() -> dict:
    return obj(
        "Fair sharing properties (used when fair sharing is on).",
        {"weight": quantity("Advantage when competing for unused quota; 0 means always last.", default=1)},
    )


def fair_sharing_status() -> dict:
    return obj(
        "Current fair sharing state.",
        {"weightedShare": {"description": "Dominant borrowed share divided by weight.", "type": "integer", "format": "int64"}},
        required=["weightedShare"],
    )


def stop_policy() -> dict:
    return string("None admits; Hold stops new admissions; HoldAndDrain also evicts.", enum=["None", "Hold", "HoldAndDrain"], default="None")


def flavor_usage(local: bool) -> dict:
    usage = {"name": string("Resource name."), "total": quantity("Quota in use.")}
    if not local:
        usage["borrowed"] = quantity("Part of total borrowed from the cohort.")
    return obj(
        "Usage of one flavor.",
        {
            "name": ref("Flavor name."),
            "resources": map_list("Usage per resource.", obj("Usage of one resource.", usage, required=["name"]), ["name"], 64),
        },
        required=["name", "resources"],
    )


def toleration() -> dict:
    return obj(
        "A toleration (core/v1).",
        {
            "key": string("Taint key; empty with Exists tolerates everything."),
            "operator": string("Equal (default) or Exists."),
            "value": string("Taint value for Equal."),
            "effect": string("NoSchedule, PreferNoSchedule or NoExecute; empty matches all."),
            "tolerationSeconds": {"description": "For NoExecute: how long the pod stays.", "type": "integer", "format": "int64"},
        },
    )


TOLERATION_RULES = [
    {"rule": "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)", "message": "operator must be Exists when 'key' is empty, which means 'match all values and all keys'"},
    {"rule": "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)", "message": "effect must be 'NoExecute' when 'tolerationSeconds' is set"},
    {"rule": "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])", "message": "supported toleration values: 'Equal'(default), 'Exists'"},
    {"rule": "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)", "message": "a value must be empty when 'operator' is 'Exists'"},
    {"rule": "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])", "message": "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"},
]


def root(kind: str, properties: dict, **extra) -> dict:
    return obj(
        f"{kind} of Kueue's API ({GROUP}/{VERSION}), as served by gpuqueue.",
        {
            "apiVersion": string("Versioned schema of this object."),
            "kind": string("REST resource this object represents."),
            "metadata": {"type": "object"},
            **properties,
        },
        **extra,
    )


def crd(kind: str, plural: str, scope: str, schema: dict, short_names=(), columns=(), status=True) -> dict:
    version = {"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    if columns:
        version["additionalPrinterColumns"] = [dict(c) for c in columns]
    if status:
        version["subresources"] = {"status": {}}
    names = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/name": "gpuqueue", "app.kubernetes.io/part-of": "gpuqueue"}},
        "spec": {"group": GROUP, "names": names, "scope": scope, "versions": [version]},
    }


def column(name: str, path: str, type_: str, description: str, priority: int = 0) -> dict:
    c = {"name": name, "jsonPath": path, "type": type_, "description": description}
    if priority:
        c["priority"] = priority
    return c


def resource_flavor() -> dict:
    taint = obj(
        "A taint the flavor's nodes carry.",
        {
            "key": string("Taint key."),
            "value": string("Taint value."),
            "effect": string("NoSchedule, PreferNoSchedule or NoExecute."),
            "timeAdded": string("When the taint was added.", format="date-time"),
        },
        required=["effect", "key"],
    )
    spec = obj(
        "Which nodes the flavor stands for, and what admitted pods get.",
        {
            "nodeLabels": {
                "description": "Labels of the flavor's nodes; injected as nodeSelector into admitted pods.",
                "type": "object",
                "additionalProperties": {"type": "string"},
                "maxProperties": 8,
                "x-kubernetes-map-type": "atomic",
            },
            "nodeTaints": array(
                "Taints of the flavor's nodes; a workload must tolerate them to get this flavor.",
                taint,
                maxItems=8,
                **{
                    "x-kubernetes-list-type": "atomic",
                    "x-kubernetes-validations": [
                        {"rule": "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])", "message": "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"}
                    ],
                },
            ),
            "tolerations": array(
                "Tolerations added to admitted pods.",
                toleration(),
                maxItems=8,
                **{"x-kubernetes-list-type": "atomic", "x-kubernetes-validations": copy.deepcopy(TOLERATION_RULES)},
            ),
            "topologyName": ref("Topology whose levels admission places this flavor's pods in (Topology Aware Scheduling)."),
        },
        **{
            "x-kubernetes-validations": [
                {"rule": "!has(self.topologyName) || self.nodeLabels.size() >= 1", "message": "at least one nodeLabel is required when topology is set"},
                {"rule": "!has(oldSelf.topologyName) || self == oldSelf", "message": "resourceFlavorSpec are immutable when topologyName is set"},
            ]
        },
    )
    return crd("ResourceFlavor", "resourceflavors", "Cluster", root("ResourceFlavor", {"spec": spec}), short_names=("flavor", "flavors", "rf"), status=False)


def cluster_queue() -> dict:
    preemption = obj(
        "Preemption policies.",
        {
            "reclaimWithinCohort": string("Preempt cohort members that borrow: Never, LowerPriority or Any.", enum=["Never", "LowerPriority", "Any"], default="Never"),
            "borrowWithinCohort": obj(
                "Preempt in the cohort while borrowing.",
                {
                    "policy": string("Never or LowerPriority.", enum=["Never", "LowerPriority"], default="Never"),
                    "maxPriorityThreshold": int32("Only workloads at or below this priority may be preempted."),
                },
                default={},
            ),
            "withinClusterQueue": string(
                "Preempt within this queue: Never, LowerPriority or LowerOrNewerEqualPriority.",
                enum=["Never", "LowerPriority", "LowerOrNewerEqualPriority"],
                default="Never",
            ),
        },
        default={},
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  self.borrowWithinCohort.policy != 'Never')",
                    "message": "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
                }
            ]
        },
    )
    fungibility = obj(
        "Whether to try the next flavor before borrowing or preempting.",
        {
            "whenCanBorrow": string("MayStopSearch or TryNextFlavor.", enum=["MayStopSearch", "TryNextFlavor"], default="MayStopSearch"),
            "whenCanPreempt": string("MayStopSearch or TryNextFlavor.", enum=["MayStopSearch", "TryNextFlavor"], default="TryNextFlavor"),
            "preference": string("BorrowingOverPreemption or PreemptionOverBorrowing.", enum=["BorrowingOverPreemption", "PreemptionOverBorrowing"]),
        },
        default={},
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')",
                    "message": "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
                }
            ]
        },
    )
    spec = obj(
        "Quota, cohort and policies of the ClusterQueue.",
        {
            "resourceGroups": resource_groups(),
            "cohortName": ref("Cohort this queue borrows from and lends to."),
            "queueingStrategy": string("BestEffortFIFO or StrictFIFO.", enum=["StrictFIFO", "BestEffortFIFO"], default="BestEffortFIFO"),
            "namespaceSelector": label_selector("Namespaces allowed to submit; unset means none, {} means all."),
            "flavorFungibility": fungibility,
            "preemption": preemption,
            "stopPolicy": stop_policy(),
            "fairSharing": fair_sharing(),
        },
        **{
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true",
                    "message": "borrowingLimit must be nil when cohort is empty",
                }
            ]
        },
    )
    status = obj(
        "Observed state written by the gpuqueue controller.",
        {
            "conditions": conditions(),
            "flavorsReservation": map_list("Quota reserved per flavor.", flavor_usage(local=False), ["name"], 64),
            "flavorsUsage": map_list("Quota used by admitted workloads per flavor.", flavor_usage(local=False), ["name"], 64),
            "pendingWorkloads": int32("Workloads waiting for admission."),
            "reservingWorkloads": int32("Workloads holding a quota reservation."),
            "admittedWorkloads": int32("Admitted workloads not yet finished."),
            "fairSharing": fair_sharing_status(),
        },
    )
    return crd(
        "ClusterQueue",
        "clusterqueues",
        "Cluster",
        root("ClusterQueue", {"spec": spec, "status": status}),
        short_names=("cq",),
        columns=(
            column("Cohort", ".spec.cohortName", "string", "Cohort this ClusterQueue belongs to"),
            column("Strategy", ".spec.queueingStrategy", "string", "Queueing strategy", priority=1),
            column("Pending Workloads", ".status.pendingWorkloads", "integer", "Workloads waiting for admission"),
            column("Admitted Workloads", ".status.admittedWorkloads", "integer", "Admitted workloads not yet finished", priority=1),
        ),
    )


def cohort() -> dict:
    spec = obj(
        "Quota the cohort owns itself and its place in the cohort tree.",
        {
            "parentName": ref("Parent cohort, if any."),
            "resourceGroups": resource_groups(),
            "fairSharing": fair_sharing(),
        },
    )
    status = obj("Observed state.", {"fairSharing": fair_sharing_status()})
    return crd("Cohort", "cohorts", "Cluster", root("Cohort", {"spec": spec, "status": status}))


def local_queue() -> dict:
    spec = obj(
        "The ClusterQueue behind this queue.",
        {
            "clusterQueue": ref("ClusterQueue that backs this LocalQueue (immutable).")
            | {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "field is immutable"}]},
            "stopPolicy": stop_policy(),
            "fairSharing": fair_sharing(),
        },
    )
    status = obj(
        "Observed state written by the gpuqueue controller.",
        {
            "conditions": conditions(),
            "pendingWorkloads": int32("Workloads not yet admitted."),
            "reservingWorkloads": int32("Workloads holding a quota reservation."),
            "admittedWorkloads": int32("Admitted workloads not yet finished."),
            "flavorsReservation": map_list("Quota reserved per flavor.", flavor_usage(local=True), ["name"], 16),
            "flavorsUsage": map_list("Quota used per flavor.", flavor_usage(local=True), ["name"], 16),
        },
    )
    return crd(
        "LocalQueue",
        "localqueues",
        "Namespaced",
        root("LocalQueue", {"spec": spec, "status": status}),
        short_names=("queue", "queues", "lq"),
        columns=(
            column("ClusterQueue", ".spec.clusterQueue", "string", "Backing ClusterQueue"),
            column("Pending Workloads", ".status.pendingWorkloads", "integer", "Workloads waiting for admission"),
            column("Admitted Workloads", ".status.admittedWorkloads", "integer", "Admitted workloads not yet finished"),
        ),
    )


def workload() -> dict:
    podset_name = string("Pod set name.", maxLength=63, pattern=DNS1123_LABEL)
    pod_set = obj(
        "A set of identical pods.",
        {
            "name": podset_name | {"default": "main"},
            "template": {
                "description": "Pod template (core/v1 PodTemplateSpec), kept as sent.",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "count": int32("Number of pods.", minimum=0, default=1),
            "minCount": int32("Fewest pods acceptable for partial admission.", minimum=1),
        },
        required=["template"],
        **{"x-kubernetes-validations": [{"rule": "has(self.minCount) ? self.minCount <= self.count : true", "message": "minCount should be positive and less or equal to count"}]},
    )
    priority_ref = obj(
        "Priority class the workload's priority comes from.",
        {
            "group": string("kueue.x-k8s.io or scheduling.k8s.io.", enum=["kueue.x-k8s.io", "scheduling.k8s.io"]),
            "kind": string("WorkloadPriorityClass or PriorityClass.", enum=["WorkloadPriorityClass", "PriorityClass"]),
            "name": string("Class name.", minLength=1, maxLength=253, pattern=DNS1123_SUBDOMAIN),
        },
        required=["group", "kind", "name"],
        **{
            "x-kubernetes-validations": [
                {"rule": "(self.group == 'scheduling.k8s.io') ? self.kind == 'PriorityClass' : true", "message": "only the PriorityClass kind is allowed for the scheduling.k8s.io group"},
                {"rule": "(self.group == 'kueue.x-k8s.io') ? self.kind == 'WorkloadPriorityClass' : true", "message": "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group"},
            ]
        },
    )
    spec = obj(
        "What the workload asks for and where it queues.",
        {
            "podSets": map_list("Pod sets (1 to 8).", pod_set, ["name"], 8, minItems=1),
            "queueName": ref("LocalQueue the workload was submitted to."),
            "priorityClassRef": priority_ref,
            "priority": int32("Priority; higher is admitted first."),
            "active": {"description": "false keeps the workload out of admission and evicts it.", "type": "boolean", "default": True},
            "maximumExecutionTimeSeconds": int32("Seconds the workload may stay admitted.", minimum=1),
        },
        required=["podSets"],
        **{"x-kubernetes-validations": [{"rule": "!has(self.priorityClassRef) || has(self.priority)", "message": "priority should not be nil when priorityClassRef is set"}]},
    )
    assignment = obj(
        "Admission result for one pod set.",
        {
            "name": podset_name | {"default": "main"},
            "flavors": {"description": "Flavor assigned per resource.", "type": "object", "additionalProperties": ref("Flavor name.")},
            "resourceUsage": resource_list("Total resources of the pod set's pods."),
            "count": int32("Pods counted at admission.", minimum=0),
            "topologyAssignment": topology_assignment(),
        },
        required=["name"],
    )
    status = obj(
        "Observed state written by the gpuqueue controller.",
        {
            "conditions": conditions(),
            "admission": obj(
                "Where and how the workload was admitted.",
                {
                    "clusterQueue": ref("ClusterQueue that admitted the workload."),
                    "podSetAssignments": map_list("One assignment per pod set.", assignment, ["name"], 8),
                },
                required=["clusterQueue", "podSetAssignments"],
            ),
            "requeueState": obj(
                "Requeue bookkeeping.",
                {"count": int32("Times requeued.", minimum=0), "requeueAt": string("When it is requeued.", format="date-time")},
            ),
            "reclaimablePods": map_list(
                "Pods per pod set whose quota is no longer needed.",
                obj("Reclaimable pods of one pod set.", {"name": podset_name, "count": int32("Pods.", minimum=0)}, required=["count", "name"]),
                ["name"],
                8,
            ),
            "resourceRequests": map_list(
                "Resources requested, recorded while not admitted.",
                obj("Requests of one pod set.", {"name": podset_name, "resources": resource_list("Total requests.")}, required=["name"]),
                ["name"],
                8,
            ),
            "accumulatedPastExecutionTimeSeconds": int32("Seconds spent admitted in earlier admissions."),
            "schedulingStats": obj(
                "Eviction statistics.",
                {
                    "evictions": array(
                        "Evictions by reason.",
                        obj(
                            "Count of evictions for one reason.",
                            {
                                "reason": string("Eviction reason.", maxLength=316),
                                "underlyingCause": string("Finer cause, may be empty.", maxLength=316),
                                "count": int32("Evictions.", minimum=0),
                            },
                            required=["count", "reason", "underlyingCause"],
                        ),
                        maxItems=256,
                        **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["reason", "underlyingCause"]},
                    )
                },
            ),
        },
    )
    reserved = "{0}.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True')"
    old_reserved = f"(has(oldSelf.status) && has(oldSelf.status.conditions) && {reserved.format('oldSelf')})"
    new_reserved = f"(has(self.status) && has(self.status.conditions) && {reserved.format('self')})"
    rules = [
        {
            "rule": f"{new_reserved} && has(self.status.admission) ? size(self.spec.podSets) == size(self.status.admission.podSetAssignments) : true",
            "message": "podSetAssignments must have the same number of podSets as the spec",
        },
        {
            "rule": f"{old_reserved} && {new_reserved} && has(oldSelf.spec.queueName) && has(self.spec.queueName) ? oldSelf.spec.queueName == self.spec.queueName : true",
            "message": "queueName is immutable while workload quota reserved",
        },
        {
            "rule": f"{old_reserved} ? (!has(oldSelf.spec.priorityClassRef) && !has(self.spec.priorityClassRef)) || (has(oldSelf.spec.priorityClassRef) && has(self.spec.priorityClassRef)) : true",
            "message": "priorityClassRef is immutable while workload quota reserved",
        },
    ]
    return crd(
        "Workload",
        "workloads",
        "Namespaced",
        root("Workload", {"spec": spec, "status": status}, **{"x-kubernetes-validations": rules}),
        short_names=("wl",),
        columns=(
            column("Queue", ".spec.queueName", "string", "LocalQueue the workload was submitted to"),
            column("Reserved in", ".status.admission.clusterQueue", "string", "ClusterQueue where the workload reserves quota"),
            column("Admitted", ".status.conditions[?(@.type=='Admitted')].status", "string", "Admission status"),
            column("Finished", ".status.conditions[?(@.type=='Finished')].status", "string", "Whether the workload finished"),
            column("Age", ".metadata.creationTimestamp", "date", "Time since the workload was created"),
        ),
    )


LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"


def topology_assignment() -> dict:
    """Kueue v1beta2's PodSetAssignment.topologyAssignment: levels, and slices of domains whose values
    per level are roots (with an optional prefix and suffix) or one universalValue, and whose pod
    counts are podCounts or one universalPodCount."""
    level_values = obj(
        "The values of the slice's domains at one level.",
        {
            "prefix": string("Common prefix of every value.", maxLength=63),
            "suffix": string("Common suffix of every value.", maxLength=63),
            "roots": array("The values, less prefix and suffix; one per domain.", string("A value.", maxLength=63),
                           minItems=1, maxItems=100000, **{"x-kubernetes-list-type": "atomic"}),
            "universalValue": string("The value of every domain of the slice at this level.", maxLength=63),
        },
        **{"x-kubernetes-validations": [
            {"rule": "has(self.roots) != has(self.universalValue)", "message": "Exactly one of roots, universalValue must be set"},
            {"rule": "!(has(self.universalValue) && (has(self.prefix) || has(self.suffix)))", "message": "universalValue cannot be set together with prefix or suffix"},
        ]},
    )
    slice_ = obj(
        "Topology assignment of a subset of the pod set's pods.",
        {
            "domainCount": int32("Domains in this slice.", minimum=1),
            "valuesPerLevel": array("One entry per level.", level_values, minItems=1, maxItems=16,
                                    **{"x-kubernetes-list-type": "atomic"}),
            "podCounts": array("Pods per domain.", int32("Pods.", minimum=0), minItems=1, maxItems=100000,
                               **{"x-kubernetes-list-type": "atomic"}),
            "universalPodCount": int32("Pods in every domain of the slice."),
        },
        required=["domainCount", "valuesPerLevel"],
        **{"x-kubernetes-validations": [
            {"rule": "!has(self.podCounts) || size(self.podCounts) == self.domainCount", "message": "podCounts must have length equal to domainCount"},
            {"rule": "has(self.podCounts) != has(self.universalPodCount)", "message": "Exactly one of podCounts, universalPodCount must be set"},
            {"rule": "self.valuesPerLevel.all(x, !has(x.roots) || size(x.roots) == self.domainCount)", "message": "roots, if set, must have length equal to domainCount of this TopologyAssignmentSlice"},
        ]},
    )
    return obj(
        "Where the pod set's pods go: per topology domain at the lowest level, how many (Topology Aware Scheduling).",
        {
            "levels": array("Node label keys of the assigned levels, highest first.", string("A label key.", maxLength=317),
                            minItems=1, maxItems=16, **{"x-kubernetes-list-type": "atomic"}),
            "slices": array("Slices of the assignment; their union is the whole.", slice_, maxItems=1000,
                            **{"x-kubernetes-list-type": "atomic"}),
        },
        **{"x-kubernetes-validations": [
            {"rule": "self.slices.all(x, size(x.valuesPerLevel) == size(self.levels))", "message": "valuesPerLevel must have the same length as the number of levels in this TopologyAssignment"},
        ]},
    )


def topology() -> dict:
    level = obj(
        "One level of the topology.",
        {"nodeLabel": string("Node label of this level, e.g. cloud.provider.com/topology-rack.", minLength=1, maxLength=316,
                             pattern=LABEL_KEY)},
        required=["nodeLabel"],
    )
    spec = obj(
        "The levels of the topology, highest first.",
        {
            "levels": array(
                "Levels of the topology (kubernetes.io/hostname only as the lowest).",
                level,
                minItems=1,
                maxItems=16,
                **{
                    "x-kubernetes-list-type": "atomic",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "field is immutable"},
                        {"rule": "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0", "message": "must be unique"},
                        {"rule": "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",
                         "message": "the kubernetes.io/hostname label can only be used at the lowest level of topology"},
                    ],
                },
            )
        },
        required=["levels"],
    )
    return crd("Topology", "topologies", "Cluster", root("Topology", {"spec": spec}), status=False)


def workload_priority_class() -> dict:
    schema = root(
        "WorkloadPriorityClass",
        {
            "value": int32("Priority given to workloads that name this class."),
            "description": string("When to use this class.", maxLength=2048),
        },
        required=["value"],
    )
    return crd(
        "WorkloadPriorityClass",
        "workloadpriorityclasses",
        "Cluster",
        schema,
        columns=(column("Value", ".value", "integer", "Priority value"),),
        status=False,
    )


BUILDERS = {
    "resourceflavors": resource_flavor,
    "cohorts": cohort,
    "clusterqueues": cluster_queue,
    "localqueues": local_queue,
    "workloads": workload,
    "workloadpriorityclasses": workload_priority_class,
    "topologies": topology,
}

HEADER = "# Generated by manifests/tools/gen_crds.py - edit that script, not this file.\n"


class NoAliases(yaml.SafeDumper):
    """Shared sub-schemas are written out in full: no YAML anchors in the manifests."""

    def ignore_aliases(self, data) -> bool:
        return True


def render(plural: str) -> str:
    return HEADER + yaml.dump(BUILDERS[plural](), Dumper=NoAliases, sort_keys=False, width=120)


def path_for(plural: str) -> Path:
    return CRD_DIR / f"{GROUP}_{plural}.yaml"


def main() -> int:
    for plural in BUILDERS:
        path_for(plural).write_text(render(plural))
        print(f"wrote {path_for(plural)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
