"""How much kube-scheduler should like each feasible node for a pod (0..MaxExtenderPriority).

Most-allocated GPU bin-packing: the fuller a node is after the pod lands, the better, so
partly used nodes are filled first and whole nodes stay free for large jobs. On top of it,
pods of the same Job prefer the node their siblings (bound or in flight) are on, then the
topology domain (the cache's topology label) they are in.

``rank_nodes`` gives the exact value, used by the simulator to pick a node; ``extender_score`` is its
integer projection sent to kube-scheduler.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from extender.placement.cache import NodeCache, NodeState
from extender.placement.model import PodRequest

MAX_EXTENDER_PRIORITY = 10
PACKING_WEIGHT = 7.0
SAME_NODE_BONUS = 3.0
SAME_DOMAIN_BONUS = 1.5

_EMPTY = NodeState("")


def rank_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache) -> list[tuple[str, float]]:
    """The exact preference (0..10) for each candidate, in candidate order."""
    names = list(names)
    return list(zip(names, rank_values(pod, names, cache)))


def rank_values(pod: PodRequest, names: list[str], cache: NodeCache) -> list[float]:
    """``rank_nodes`` without the names: one value per candidate, in order."""
    cache.expire()
    states = cache.states
    own = cache.own_reservation(pod.uid)
    own_node, own_gpus = (own[0], own[1]) if own is not None else (None, 0)
    need = pod.gpus
    job = pod.job_key
    domains: Mapping[str, int] = {}
    if job is not None and cache.topology_label is not None:
        domains = cache.job_domains(job)
        own_domain = cache.domain(own_node) if own_node is not None else None
        if own_domain is not None and domains.get(own_domain, 0) > 0:
            domains = {d: n - (d == own_domain) for d, n in domains.items() if n - (d == own_domain) > 0}
    out = []
    for name in names:
        st = states.get(name, _EMPTY)
        alloc = st.gpus_alloc
        value = 0.0
        if alloc > 0:
            after = st.gpus_used + st.gpus_reserved + need
            if name == own_node:
                after -= own_gpus
            value = PACKING_WEIGHT * after / alloc if after < alloc else PACKING_WEIGHT
        if job is not None and (st.jobs or domains):
            here = st.jobs.get(job, 0)
            if name == own_node:
                here -= 1
            if here > 0:
                value += SAME_NODE_BONUS
            elif domains and st.domain in domains:
                value += SAME_DOMAIN_BONUS
        out.append(value)
    return out


def extender_score(value: float) -> int:
    return max(0, min(MAX_EXTENDER_PRIORITY, int(value + 0.5)))


def score_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache) -> list[tuple[str, int]]:
    return [(n, extender_score(v)) for n, v in rank_nodes(pod, names, cache)]


def best(ranked: list[tuple[str, float]]) -> str | None:
    """Highest rank; ties go to the smallest node name, so results are deterministic."""
    top = None
    for name, value in ranked:
        if top is None or value > top[1] or (value == top[1] and name < top[0]):
            top = (name, value)
    return top[0] if top is not None else None
