"""How much kube-scheduler should like each feasible node for a pod (0..MaxExtenderPriority).

Most-allocated GPU bin-packing: the fuller a node is after the pod lands, the better, so
partly used nodes are filled first and whole nodes stay free for large jobs. On top of it,
pods of the same Job prefer the node their siblings (bound or in flight) are on, then the
topology domain (the cache's topology label) they are in.

``rank_nodes`` gives the exact value, used by the simulator to pick a node; ``extender_score`` is its
integer projection sent to kube-scheduler.
"""

from __future__ import annotations

from itertools import repeat
from typing import Iterable, Mapping

from extender.placement.cache import NodeCache, load_key, load_of
from extender.placement.model import PodRequest

MAX_EXTENDER_PRIORITY = 10
PACKING_WEIGHT = 7.0
SAME_NODE_BONUS = 3.0
SAME_DOMAIN_BONUS = 1.5

def rank_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache) -> list[tuple[str, float]]:
    """The exact preference (0..10) for each candidate, in candidate order."""
    names = list(names)
    return list(zip(names, rank_values(pod, names, cache)))


def rank_values(pod: PodRequest, names: list[str], cache: NodeCache) -> list[float]:
    """``rank_nodes`` without the names: one value per candidate, in order."""
    cache.expire()
    own = cache.own_reservation(pod.uid)
    own_node, own_gpus = (own[0], own[1]) if own is not None else (None, 0)
    packing = _Packing(pod.gpus)
    load = cache.load
    # One C-level pass: each node's load key, then its packing value (computed once per key).
    values = list(map(packing.__getitem__, map(load.get, names, repeat(_NO_LOAD))))
    if own_gpus and own_node in load:  # the pod's own in-flight GPUs do not count against it
        alloc, taken = load_of(load[own_node])
        for i in _positions(names, own_node):
            values[i] = packing.value(alloc, taken - own_gpus)
    job = pod.job_key
    if job is None:
        return values
    here = cache.job_nodes(job)
    if own_node is not None and here.get(own_node, 0) == 1:  # only this pod is there
        here = {n: c for n, c in here.items() if n != own_node}
    domains: Mapping[str, int] = {}
    if cache.topology_label is not None:
        domains = cache.job_domains(job)
        own_domain = cache.domain(own_node) if own_node is not None else None
        if own_domain is not None and domains.get(own_domain, 0) > 0:
            domains = {d: n - (d == own_domain) for d, n in domains.items() if n - (d == own_domain) > 0}
    if not here and not domains:
        return values
    domain_of = cache.domain_of
    return [v + (SAME_NODE_BONUS if n in here else SAME_DOMAIN_BONUS if domain_of.get(n) in domains else 0.0)
            for n, v in zip(names, values)]


_NO_LOAD = load_key(0, 0)


class _Packing(dict):
    """load key -> most-allocated packing value for a pod needing ``need`` GPUs."""

    def __init__(self, need: int) -> None:
        super().__init__()
        self.need = need

    def value(self, alloc: int, taken: int) -> float:
        if alloc <= 0:
            return 0.0
        after = taken + self.need
        return PACKING_WEIGHT * after / alloc if after < alloc else PACKING_WEIGHT

    def __missing__(self, key: int) -> float:
        v = self[key] = self.value(*load_of(key))
        return v


def _positions(names: list[str], name: str):
    i = -1
    while True:
        try:
            i = names.index(name, i + 1)
        except ValueError:
            return
        yield i


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
