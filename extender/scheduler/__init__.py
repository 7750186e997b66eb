"""The kube-scheduler extender: /filter, /prioritize, /preempt over HTTPS."""

from gpuqueue.extender.scheduler.app import routes, start
from gpuqueue.extender.scheduler.memory import InMemoryClusterView
from gpuqueue.extender.scheduler.view import UNMANAGED, Admitted, ClusterView, NotAdmitted, PodRef, Unmanaged

__all__ = ["UNMANAGED", "Admitted", "ClusterView", "InMemoryClusterView", "NotAdmitted", "PodRef",
           "Unmanaged", "routes", "start"]
