"""A small stand-in for kube-scheduler with an extender, and the kubelet's part of running a pod
(off by default; start it beside the job controller).

For every pod that has no node yet, names one of ``scheduler_names`` and is not being deleted, it
does what kube-scheduler 1.24 does with a non-ignorable, nodeCacheCapable extender
(shared/fixtures/k8s-1.24/extender/): the in-tree checks first (node cordoned, nodeSelector, every
resource the node's allocatable lists fits beside the pods bound there), then, for a pod that
requests one of ``managed_resources``, POST /filter with the names of the nodes left; an ``Error``
answer puts the pod in backoff, no node left leaves it unschedulable until something changes;
with more than one node, POST /prioritize and bind to the best (ties: the first name). It binds
through pods/binding (``Cluster.bind``) and the kubelet then reports the pod Running.

The extender is a coroutine function ``(verb, body bytes) -> answer bytes``: the real HTTPS
client in end-to-end tests, or the verbs called in process.

Not modelled: taints and affinity (the tests' nodes have neither), in-tree scores, preemption.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import orjson

from gpuqueue.api.core import PodSpec
from gpuqueue.api.podrequests import engine_pod_requests
from gpuqueue.api.quantity import parse_engine_int

from . import resources as R
from . import rules
from . import status as S
from .loop import BackgroundLoop
from .registry import Cluster, Write

log = logging.getLogger(__name__)

Extender = Callable[[str, bytes], Awaitable[bytes]]
TERMINAL = ("Succeeded", "Failed")


def pod_runs(pod: dict) -> bool:
    """Bound to a node and not terminated: what takes a node's resources (a pod being deleted
    still runs until the kubelet has removed it)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in TERMINAL


def pod_requests(pod: dict) -> dict[str, int]:
    try:
        return engine_pod_requests(PodSpec.model_validate(pod.get("spec") or {}))
    except Exception:  # noqa: BLE001 - the API server accepted it; treat what we cannot read as nothing
        return {}


class Scheduler(BackgroundLoop):
    def __init__(self, cluster: Cluster, extender: Extender | None = None, *,
                 managed_resources: tuple[str, ...] = ("nvidia.com/gpu",),
                 scheduler_names: tuple[str, ...] = ("default-scheduler",), backoff: float = 0.05,
                 retry_interval: float = 0.2):
        self.cluster = cluster
        self.extender = extender
        self.managed_resources = managed_resources
        self.scheduler_names = scheduler_names
        self.backoff = backoff
        self.retry_interval = retry_interval  # unschedulable pods are tried again at least this often
        self.unschedulable: dict[str, str] = {}  # pod uid -> why (the last FailedScheduling message)
        self.extender_errors = 0
        self._backoff_until: dict[str, float] = {}
        self._wake = asyncio.Event()
        cluster.observers.append(self._on_write)

    async def stop(self) -> None:
        await super().stop()
        if self._on_write in self.cluster.observers:
            self.cluster.observers.remove(self._on_write)

    def _on_write(self, write: Write) -> None:
        if write.resource in (R.PODS, R.NODES) and write.verb not in ("scheduler", "kubelet"):
            self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.retry_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            for pod in self._pending():
                try:
                    await self.schedule_one(pod)
                except S.ApiError as exc:  # the pod changed under us (deleted, bound): next round
                    log.debug("binding %s failed: %s", pod["metadata"]["name"], exc)

    def _pending(self) -> list[dict]:
        loop = asyncio.get_running_loop()
        out = []
        for pod in self.cluster.store.kind(R.PODS.storage_key).values():
            spec, meta = pod.get("spec") or {}, pod["metadata"]
            if spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            if spec.get("schedulerName", "default-scheduler") not in self.scheduler_names:
                continue
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                continue
            if self._backoff_until.get(meta["uid"], 0.0) > loop.time():
                continue
            out.append(pod)
        out.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
        return out

    # --- one scheduling attempt ---------------------------------------------------------------------

    async def schedule_one(self, pod: dict) -> str | None:
        meta = pod["metadata"]
        requests = pod_requests(pod)
        nodes = self._feasible(pod, requests)
        if nodes and self.extender is not None and any(requests.get(r, 0) > 0 for r in self.managed_resources):
            body = orjson.dumps({"Pod": self.cluster.render(R.PODS, pod), "Nodes": None, "NodeNames": nodes})
            answer = orjson.loads(await self.extender("filter", body))
            if answer.get("Error"):
                self.extender_errors += 1
                self.unschedulable[meta["uid"]] = answer["Error"]
                self._backoff_until[meta["uid"]] = asyncio.get_running_loop().time() + self.backoff
                return None
            failed = {**(answer.get("FailedNodes") or {}), **(answer.get("FailedAndUnresolvableNodes") or {})}
            nodes = [n for n in answer.get("NodeNames") or () if n in nodes]
            if not nodes:
                self.unschedulable[meta["uid"]] = "; ".join(sorted(set(failed.values()))) or "no nodes"
                return None
            if len(nodes) > 1:
                body = orjson.dumps({"Pod": self.cluster.render(R.PODS, pod), "Nodes": None, "NodeNames": nodes})
                scores = {h["Host"]: h["Score"] for h in orjson.loads(await self.extender("prioritize", body)) or ()}
                nodes = sorted(nodes, key=lambda n: (-scores.get(n, 0), n))
        if not nodes:
            self.unschedulable[meta["uid"]] = "no node fits"
            return None
        current = self.cluster.store.get(R.PODS.storage_key, (meta["namespace"], meta["name"]))
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return None
        self.cluster.bind(meta["namespace"], meta["name"], nodes[0], uid=meta["uid"])
        self.unschedulable.pop(meta["uid"], None)
        self._kubelet_runs(meta["namespace"], meta["name"])
        return nodes[0]

    def _feasible(self, pod: dict, requests: dict[str, int]) -> list[str]:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        used: dict[str, dict[str, int]] = {}
        for other in self.cluster.store.kind(R.PODS.storage_key).values():
            if pod_runs(other):
                into = used.setdefault(other["spec"]["nodeName"], {})
                for r, v in pod_requests(other).items():
                    into[r] = into.get(r, 0) + v
        names = []
        for node in self.cluster.store.kind(R.NODES.storage_key).values():
            name = node["metadata"]["name"]
            if (node.get("spec") or {}).get("unschedulable"):
                continue
            labels = node["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            alloc = (node.get("status") or {}).get("allocatable") or {}
            here = used.get(name, {})
            if all(parse_engine_int(r, q) - here.get(r, 0) >= requests.get(r, 0) for r, q in alloc.items()
                   if r in requests) and all(r in alloc for r, v in requests.items() if v > 0 and "/" in r):
                names.append(name)
        return sorted(names)

    def _kubelet_runs(self, namespace: str, name: str) -> None:
        stored = self.cluster.store.get(R.PODS.storage_key, (namespace, name))
        if stored is None:
            return
        body = self.cluster.render(R.PODS, stored)
        body["status"] = {**(body.get("status") or {}), "phase": "Running",
                          "startTime": rules.fmt_time(rules.now())}
        self.cluster.update(R.PODS, namespace, name, body, subresource="status", verb="kubelet")
