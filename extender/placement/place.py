"""Place ``count`` identical pods one after another, as kube-scheduler would with the extender:
filter, score, take the best node (ties by node name), count the pod there, next pod.
Used by ``gpuqueue simulate`` for the ``nodes`` of an admission."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from gpuqueue.extender.placement.cache import NodeCache
from gpuqueue.extender.placement.filter import filter_nodes, summarize
from gpuqueue.extender.placement.model import PodRequest
from gpuqueue.extender.placement.score import best, rank_nodes


@dataclass(slots=True)
class Placement:
    nodes: dict[str, int] = field(default_factory=dict)  # node -> pods placed there
    sequence: list[str] = field(default_factory=list)  # node of pod 0, 1, ...
    pod_uids: list[str] = field(default_factory=list)  # the uids bound in the cache
    message: str | None = None  # set when a pod fits nowhere
    reasons: dict[str, str] = field(default_factory=dict)  # per node, for that pod

    @property
    def unschedulable(self) -> bool:
        return self.message is not None


def place(pod: PodRequest, count: int, cache: NodeCache, *, all_or_nothing: bool = True,
          refuse: Callable[[str, list[str]], Mapping[str, str]] | None = None) -> Placement:
    """Bind ``count`` copies of ``pod`` (uids ``<pod.uid>-<i>``) in the cache.

    ``refuse(uid, passed)``: which of the nodes that pass the filter the extender refuses besides,
    with why (a pod set's topology assignment). If one does not fit, the result carries
    kube-scheduler's style of message and the per-node reasons; with ``all_or_nothing`` (the
    default) the pods placed before it are released again so the cache is as it was."""
    out = Placement()
    candidates = cache.node_names()
    for i in range(count):
        uid = f"{pod.uid}-{i}"
        one = PodRequest(uid, pod.gpus, pod.requests, pod.tolerations, pod.flavor, pod.job_key)
        result = filter_nodes(one, candidates, cache)
        if refuse is not None:
            refused = refuse(uid, result.passed)
            result.passed = [n for n in result.passed if n not in refused]
            result.unresolvable.update(refused)
        node = best(rank_nodes(one, result.passed, cache))
        if node is None:
            out.message = summarize(len(candidates), result.reasons())
            out.reasons = result.reasons()
            if all_or_nothing:
                for done in out.pod_uids:
                    cache.release(done)
                out.nodes.clear()
                out.sequence.clear()
                out.pod_uids.clear()
            return out
        cache.bind(uid, node, pod.gpus, pod.requests, pod.job_key)
        out.nodes[node] = out.nodes.get(node, 0) + 1
        out.sequence.append(node)
        out.pod_uids.append(uid)
    return out
