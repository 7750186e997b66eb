"""Pure functions over Kueue's Workload and the Job it stands for: its name, its spec, its
conditions, its `status.admission`."""

from __future__ import annotations

import datetime as dt
import functools
import time
from typing import Any

import orjson

from gpuqueue.extender.controller.kinds.managed_kinds import ManagedKind, batch_job
from gpuqueue.jobframework import names
from gpuqueue.jobframework.kinds.batchjob import ORIGINAL_SCHEDULING_ANNOTATION  # noqa: F401 - tests read it here
from gpuqueue.extender.quota.model import Admission
from gpuqueue.api.quantity import format_engine_int as _format_engine_int
from gpuqueue.api.quantity import parse_engine_int as _parse_engine_int
from gpuqueue.api import topology
from gpuqueue.api.kueue import JOB_UID_LABEL, PRIORITY_CLASS_LABEL

WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
MAIN = "main"
BATCH_JOB = batch_job()

HUMAN_PREEMPTION_REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}



# Quantities are formatted and parsed through exact fractions (a few hundred microseconds); a
# workload's few amounts repeat across thousands of admissions (admission_to_status was ~8% of
# the controller's CPU in bench/kueue_realtime.py), so both are memoized.
format_engine_int = functools.lru_cache(maxsize=8192)(_format_engine_int)


@functools.lru_cache(maxsize=8192)
def _parse_cached(resource: str, raw: str) -> int:
    return _parse_engine_int(resource, raw)


def parse_engine_int(resource: str, raw) -> int:
    return _parse_cached(resource, raw) if isinstance(raw, str) else _parse_engine_int(resource, raw)


def json_copy(obj):
    """A deep copy of JSON data (what the watch caches hold), several times faster than copy.deepcopy."""
    return orjson.loads(orjson.dumps(obj))

def status_copy(obj: dict) -> dict:
    """A copy whose top level and `status` can be set without touching the original (which
    shares everything below): enough for a change that sets status fields."""
    out = dict(obj)
    if isinstance(out.get("status"), dict):
        out["status"] = dict(out["status"])
    return out


_now_cache: tuple[int, str] = (0, "")


def now_rfc3339() -> str:
    """The time at seconds, as metav1.Time is written; formatted once per second."""
    global _now_cache
    second = int(time.time())
    if _now_cache[0] != second:
        _now_cache = (second, dt.datetime.fromtimestamp(second, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _now_cache[1]


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return dt.datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()


def workload_name(job_name: str, job_uid: str) -> str:
    """Kueue's name for a batch/v1 Job's Workload, `job-NAME-HASH` (names.workload_name): stable
    for one Job, different for a recreated one."""
    return names.workload_name("Job", "batch", job_name, job_uid)


_TEMPLATE_FIELDS = ("nodeSelector", "tolerations", "affinity", "overhead")


def pod_sets_differ(wl: dict, pod_sets: list[dict], queue_name: str) -> bool:
    """The Workload's spec no longer says what `pod_sets` (ManagedKind.workload_pod_sets) and
    `queue_name` say: by
    what decides admission (Kueue compares each container's resources; so does this, and the
    scheduling fields), not by representation."""
    spec = wl.get("spec") or {}
    if spec.get("queueName", "") != queue_name:
        return True
    have = spec.get("podSets") or []
    return len(have) != len(pod_sets) or any(_pod_set_key(a) != _pod_set_key(b) for a, b in zip(have, pod_sets))


def _pod_set_key(ps: dict) -> tuple:
    pod = (ps.get("template") or {}).get("spec") or {}
    return (ps.get("name"), ps.get("count"),
            [(c.get("resources") or {}, c.get("restartPolicy")) for c in pod.get("initContainers") or ()],
            [c.get("resources") or {} for c in pod.get("containers") or ()],
            [pod.get(k) or None for k in _TEMPLATE_FIELDS])


def build_workload(job: dict, priority: int, priority_class: dict | None, queue_name: str,
                   kind: ManagedKind = BATCH_JOB, name: str | None = None) -> dict:
    """`name`: the Workload's (default: Kueue's name for the owner)."""
    meta = job["metadata"]
    spec: dict[str, Any] = {
        "active": True,
        "queueName": queue_name,
        "podSets": kind.workload_pod_sets(job),
        "priority": priority,
    }
    if priority_class is not None:
        spec["priorityClassRef"] = priority_class
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name or kind.workload_name(job),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": kind.owner_references(job),
            **({"annotations": kind.workload_annotations} if kind.workload_annotations else {}),
        },
        "spec": spec,
    }


WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"


def workload_priority_class_ref(name: str) -> dict:
    return {"group": "kueue.x-k8s.io", "kind": WORKLOAD_PRIORITY_CLASS, "name": name}


