"""How much kube-scheduler should like each feasible node for a pod (0..MaxExtenderPriority).

Most-allocated GPU bin-packing: the fuller a node is after the pod lands, the better, so
partly used nodes are filled first and whole nodes stay free for large jobs. On top of it,
pods of the same Job prefer the node their siblings (bound or in flight) are on, then the
topology domain (the cache's topology label) they are in.

``rank`` is the exact value, used by the simulator to pick a node; ``extender_score`` is its
integer projection sent to kube-scheduler.
"""

from __future__ import annotations

from typing import Iterable

from extender.placement.cache import NodeCache, NodeState
from extender.placement.model import PodRequest

MAX_EXTENDER_PRIORITY = 10
PACKING_WEIGHT = 7.0
SAME_NODE_BONUS = 3.0
SAME_DOMAIN_BONUS = 1.5

_EMPTY = NodeState("")


def rank(pod: PodRequest, name: str, cache: NodeCache, own=None) -> float:
    st = cache.states.get(name, _EMPTY)
    info = st.info
    alloc = info.allocatable.get("nvidia.com/gpu", 0) if info is not None else 0
    value = 0.0
    if alloc > 0:
        after = st.gpus_used + st.gpus_reserved + pod.gpus
        if own is not None and own[0] == name:
            after -= own[1]
        value = PACKING_WEIGHT * min(after / alloc, 1.0)
    job = pod.job_key
    if job is not None:
        mine = 1 if own is not None and own[0] == name else 0
        if st.jobs.get(job, 0) > mine:
            value += SAME_NODE_BONUS
        elif cache.topology_label is not None:
            domain = cache.domain(name)
            if domain is not None:
                in_domain = cache.domain_jobs(domain).get(job, 0)
                if own is not None and cache.domain(own[0]) == domain:
                    in_domain -= 1
                if in_domain > 0:
                    value += SAME_DOMAIN_BONUS
    return value


def extender_score(value: float) -> int:
    return max(0, min(MAX_EXTENDER_PRIORITY, int(value + 0.5)))


def rank_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache) -> list[tuple[str, float]]:
    cache.expire()
    own = cache.own_reservation(pod.uid)
    return [(n, rank(pod, n, cache, own)) for n in names]


def score_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache) -> list[tuple[str, int]]:
    return [(n, extender_score(v)) for n, v in rank_nodes(pod, names, cache)]


def best(ranked: list[tuple[str, float]]) -> str | None:
    """Highest rank; ties go to the smallest node name, so results are deterministic."""
    top = None
    for name, value in ranked:
        if top is None or value > top[1] or (value == top[1] and name < top[0]):
            top = (name, value)
    return top[0] if top is not None else None
