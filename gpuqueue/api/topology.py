"""Kueue's Topology Aware Scheduling vocabulary: the pod-set annotations, and a pod set's
`topologyAssignment` as plain data with its kueue.x-k8s.io/v1beta2 encoding (levels plus slices of
domains, each level's values either one `universal` value or `individual` roots, pod counts the
same way). Pure; shared by the quota engine (which computes assignments), the controller (which
writes them) and the extender (which holds pods to them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

HOSTNAME_LABEL = "kubernetes.io/hostname"
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
# gpuqueue's own, on a ResourceFlavor without a topologyName: admit only what its nodes can hold now
PLACEMENT_AWARE_ANNOTATION = "gpuqueue.io/placement-aware"


@dataclass(frozen=True, slots=True)
class TopologyAssignment:
    """Where a pod set's pods go: `levels` (node label keys, highest first) and, per domain at the
    lowest of them, the domain's values at those levels and its pod count."""

    levels: tuple[str, ...]
    domains: tuple[tuple[tuple[str, ...], int], ...]

    def count(self) -> int:
        return sum(c for _, c in self.domains)

    def by_domain(self) -> dict[tuple[str, ...], int]:
        return {values: count for values, count in self.domains}


def to_v1beta2(ta: TopologyAssignment) -> dict:
    """One slice holding every domain: a level whose values are all the same is `universalValue`,
    pod counts all the same are `universalPodCount` (Kueue's Workload type, v1beta2)."""
    n = len(ta.domains)
    if not n:
        return {"levels": list(ta.levels), "slices": []}
    per_level = []
    for i in range(len(ta.levels)):
        values = [v[i] for v, _ in ta.domains]
        per_level.append({"universalValue": values[0]} if len(set(values)) == 1 else {"roots": values})
    counts = [c for _, c in ta.domains]
    sl: dict[str, Any] = {"domainCount": n, "valuesPerLevel": per_level}
    if len(set(counts)) == 1:
        sl["universalPodCount"] = counts[0]
    else:
        sl["podCounts"] = counts
    return {"levels": list(ta.levels), "slices": [sl]}


def from_v1beta2(raw: Mapping[str, Any]) -> TopologyAssignment:
    """The v1beta2 encoding read back (prefix and suffix included); ValueError naming the field
    when it does not add up."""
    levels = raw.get("levels")
    if not isinstance(levels, list) or not levels or not all(isinstance(x, str) for x in levels):
        raise ValueError("topologyAssignment.levels: a non-empty list of label keys is required")
    domains: list[tuple[tuple[str, ...], int]] = []
    for s, sl in enumerate(raw.get("slices") or ()):
        where = f"topologyAssignment.slices[{s}]"
        n = sl.get("domainCount")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{where}.domainCount: {n!r}")
        per_level = sl.get("valuesPerLevel") or []
        if len(per_level) != len(levels):
            raise ValueError(f"{where}.valuesPerLevel: {len(per_level)} entries for {len(levels)} levels")
        columns = [_values(v, n, f"{where}.valuesPerLevel[{i}]") for i, v in enumerate(per_level)]
        counts = _counts(sl, n, where)
        for d in range(n):
            domains.append((tuple(col[d] for col in columns), counts[d]))
    return TopologyAssignment(tuple(levels), tuple(domains))


def _values(v: Mapping[str, Any], n: int, where: str) -> list[str]:
    roots, universal = v.get("roots"), v.get("universalValue")
    if isinstance(universal, str) and roots is None:
        return [universal] * n
    if not isinstance(roots, list) or len(roots) != n or universal is not None:
        raise ValueError(f"{where}: exactly one of roots ({n} of them), universalValue must be set")
    prefix, suffix = v.get("prefix") or "", v.get("suffix") or ""
    return [f"{prefix}{r}{suffix}" for r in roots]


def _counts(sl: Mapping[str, Any], n: int, where: str) -> list[int]:
    counts, universal = sl.get("podCounts"), sl.get("universalPodCount")
    if isinstance(universal, int) and counts is None:
        return [universal] * n
    if not isinstance(counts, list) or len(counts) != n or universal is not None \
            or not all(isinstance(x, int) and x >= 0 for x in counts):
        raise ValueError(f"{where}: exactly one of podCounts ({n} of them), universalPodCount must be set")
    return list(counts)
