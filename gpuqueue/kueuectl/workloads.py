"""What kueuectl shows of a Workload: its status, the Job it stands for, its ClusterQueue, its place
in its LocalQueue and how long it has run."""

from __future__ import annotations

from datetime import datetime

from gpuqueue.kueuectl.table import human_duration, parse_time, since

PENDING, QUOTA_RESERVED, ADMITTED, FINISHED = "pending", "quotareserved", "admitted", "finished"
STATUSES = ("all", PENDING, QUOTA_RESERVED, ADMITTED, FINISHED)
_TYPE_MAX = 20  # kueuectl cuts a long job type to 20 characters and "..."


def condition(wl: dict, type_: str) -> dict | None:
    return next((c for c in (wl.get("status") or {}).get("conditions") or () if c.get("type") == type_), None)


def is_true(wl: dict, type_: str) -> bool:
    return (condition(wl, type_) or {}).get("status") == "True"


def status(wl: dict) -> str:
    """Kueue's workload.Status, lower-case: finished, admitted, quotareserved or pending."""
    if is_true(wl, "Finished"):
        return FINISHED
    if is_true(wl, "Admitted"):
        return ADMITTED
    if is_true(wl, "QuotaReserved"):
        return QUOTA_RESERVED
    return PENDING


def local_queue_key(wl: dict) -> str:
    return f"{wl['metadata'].get('namespace', '')}/{(wl.get('spec') or {}).get('queueName', '')}"


def cluster_queue(wl: dict, local_queues: dict[str, dict]) -> str:
    """The admission's ClusterQueue, else the one its LocalQueue points to."""
    admission = (wl.get("status") or {}).get("admission") or {}
    if admission.get("clusterQueue"):
        return admission["clusterQueue"]
    return ((local_queues.get(local_queue_key(wl)) or {}).get("spec") or {}).get("clusterQueue", "")


def job_types(wl: dict) -> str:
    """`job.batch` for a Job: the owner's kind in lower case (kubectl's singular name) and group."""
    out = set()
    for ref in wl["metadata"].get("ownerReferences") or ():
        group = ref.get("apiVersion", "").rpartition("/")[0]
        kind = ref.get("kind", "").lower()
        name = f"{kind}.{group}" if group else kind
        out.add(name if len(name) <= _TYPE_MAX else name[:_TYPE_MAX] + "...")
    return ", ".join(sorted(out))


def job_names(wl: dict) -> str:
    return ", ".join(sorted({ref.get("name", "") for ref in wl["metadata"].get("ownerReferences") or ()}))


def owned_by(wl: dict, kind: str, group: str | None, name: str) -> bool:
    """--for KIND[.GROUP]/NAME: an owner of that kind (and group, when given) and name."""
    for ref in wl["metadata"].get("ownerReferences") or ():
        ref_group = ref.get("apiVersion", "").rpartition("/")[0]
        if ref.get("kind", "").lower() == kind and ref.get("name") == name and (group is None or ref_group == group):
            return True
    return False


def _queued_at(wl: dict) -> str:
    # requeued after an eviction: its place is taken again at that time (Kueue's default)
    requeued = condition(wl, "Requeued")
    if requeued and requeued.get("status") == "True":
        return requeued.get("lastTransitionTime", "")
    return wl["metadata"].get("creationTimestamp", "")


def positions(workloads: list[dict]) -> dict[str, int]:
    """namespace/name -> place among the pending Workloads of its LocalQueue, from 0, in the order
    they are considered: higher priority first, then earlier queued."""
    by_queue: dict[str, list[dict]] = {}
    for wl in workloads:
        if status(wl) == PENDING:
            by_queue.setdefault(local_queue_key(wl), []).append(wl)
    out = {}
    for waiting in by_queue.values():
        waiting.sort(key=lambda w: (-((w.get("spec") or {}).get("priority") or 0), _queued_at(w), w["metadata"]["name"]))
        for i, wl in enumerate(waiting):
            out[f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"] = i
    return out


def exec_time(wl: dict, now: datetime) -> str:
    """Since admission, to the end when finished; empty when not admitted."""
    admitted = condition(wl, "Admitted")
    if not admitted or admitted.get("status") != "True":
        return ""
    end = now
    if is_true(wl, "Finished"):
        end = parse_time(condition(wl, "Finished").get("lastTransitionTime")) or now
    start = parse_time(admitted.get("lastTransitionTime"))
    return human_duration((end - start).total_seconds()) if start else ""


def row(wl: dict, local_queues: dict[str, dict], place: dict[str, int], now: datetime) -> list[str]:
    key = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
    return [wl["metadata"]["name"], job_types(wl), job_names(wl), (wl.get("spec") or {}).get("queueName", ""),
            cluster_queue(wl, local_queues), status(wl).upper(), str(place[key]) if key in place else "",
            exec_time(wl, now), since(wl["metadata"].get("creationTimestamp"), now)]


HEADERS = ["NAME", "JOB TYPE", "JOB NAME", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS", "POSITION IN QUEUE",
           "EXEC TIME", "AGE"]
