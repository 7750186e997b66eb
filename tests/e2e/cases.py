"""Small builders shared by the cases: a pool of fake GPU nodes, its flavor and ClusterQueue, and
Jobs as a user writes them. Each case uses its own names (and a node label of its own), so cases
sharing the session's control plane never see each other's quota or nodes."""

from __future__ import annotations

GPU = "nvidia.com/gpu"
KUEUE = "kueue.x-k8s.io/v1beta2"
POOL = "e2e.gpuqueue.io/pool"


def flavor(name: str, labels: dict, topology: str | None = None) -> dict:
    spec = {"nodeLabels": labels}
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor_name: str, gpus: int, **spec) -> dict:
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                {"name": flavor_name, "resources": [{"name": GPU, "nominalQuota": gpus}]}]}], **spec}}


def local_queue(ns: str, name: str, cq: str) -> dict:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": name},
            "spec": {"clusterQueue": cq}}


def job(ns: str, name: str, gpus: int = 1, pods: int = 1, queue: str | None = None,
        annotations: dict | None = None, completions: int | None = None) -> dict:
    """A batch/v1 Job of `pods` pods of `gpus` GPUs each, labelled with `queue` if given, not
    suspended (the webhook suspends it)."""
    meta = {"namespace": ns, "name": name}
    if queue:
        meta["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    template = {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "worker", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", "command": ["sleep", "600"],
         "resources": {"limits": {GPU: gpus}}}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": pods, "completions": completions or pods, "template": template}}
