"""Per-pod resource requests as Kubernetes counts them (k8s.io/component-helpers resource.PodRequests)."""

from __future__ import annotations

from gpuqueue.api.core import PodSpec
from gpuqueue.api.quantity import Quantity, to_engine_int


def _add(into: dict[str, Quantity], more: dict[str, Quantity]) -> None:
    for name, q in more.items():
        into[name] = into[name] + q if name in into else q


def _max(into: dict[str, Quantity], other: dict[str, Quantity]) -> None:
    for name, q in other.items():
        if name not in into or into[name] < q:
            into[name] = q


def pod_requests(spec: PodSpec) -> dict[str, Quantity]:
    """Sum of the containers, raised to what the init containers need (sidecars run beside
    everything that starts after them), plus the pod overhead. A limit stands in for a
    missing request."""
    total: dict[str, Quantity] = {}
    for c in spec.containers:
        _add(total, c.effective_requests())
    sidecars: dict[str, Quantity] = {}
    init_peak: dict[str, Quantity] = {}
    for ic in spec.init_containers:
        reqs = ic.effective_requests()
        if ic.restart_policy == "Always":
            _add(sidecars, reqs)
            _max(init_peak, sidecars)
        else:
            during = dict(sidecars)
            _add(during, reqs)
            _max(init_peak, during)
    _add(total, sidecars)
    _max(total, init_peak)
    _add(total, spec.overhead)
    return {name: q for name, q in total.items()}


def engine_pod_requests(spec: PodSpec) -> dict[str, int]:
    """``pod_requests`` in Kueue's integer units (milli-cpu, whole units of the rest)."""
    return {name: to_engine_int(name, q) for name, q in pod_requests(spec).items()}
