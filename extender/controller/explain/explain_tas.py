"""`gpuqueue explain`'s Topology Aware Scheduling lines: what each pod set of a Workload asks of
the topology (its pod template's annotations, as the engine reads them), and, once admitted, the
domains its pods were given (``status.admission.podSetAssignments[].topologyAssignment``). Why
none fits is Kueue's message, which `explain` shows already."""

from __future__ import annotations

from gpuqueue.api.topology import from_v1beta2
from gpuqueue.extender.quota.tas.request import TopologyRequest, from_annotations

_LABEL = "  Topology:     "


def topology_lines(wl: dict) -> list[str]:
    lines = []
    admitted = {a.get("name"): a for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ()}
    for ps in (wl.get("spec") or {}).get("podSets") or ():
        name, count = ps.get("name", "main"), ps.get("count", 1)
        annotations = ((ps.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        request = from_annotations(annotations)
        raw = (admitted.get(name) or {}).get("topologyAssignment")
        if raw is not None:
            lines.append(f"{_LABEL}pod set {name}: {_assignment(raw)}")
        elif request is not None:
            lines.append(f"{_LABEL}pod set {name} asks for {count} pod(s) {_asked(request)}")
    return lines


def _asked(req: TopologyRequest) -> str:
    if req.required is not None:
        where = f"in one {req.required} (required)"
    elif req.preferred is not None:
        where = f"in one {req.preferred} if one holds them, else as few as can (preferred)"
    else:
        where = "wherever there is room (unconstrained)"
    if req.slice_level is not None:
        where += f", in slices of {req.slice_size if req.slice_size is not None else '?'} pod(s) each in one {req.slice_level}"
    return where


def _assignment(raw: dict) -> str:
    try:
        ta = from_v1beta2(raw)
    except (ValueError, AttributeError, TypeError) as exc:
        return f"topologyAssignment unreadable ({exc})"
    domains = ", ".join(f"{'/'.join(values)}×{count}" for values, count in ta.domains)
    return f"{domains} ({', '.join(ta.levels)})"
