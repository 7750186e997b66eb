"""What the controller's watch caches keep of each kind (issue 16: less memory than Kueue).

Every kind loses metadata.managedFields. Beyond that, only fields that no reader of the cache
uses are dropped. The readers, and what they read:

- Jobs: the controller (queue label, namespace, uid, creationTimestamp, status conditions,
  suspend, status.active), the engine's view of the Job (BatchJob.model: the pod template's
  containers, init containers, overhead, priority class, nodeSelector, tolerations, affinity), the
  Workload built from it (the whole pod template, as Kueue's API carries it). Jobs therefore
  lose managedFields only. (The Job writes are merge patches of what changed since issue 16, so
  they no longer need the whole object; a trimmed template would now only show in the
  Workload's copy.)
- Workloads: status (admission, conditions), metadata (name, uid, generation, owner), and of
  `spec.podSets[]` what tells whether they still match their Job (workload.pod_sets_differ: counts,
  containers' and init containers' resources, scheduling fields), so a restart does not take every
  cached Workload for a changed one; the extender view reads status and pod set counts. The pod
  templates' commands, environment, volumes and the like are dropped as a pod's are. Status writes
  go to /status; a spec update replaces `podSets` whole; `gpuqueue explain` reads the API.
- Pods: the extender view (ownerReferences, labels, deletionTimestamp, nodeName, schedulerName,
  phase, nominatedNodeName, every container's and init container's name, resources and
  restartPolicy, overhead, priority, nodeSelector, tolerations, affinity) and the Job steering
  (ownerReferences). Pods are never written from the cache. Dropped: volumes, the containers'
  commands, environment, mounts, probes and the like, and the containers' statuses.
- Nodes: the placement cache (labels, taints, unschedulable, allocatable). Dropped: the image
  list and volume bookkeeping of the status (tens of kilobytes on a busy node).
- Everything else (Namespaces, quota objects, priority classes): managedFields only. Their
  status writes go to /status (ClusterQueue, LocalQueue), where the server keeps the stored
  managedFields when a body has none.

tests/test_controller_cached_fields.py feeds recorded objects through every reader with and
without these transforms and requires the same answers.
"""

from __future__ import annotations

from gpuqueue.kube.transform import Transform, dropping, strip_managed_fields

# Container fields neither quota (gpuqueue.api.podrequests) nor placement read.
_CONTAINER_UNREAD = ("command", "args", "env", "envFrom", "volumeMounts", "volumeDevices", "livenessProbe",
                     "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
                     "terminationMessagePolicy", "imagePullPolicy", "securityContext", "workingDir", "stdin",
                     "stdinOnce", "tty")

POD_UNREAD = (
    "spec.volumes", "spec.ephemeralContainers", "spec.imagePullSecrets", "spec.dnsConfig", "spec.hostAliases",
    "spec.securityContext",
    *(f"spec.containers[].{f}" for f in _CONTAINER_UNREAD),
    *(f"spec.initContainers[].{f}" for f in _CONTAINER_UNREAD),
    "status.containerStatuses", "status.initContainerStatuses", "status.ephemeralContainerStatuses",
    "status.podIPs", "status.podIP", "status.hostIP", "status.hostIPs",
)
# A Workload's pod sets keep what deciding whether they still match their Job reads
# (workload.pod_sets_differ: resources, init containers' restartPolicy, scheduling fields); the
# rest of each template goes as a pod's would.
WORKLOAD_UNREAD = tuple(f"spec.podSets[].template.{path}" for path in POD_UNREAD if path.startswith("spec."))
NODE_UNREAD = ("status.images", "status.volumesInUse", "status.volumesAttached", "status.daemonEndpoints",
               "status.nodeInfo")

_TRANSFORMS: dict[str, Transform] = {
    "pods": dropping(POD_UNREAD),
    "workloads": dropping(WORKLOAD_UNREAD),
    "nodes": dropping(NODE_UNREAD),
}


def transform_for(informer_name: str) -> Transform:
    """The cache transform of the controller's informer of that name (kinds.Kind.name)."""
    return _TRANSFORMS.get(informer_name, strip_managed_fields)
