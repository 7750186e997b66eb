"""How much kube-scheduler should like each feasible node for a pod (0..MaxExtenderPriority).

Most-allocated GPU bin-packing: the fuller a node is after the pod lands, the better, so
partly used nodes are filled first and whole nodes stay free for large jobs. On top of it,
pods of the same Job prefer the node their siblings (bound or in flight) are on, then the
topology domain (the cache's topology label) they are in.

``rank_nodes`` gives the exact value, used by the simulator to pick a node; ``extender_score`` is its
integer projection sent to kube-scheduler, which ``extender_scores`` reads from the cache's
per-need ScoreProfile instead of computing it node by node.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter
from typing import Iterable, Mapping

from gpuqueue.extender.placement.cache import NodeCache, NodeState, ScoreCode, ScoreProfile
from gpuqueue.extender.placement.model import PodRequest
from gpuqueue.extender.placement.rules import (MAX_EXTENDER_PRIORITY, PACKING_WEIGHT, SAME_DOMAIN_BONUS,  # noqa: F401
                                      SAME_NODE_BONUS, extender_score, packing_value)

_EMPTY = NodeState("")


def rank_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache) -> list[tuple[str, float]]:
    """The exact preference (0..10) for each candidate, in candidate order."""
    names = list(names)
    return list(zip(names, rank_values(pod, names, cache)))


def _job_context(pod: PodRequest, cache: NodeCache) -> tuple[str | None, int, Mapping[str, int]]:
    """(own node, own GPUs, the Job's topology domains without the pod itself)."""
    own = cache.own_reservation(pod.uid)
    own_node, own_gpus = (own[0], own[1]) if own is not None else (None, 0)
    domains: Mapping[str, int] = {}
    if pod.job_key is not None and cache.topology_label is not None:
        domains = cache.job_domains(pod.job_key)
        own_domain = cache.domain(own_node) if own_node is not None else None
        if own_domain is not None and domains.get(own_domain, 0) > 0:
            domains = {d: n - (d == own_domain) for d, n in domains.items() if n - (d == own_domain) > 0}
    return own_node, own_gpus, domains


def _value(pod: PodRequest, name: str, st: NodeState, own_node: str | None, own_gpus: int,
           domains: Mapping[str, int]) -> float:
    """One node's exact rank value."""
    after = st.gpus_used + st.gpus_reserved + pod.gpus
    if name == own_node:
        after -= own_gpus
    value = packing_value(st.gpus_alloc, after)
    job = pod.job_key
    if job is not None and (st.jobs or domains):
        here = st.jobs.get(job, 0)
        if name == own_node:
            here -= 1
        if here > 0:
            value += SAME_NODE_BONUS
        elif domains and st.domain in domains:
            value += SAME_DOMAIN_BONUS
    return value


def rank_values(pod: PodRequest, names: list[str], cache: NodeCache) -> list[float]:
    """``rank_nodes`` without the names: one value per candidate, in order."""
    cache.expire()
    states = cache.states
    own_node, own_gpus, domains = _job_context(pod, cache)
    return [_value(pod, name, states.get(name, _EMPTY), own_node, own_gpus, domains) for name in names]


_NOT_CACHED = ScoreCode(0, 0, 0, None)  # a node the cache lacks: no GPUs, no pods, no domain
_ALONE = attrgetter("alone")


def _current_codes(prof: ScoreProfile, names: list[str], cache: NodeCache,
                   known: tuple[list[ScoreCode], int] | None) -> list[ScoreCode]:
    """The ScoreProfile code of each name: ``known`` (codes of these names as of an epoch,
    from the filter) brought up to date for the nodes changed since, else one lookup each."""
    if known is not None:
        codes, epoch = known
        changed = cache.touched_since(epoch)
        if changed is not None and len(codes) == len(names):
            if changed:
                stale = list(map(changed.__contains__, names))
                if any(stale):
                    codes = list(codes)
                    get = prof.codes.get
                    for i in compress(range(len(names)), stale):
                        codes[i] = get(names[i], _NOT_CACHED)
            return codes
    return list(map(prof.codes.get, names, repeat(_NOT_CACHED)))


def extender_scores(pod: PodRequest, names: list[str], cache: NodeCache,
                    known: tuple[list[ScoreCode], int] | None = None) -> list[int]:
    """``extender_score`` of each candidate's rank value, in order, read from the cache's
    ScoreProfile (or ``known``: the codes a filter of the same pod and names read, with their
    ``cache.epoch``); the same-node bonus touches only the Job's nodes, and the node holding
    the pod's own reservation is scored on its own."""
    cache.expire()
    prof = cache.score_profile(pod.gpus)
    codes = _current_codes(prof, names, cache, known)
    own_node, own_gpus, domains = _job_context(pod, cache)
    job = pod.job_key
    if job is not None and domains:
        scores = list(map(prof.domain_scores(frozenset(domains)).__getitem__, codes))
    else:
        scores = list(map(_ALONE, codes))
    if job is not None:
        job_nodes = cache.job_nodes(job)
        if job_nodes:
            # The Job's nodes among the candidates: one lookup per candidate, however many nodes the Job has
            for i in compress(range(len(names)), map(job_nodes.__contains__, names)):
                scores[i] = codes[i].beside_job
    if own_node is not None and own_node in cache.states:
        own = {own_node: extender_score(_value(pod, own_node, cache.states[own_node], own_node, own_gpus, domains))}
        scores = list(map(own.get, names, scores))
    return scores


def score_nodes(pod: PodRequest, names: Iterable[str], cache: NodeCache) -> list[tuple[str, int]]:
    names = list(names)
    return list(zip(names, extender_scores(pod, names, cache)))


def choose(pod: PodRequest, names: list[str], cache: NodeCache,
           known: tuple[list[ScoreCode], int] | None = None) -> str:
    """The one candidate the pod is to go to: the best ``extender_scores`` (``known`` as there),
    ties settled by the exact rank value, then by the smallest name."""
    scores = extender_scores(pod, names, cache, known)
    top = max(scores)
    ties = list(compress(names, map(top.__eq__, scores)))
    return ties[0] if len(ties) == 1 else best(rank_nodes(pod, ties, cache))


def best(ranked: list[tuple[str, float]]) -> str | None:
    """Highest rank; ties go to the smallest node name, so results are deterministic."""
    top = None
    for name, value in ranked:
        if top is None or value > top[1] or (value == top[1] and name < top[0]):
            top = (name, value)
    return top[0] if top is not None else None
