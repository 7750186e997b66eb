"""A pod of a pod set admitted with a topology assignment (TAS) lands only in its assigned domains,
and no domain takes more of the pod set's pods than the assignment gives it: the extender's side of
what Kueue does with scheduling gates and injected node selectors, checked on the nodes themselves,
so an edited pod template or a hand-made pod does not get around it. Pure: node facts and the pod
set's pods per node come from the node cache."""

from __future__ import annotations

from typing import Iterable

from gpuqueue.api.topology import TopologyAssignment

from gpuqueue.extender.placement.cache import NodeCache


def outside_assignment(ta: TopologyAssignment, names: Iterable[str], cache: NodeCache, job_key: str, pod_uid: str,
                       where: str) -> dict[str, str]:
    """The candidates the pod may not take, each with the reason (unresolvable: preempting pods
    would not make them part of the assignment)."""
    wanted = ta.by_domain()
    outside = f"node is not in the topology assignment of {where}"
    full = f"the node's topology domain has all the pods {where} is assigned there"
    placed: dict[tuple[str, ...], int] = {}
    own = cache.pod_node(pod_uid)
    for node, pods in cache.job_nodes(job_key).items():
        d = _domain(cache, node, ta.levels)
        if d is not None:
            placed[d] = placed.get(d, 0) + pods - (1 if own is not None and own[0] == node else 0)
    out = {}
    for name in names:
        d = _domain(cache, name, ta.levels)
        if d is None or d not in wanted:
            out[name] = outside
        elif placed.get(d, 0) >= wanted[d]:
            out[name] = full
    return out


def _domain(cache: NodeCache, name: str, levels: tuple[str, ...]) -> tuple[str, ...] | None:
    info = cache.node(name)
    if info is None:
        return None
    values = tuple(info.labels.get(k) for k in levels)
    return None if None in values else values  # type: ignore[return-value]
