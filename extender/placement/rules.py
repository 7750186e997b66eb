"""The per-node rules of filter and score, in one place: the node cache applies them to the
one node that changed (keeping its per-profile answers current), and filter/score apply them
to the few nodes a request must judge on their own (the pod's own reservation, Node objects
kube-scheduler sent in full). Reason strings are shared objects, cached per distinct value."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from gpuqueue.extender.placement.model import UNSCHEDULABLE_TAINT, Taint, Toleration, untolerated_taint

NOT_CACHED = "node is not in gpuqueue's node cache yet"
CORDONED = "node is cordoned"

MAX_EXTENDER_PRIORITY = 10
PACKING_WEIGHT = 7.0
SAME_NODE_BONUS = 3.0
SAME_DOMAIN_BONUS = 1.5


@lru_cache(maxsize=4096)
def gpu_shortage(free: int, need: int) -> str:
    return f"node has {free} GPU{'' if free == 1 else 's'} free, pod needs {need}"


@lru_cache(maxsize=1024)
def taint_reason(taint: Taint) -> str:
    return f"node has taint {taint} that the pod does not tolerate"


def tolerates_cordon(tolerations: Iterable[Toleration]) -> bool:
    return any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations)


def judge(st, need: int, tolerations: tuple[Toleration, ...], cordon_ok: bool,
          own_gpus: int = 0) -> tuple[str, bool] | None:
    """Whether a known node of the right flavor (a ``NodeState``) may take the pod's GPUs:
    None, or (reason, unresolvable). ``own_gpus``: the pod's own in-flight GPUs on this node,
    which do not count against it."""
    if st.unschedulable and not cordon_ok:
        return CORDONED, True
    if st.hard_taints:
        taint = untolerated_taint(st.hard_taints, tolerations)
        if taint is not None:
            return taint_reason(taint), True
    free = st.gpus_alloc - st.gpus_used - st.gpus_reserved + own_gpus
    if free < need:
        return gpu_shortage(max(free, 0), need), False
    return None


def packing_value(alloc: int, after: int) -> float:
    """Most-allocated bin-packing: the share of the node's GPUs taken once the pod is there."""
    if alloc <= 0:
        return 0.0
    return PACKING_WEIGHT * after / alloc if after < alloc else PACKING_WEIGHT


def extender_score(value: float) -> int:
    """An exact rank value as kube-scheduler's integer score: rounded half up, within 0..10."""
    return max(0, min(MAX_EXTENDER_PRIORITY, int(value + 0.5)))
