"""Placement: which nodes an admitted pod may land on and which it should prefer.
Pure code (no I/O, no asyncio), shared by the scheduler extender and the simulator."""

from gpuqueue.extender.placement.cache import NodeCache, cache_of
from gpuqueue.extender.placement.filter import FilterResult, filter_nodes, summarize
from gpuqueue.extender.placement.model import (GPU_RESOURCE, FlavorSelector, NodeInfo, PodRequest, Taint,
                                      Toleration, untolerated_taint)
from gpuqueue.extender.placement.place import Placement, place
from gpuqueue.extender.placement.preemption import EvictionPolicy, NodeVictims, veto
from gpuqueue.extender.placement.score import (MAX_EXTENDER_PRIORITY, best, extender_score, extender_scores, rank_nodes,
                                      score_nodes)

__all__ = [
    "GPU_RESOURCE", "MAX_EXTENDER_PRIORITY", "EvictionPolicy", "FilterResult", "FlavorSelector",
    "NodeCache", "NodeInfo", "NodeVictims", "Placement", "PodRequest", "Taint", "Toleration",
    "best", "cache_of", "extender_score", "extender_scores", "filter_nodes", "place", "rank_nodes", "score_nodes",
    "summarize", "untolerated_taint", "veto",
]
