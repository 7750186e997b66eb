"""kueuectl's everyday verbs on Kueue's API objects, as `gpuqueue list|stop|resume|create ...` and
as the kubectl plugin `kubectl gpuqueue ...`: list Workloads, ClusterQueues and LocalQueues with
kueuectl's columns and flags, stop and resume queues (`spec.stopPolicy`) and Workloads
(`spec.active`), create a LocalQueue. docs/kueuectl.md says where they differ from kueuectl."""


class UsageError(Exception):
    """A flag or setting the verbs cannot use; `gpuqueue` prints it as one line and exits 2."""