def priority_class_of(job: dict, workload_classes: dict[str, int], pod_classes: dict[str, int],
                      kind: ManagedKind = BATCH_JOB) -> dict | None:
    """The Workload's `spec.priorityClassRef` (v1beta2: group, kind, name), or None when its
    priority comes from no class."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    wpc = labels.get(PRIORITY_CLASS_LABEL)
    if wpc and wpc in workload_classes:
        return workload_priority_class_ref(wpc)
    pc = kind.priority_class_name(job)
    if pc and pc in pod_classes:
        return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pc}
    return None


def owner_ref(obj: dict) -> dict:
    """Its controller ownerReference ({} if none): a Workload's owner, of whatever kind."""
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return {}


def owner_job(obj: dict) -> str:
    """The name of the object that controls `obj` ("" if none)."""
    return owner_ref(obj).get("name", "")


def owner_uid(obj: dict) -> str:
    """The UID of the object that controls `obj` ("" if none)."""
    return owner_ref(obj).get("uid", "")


# -- conditions -----------------------------------------------------------------------------------------

def condition(wl: dict | None, type_: str) -> dict | None:
    for c in ((wl or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c
    return None


def is_true(wl: dict | None, type_: str) -> bool:
    c = condition(wl, type_)
    return c is not None and c.get("status") == "True"


def is_active(wl: dict | None) -> bool:
    """Kueue's spec.active (true when unset): false stops the workload (`gpuqueue stop workload`)."""
    return ((wl or {}).get("spec") or {}).get("active", True) is not False


def set_condition(conditions: list[dict], type_: str, status: str, reason: str, message: str, now: str,
                  generation: int | None = None) -> list[dict]:
    """A new list with the condition set; lastTransitionTime moves only when the status does."""
    out = [c for c in conditions if c.get("type") != type_]
    old = next((c for c in conditions if c.get("type") == type_), None)
    new = {"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == status else now}
    if generation is not None:
        new["observedGeneration"] = generation
    out.append(new)
    return out


def without_condition(wl: dict, type_: str) -> dict | None:
    """The Workload with that condition dropped (status edited in place, on a copy the caller
    made), or None when it has none."""
    status = wl.get("status") or {}
    conds = status.get("conditions") or []
    kept = [c for c in conds if c.get("type") != type_]
    if len(kept) == len(conds):
        return None
    status["conditions"] = kept
    return wl


def reserved_message(cq: str) -> str:
    return f"Quota reserved in ClusterQueue {cq}"


def preemption_message(preemptor_uid: str, preemptor_job_uid: str, reason: str, preemptor_path: str,
                       preemptee_path: str) -> str:
    return (f"Preempted to accommodate a workload (UID: {preemptor_uid or 'UNKNOWN'}, JobUID: "
            f"{preemptor_job_uid or 'UNKNOWN'}) due to {HUMAN_PREEMPTION_REASONS.get(reason, 'UNKNOWN')}; "
            f"preemptor path: {preemptor_path or 'UNKNOWN'}; preemptee path: {preemptee_path or 'UNKNOWN'}")


# -- admission -------------------------------------------------------------------------------------------

def admission_to_status(a: Admission) -> dict:
    """Kueue's `status.admission`: each pod set with its own flavors and what its own pods take."""
    assignments = []
    for ps, flavors in sorted(a.flavors.items()):
        usage = {res: format_engine_int(res, v) for res, v in sorted(a.usage_of(ps).items())}
        psa = {"name": ps, "flavors": dict(sorted(flavors.items())), "resourceUsage": usage,
               "count": a.counts.get(ps, 1)}
        if ps in a.topology:
            psa["topologyAssignment"] = topology.to_v1beta2(a.topology[ps])
        assignments.append(psa)
    return {"clusterQueue": a.cluster_queue, "podSetAssignments": assignments}


def admission_from_status(admission: dict) -> Admission:
    flavors: dict[str, dict[str, str]] = {}
    usage: dict[tuple[str, str], int] = {}
    pod_set_usage: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    placed: dict = {}
    for psa in admission.get("podSetAssignments") or ():
        name = psa.get("name", MAIN)
        flavors[name] = dict(psa.get("flavors") or {})
        if psa.get("topologyAssignment"):
            try:
                placed[name] = topology.from_v1beta2(psa["topologyAssignment"])
            except ValueError:  # the quota still counts; its pods' nodes are then counted wherever they fit
                pass
        counts[name] = int(psa.get("count", 1))
        own = pod_set_usage.setdefault(name, {})
        for res, qty in (psa.get("resourceUsage") or {}).items():
            amount = parse_engine_int(res, qty)
            own[res] = own.get(res, 0) + amount
            fr = (flavors[name].get(res, ""), res)
            usage[fr] = usage.get(fr, 0) + amount
    return Admission(cluster_queue=admission["clusterQueue"], flavors=flavors, usage=usage, counts=counts,
                     borrowing=False, pod_set_usage=pod_set_usage, topology=placed)


# -- status edits -------------------------------------------------------------------------------------------
# Each sets its fields in place (on a copy the caller made) and returns the Workload, or None when it
# already is so.

def reserved(wl: dict, admission: Admission) -> dict | None:
    status = wl.setdefault("status", {})
    new_admission = admission_to_status(admission)
    if status.get("admission") == new_admission and is_true(wl, "QuotaReserved") and is_true(wl, "Admitted") \
            and not is_true(wl, "Evicted") and not is_true(wl, "Preempted"):
        return None  # an eviction left half-done (marked, reservation kept) is still written over
    now, gen = now_rfc3339(), wl["metadata"].get("generation")
    status["admission"] = new_admission
    conds = status.get("conditions") or []
    conds = set_condition(conds, "QuotaReserved", "True", "QuotaReserved", reserved_message(admission.cluster_queue),
                          now, gen)
    conds = set_condition(conds, "Admitted", "True", "Admitted", "The workload is admitted", now, gen)
    for type_ in ("Evicted", "Preempted"):
        c = next((c for c in conds if c.get("type") == type_), None)
        if c is not None and c.get("status") == "True":
            conds = set_condition(conds, type_, "False", "QuotaReserved", f"Previously: {c.get('message', '')}",
                                  now, gen)
    status["conditions"] = conds
    return wl


def holds_reservation(wl: dict | None) -> bool:
    """QuotaReserved and an admission, not Finished: the Workloads whose quota counts."""
    return bool(((wl or {}).get("status") or {}).get("admission")) and is_true(wl, "QuotaReserved") \
        and not is_true(wl, "Finished")


def shows_reservation(wl: dict | None) -> bool:
    """Any part of a reservation on the record (the admission, or QuotaReserved or Admitted true)."""
    return bool(((wl or {}).get("status") or {}).get("admission")) or is_true(wl, "QuotaReserved") \
        or is_true(wl, "Admitted")


def lets_pods_in(wl: dict | None) -> bool:
    """The extender lets this Workload's pods onto nodes (scheduler/enforce.py: ADMITTED): it holds
    a reservation and is neither evicted nor finished."""
    return (bool(((wl or {}).get("status") or {}).get("admission")) and is_true(wl, "QuotaReserved")
            and not is_true(wl, "Evicted") and not is_true(wl, "Finished"))


def with_admission(wl: dict, admission: Admission) -> dict | None:
    """The reservation as gpuqueue made it put back (a tenant edited or cleared it), leaving the
    other conditions (an eviction under way) as they are; None when it already is so."""
    status = wl.setdefault("status", {})
    new_admission = admission_to_status(admission)
    if status.get("admission") == new_admission and is_true(wl, "QuotaReserved") and is_true(wl, "Admitted"):
        return None
    now, gen = now_rfc3339(), wl["metadata"].get("generation")
    status["admission"] = new_admission
    conds = set_condition(status.get("conditions") or [], "QuotaReserved", "True", "QuotaReserved",
                          reserved_message(admission.cluster_queue), now, gen)
    status["conditions"] = set_condition(conds, "Admitted", "True", "Admitted", "The workload is admitted", now, gen)
    return wl


def evicted(wl: dict, reason: str, message: str, preempted_reason: str | None = None,
            status_fields: dict | None = None) -> dict | None:
    """Evicted true (and Preempted, for a preemption) on a Workload holding a reservation, with
    `status_fields` beside it; None when it holds none or already is so. From then on the extender
    refuses its pods (lets_pods_in)."""
    status = wl.setdefault("status", {})
    if not status.get("admission"):
        return None
    now, gen = now_rfc3339(), wl["metadata"].get("generation")
    conds = set_condition(status.get("conditions") or [], "Evicted", "True", reason, message, now, gen)
    if preempted_reason is not None:
        conds = set_condition(conds, "Preempted", "True", preempted_reason, message, now, gen)
    if is_true(wl, "Evicted") and conds == status.get("conditions"):
        return None
    status["conditions"] = conds
    status.update(status_fields or {})
    return wl


def unreserved(wl: dict, reason: str, message: str) -> dict:
    status = wl.setdefault("status", {})
    now, gen = now_rfc3339(), wl["metadata"].get("generation")
    status.pop("admission", None)
    conds = set_condition(status.get("conditions") or [], "QuotaReserved", "False", reason, message, now, gen)
    conds = set_condition(conds, "Admitted", "False", "NoReservation", "The workload has no reservation", now, gen)
    status["conditions"] = conds
    return wl


def requeued(wl: dict, reason: str, message: str, queued: bool = True) -> dict:
    """The reservation cleared after an eviction; Requeued true, or false while the workload is held
    out of its queue (deactivated)."""
    out = unreserved(wl, "Pending", message)
    status = out["status"]
    status["conditions"] = set_condition(status["conditions"], "Requeued", "True" if queued else "False", reason,
                                         message, now_rfc3339(), wl["metadata"].get("generation"))
    return out


def with_requeued(wl: dict, queued: bool, reason: str, message: str) -> dict | None:
    """Requeued set (Kueue's Deactivated / Reactivated), or None when it already is so."""
    c = condition(wl, "Requeued")
    status = "True" if queued else "False"
    if c is not None and (c.get("status"), c.get("reason"), c.get("message")) == (status, reason, message):
        return None
    st = wl.setdefault("status", {})
    st["conditions"] = set_condition(st.get("conditions") or [], "Requeued", status, reason, message, now_rfc3339(),
                                     wl["metadata"].get("generation"))
    return wl
