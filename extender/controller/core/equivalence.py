"""Pure: does a Job still match its Workload (Kueue's EquivalentToWorkload)?

Kueue compares the Job's pod sets with the Workload's: the count, and each container's and init
container's resources (tolerations too while it is not admitted). gpuqueue compares what the
quota engine counts, as Kubernetes counts a pod's requests (gpuqueue.api.podrequests: containers,
init containers, sidecars, overhead, a limit standing in for a missing request):

- an admitted Job against its *reservation* (`status.admission`): each pod set's count, and for
  every resource its pods ask for or the admission holds, the per-pod amount times the count
  against the admitted usage. A mismatch evicts the Job and queues it again with its new pod sets.
- a pending Job against the pod sets the engine queued it with: all of each pod set (requests,
  node selector, tolerations, required affinity: what chooses a flavor). A mismatch updates the
  pending Workload.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuqueue.extender.controller.core.workload import format_engine_int
from gpuqueue.extender.quota.model import Admission, PodSetSpec

# The engine counts a pod set's pods as this resource when a ClusterQueue covers it; the count is
# compared on its own.
PODS = "pods"


def admitted_shape(admission: Admission) -> dict[str, tuple[int, dict[str, int]]]:
    """Pod set -> (count, per-pod amount of each resource) as the admission holds them."""
    out = {}
    for name, flavors in admission.flavors.items():
        count = admission.counts.get(name, 1)
        own = admission.usage_of(name)
        per_pod = {}
        for res in flavors:
            if res == PODS:
                continue
            total = own.get(res, 0)
            per_pod[res] = total // count if count and total % count == 0 else -total  # -: no whole amount per pod
        out[name] = (count, per_pod)
    return out


def pod_sets_from_admission(admission: Admission) -> tuple[PodSetSpec, ...]:
    """The pod sets an admission reserved, as far as it tells (counts and per-pod amounts): the
    engine's view of a reservation whose Job is gone."""
    return tuple(PodSetSpec(name=name, count=count, per_pod={r: v for r, v in per_pod.items() if v >= 0})
                 for name, (count, per_pod) in sorted(admitted_shape(admission).items()))


def admission_mismatch(pod_sets: Sequence[PodSetSpec], admission: Admission) -> str | None:
    """None when the pod sets are what the admission reserved; else what differs, e.g.
    `pod set main count 1 -> 8, nvidia.com/gpu per pod 1 -> 4`."""
    admitted = admitted_shape(admission)
    changes = []
    names = [ps.name for ps in pod_sets]
    for name in sorted(set(admitted) - set(names)):
        changes.append(f"pod set {name} removed")
    for ps in pod_sets:
        if ps.name not in admitted:
            changes.append(f"pod set {ps.name} added")
            continue
        count, per_pod = admitted[ps.name]
        if ps.count != count:
            changes.append(f"pod set {ps.name} count {count} -> {ps.count}")
        asked = {r: v for r, v in ps.per_pod.items() if v > 0 and r != PODS}
        for res in sorted(set(asked) | set(per_pod)):
            was, now = per_pod.get(res, 0), asked.get(res, 0)
            if was != now:
                changes.append(f"pod set {ps.name} {res} per pod {_amount(res, was)} -> {_amount(res, now)}")
    return ", ".join(changes) or None


def same_pod_sets(a: Sequence[PodSetSpec], b: Sequence[PodSetSpec]) -> bool:
    """Everything the engine decides a pending workload's flavors and fit on is the same."""
    return [ps.fingerprint() for ps in a] == [ps.fingerprint() for ps in b]


def _amount(resource: str, value: int) -> str:
    return "?" if value < 0 else format_engine_int(resource, value)
