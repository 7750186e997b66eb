"""A small stand-in for kube-scheduler with an extender, and the kubelet's part of running a pod
(off by default; start it beside the job controller).

For every pod that has no node yet, names one of ``scheduler_names``, has no scheduling gates and
is not being deleted, it does what kube-scheduler does with a non-ignorable, nodeCacheCapable
extender (shared/fixtures/k8s-1.24/extender/): the in-tree checks first (node cordoned,
nodeSelector, every resource the node's allocatable lists fits beside the pods bound there), then,
for a pod that requests one of ``managed_resources``, POST /filter with the names of the nodes
left; with more than one node left, POST /prioritize, and bind to the node of the best total: the
in-tree scores (NodeResourcesFit's LeastAllocated and NodeResourcesBalancedAllocation on cpu and
memory, 0-100 each) plus the extender's score times ``extender_weight`` times 10, as
kube-scheduler adds them, ties broken at random (``seed``), as kube-scheduler's selectHost does. It
binds through pods/binding (``Cluster.bind``) and the kubelet then reports the pod Running, and
Ready unless ``ready(pod)`` says its containers never become ready (``set_ready`` changes that
later).

Pods wait their turn as in kube-scheduler's scheduling queue (``schedqueue``: backoff 1 s doubling
to 10 s, unschedulable pods back on a cluster event that could help or after five minutes, an
extender ``Error`` handled as ``version`` handles it), on a ``clock``: ``VirtualClock`` (the
default) skips the waits, so tests do not sleep them; ``bound_at`` says when each pod was bound,
``at(when, fn)`` runs a test's step at a time of that clock. A failed attempt writes the pod's
PodScheduled=False condition (reason Unschedulable, or SchedulerError for an ``Error`` after 1.24, and the
message) when it changes, as kube-scheduler does; ``kubectl describe pod`` shows it.

The extender is a coroutine function ``(verb, body bytes) -> answer bytes``: the real HTTPS
client in end-to-end tests, or the verbs called in process.

Not modelled: taints and affinity (the tests' nodes have neither), in-tree scores other than the
two above, preemption.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
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
from .schedqueue import (ASSIGNED_POD_DELETED, NODE_CHANGED, POD_BOUND, POD_CREATED, V1_24, RealClock,
                         SchedulingQueue, VirtualClock)

log = logging.getLogger(__name__)

Extender = Callable[[str, bytes], Awaitable[bytes]]
TERMINAL = ("Succeeded", "Failed")


def pod_runs(pod: dict) -> bool:
    """Bound to a node and not terminated: what takes a node's resources (a pod being deleted
    still runs until the kubelet has removed it)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in TERMINAL


def _changed(old: dict | None, new: dict) -> bool:
    """The pod itself changed (spec, labels, annotations), as kube-scheduler's isPodUpdated reads it."""
    if old is None:
        return True
    strip = ("resourceVersion", "generation", "managedFields")
    meta = {k: v for k, v in new["metadata"].items() if k not in strip}
    old_meta = {k: v for k, v in old["metadata"].items() if k not in strip}
    return meta != old_meta or new.get("spec") != old.get("spec")


def pod_requests(pod: dict) -> dict[str, int]:
    try:
        return engine_pod_requests(PodSpec.model_validate(pod.get("spec") or {}))
    except Exception:  # noqa: BLE001 - the API server accepted it; treat what we cannot read as nothing
        return {}


class Scheduler(BackgroundLoop):
    def __init__(self, cluster: Cluster, extender: Extender | None = None, *,
                 managed_resources: tuple[str, ...] = ("nvidia.com/gpu",),
                 scheduler_names: tuple[str, ...] = ("default-scheduler",), version: str = V1_24,
                 clock: RealClock | None = None, ready: Callable[[dict], bool] = lambda pod: True,
                 seed: int = 0, extender_weight: int = 5):
        self.cluster = cluster
        self.random = random.Random(seed)  # selectHost's choice among equal totals
        self.extender_weight = extender_weight  # the shipped KubeSchedulerConfiguration's
        self.ready = ready  # does the kubelet report a pod it runs Ready (its readiness probe passes)?
        self.extender = extender
        self.managed_resources = managed_resources
        self.scheduler_names = scheduler_names
        self.clock = clock if clock is not None else VirtualClock()
        self.queue = SchedulingQueue(self.clock, version)
        self.unschedulable: dict[str, str] = {}  # pod uid -> why (the last FailedScheduling message)
        self.extender_errors = 0
        self.extender_error_texts: list[str] = []  # the last few, for a test's report
        self.attempts = 0
        self.queued_at: dict[str, float] = {}  # pod uid -> when it joined the queue (clock time)
        self.bound_at: dict[str, float] = {}  # pod uid -> when it was bound (clock time)
        self._keys: dict[str, tuple[str, str]] = {}  # queued pod uid -> (namespace, name)
        self._wake = asyncio.Event()
        self._steps: list[tuple[float, int, Callable[[], object]]] = []  # at(): (when, order, fn)
        self._step_order = itertools.count()
        cluster.observers.append(self._on_write)

    def at(self, when: float, fn: Callable[[], object]) -> None:
        """Run ``fn`` (synchronous) once the clock reads ``when``; the virtual clock stops there."""
        heapq.heappush(self._steps, (when, next(self._step_order), fn))
        self._wake.set()

    def _run_steps(self) -> None:
        while self._steps and self._steps[0][0] <= self.clock.now():
            heapq.heappop(self._steps)[2]()

    async def stop(self) -> None:
        await super().stop()
        if self._on_write in self.cluster.observers:
            self.cluster.observers.remove(self._on_write)

    def _ours(self, pod: dict) -> bool:
        """Waiting for this scheduler: no node, not gated, not being deleted, not terminated."""
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        return (not spec.get("nodeName") and not meta.get("deletionTimestamp") and not spec.get("schedulingGates")
                and spec.get("schedulerName", "default-scheduler") in self.scheduler_names
                and (pod.get("status") or {}).get("phase") not in TERMINAL)

    def _queue(self, pod: dict) -> None:
        meta = pod["metadata"]
        if meta["uid"] not in self._keys:
            self._keys[meta["uid"]] = (meta["namespace"], meta["name"])
            self.queued_at.setdefault(meta["uid"], self.clock.now())
            self.queue.add(meta["uid"], (self.clock.now(), meta.get("creationTimestamp", ""), meta["name"]))

    def _forget(self, uid: str) -> None:
        self._keys.pop(uid, None)
        self.queue.forget(uid)

    def _on_write(self, write: Write) -> None:
        if write.resource == R.NODES:
            if write.type != "DELETED":
                self.queue.event(NODE_CHANGED)
                self._wake.set()
            return
        if write.resource != R.PODS:
            return
        new, old = write.new, write.old
        uid = new["metadata"]["uid"]
        bound = bool((new.get("spec") or {}).get("nodeName"))
        if write.type == "DELETED":
            self._forget(uid)
            if bound:
                self.queue.event(ASSIGNED_POD_DELETED)
        elif write.type == "ADDED":
            self.queue.event(POD_CREATED)
            if self._ours(new):
                self._queue(new)
        else:
            if bound and not (old.get("spec") or {}).get("nodeName"):
                self.queue.event(POD_BOUND)
            if not self._ours(new):
                self._forget(uid)
            elif uid not in self._keys:
                self._queue(new)  # ungated, or now named for this scheduler
            elif write.subresource == "status":
                self.queue.status_updated(uid)
            elif _changed(old, new):
                self.queue.updated(uid)
        self._wake.set()

    async def _run(self) -> None:
        for pod in list(self.cluster.store.kind(R.PODS.storage_key).values()):
            if self._ours(pod):
                self._queue(pod)
        while True:
            self._wake.clear()
            self._run_steps()
            for uid in self.queue.due():
                key = self._keys.get(uid)
                pod = self.cluster.store.get(R.PODS.storage_key, key) if key is not None else None
                if pod is None or pod["metadata"]["uid"] != uid or not self._ours(pod):
                    self._forget(uid)
                    continue
                try:
                    await self.schedule_one(pod)
                except S.ApiError as exc:  # the pod changed under us (deleted, bound): as unschedulable
                    log.debug("binding %s failed: %s", pod["metadata"]["name"], exc)
                    self.queue.failed(uid, error=False)
            if not self._wake.is_set():
                timers = [t for t in (self.queue.next_timer(), self._steps[0][0] if self._steps else None) if t is not None]
                await self.clock.idle(self._wake, min(timers) if timers else None)

    # --- one scheduling attempt ---------------------------------------------------------------------

    async def schedule_one(self, pod: dict) -> str | None:
        meta = pod["metadata"]
        uid = meta["uid"]
        self.attempts += 1
        self.queue.attempt(uid)
        requests = pod_requests(pod)
        nodes, used = self._feasible(pod, requests)
        extender_scores: dict[str, int] = {}
        if nodes and self.extender is not None and any(requests.get(r, 0) > 0 for r in self.managed_resources):
            body = orjson.dumps({"Pod": self.cluster.render(R.PODS, pod), "Nodes": None, "NodeNames": nodes})
            try:
                answer = orjson.loads(await self.extender("filter", body))
            except (OSError, asyncio.TimeoutError, orjson.JSONDecodeError) as exc:  # the call failed: an Error too
                answer = {"Error": f"extender call failed: {exc!r}"}
            if answer.get("Error"):
                self.extender_errors += 1
                self.extender_error_texts = (self.extender_error_texts + [f"{meta.get('name')}: {answer['Error']}"])[-3:]
                self._failed(pod, answer["Error"], error=True)
                return None
            failed = {**(answer.get("FailedNodes") or {}), **(answer.get("FailedAndUnresolvableNodes") or {})}
            nodes = [n for n in answer.get("NodeNames") or () if n in nodes]
            if not nodes:
                self._failed(pod, "; ".join(sorted(set(failed.values()))) or "no nodes", by_extender=True)
                return None
            if len(nodes) > 1:
                body = orjson.dumps({"Pod": self.cluster.render(R.PODS, pod), "Nodes": None, "NodeNames": nodes})
                extender_scores = {h["Host"]: h["Score"] for h in orjson.loads(await self.extender("prioritize", body)) or ()}
        if not nodes:
            self._failed(pod, "no node fits")
            return None
        if len(nodes) > 1:  # kube-scheduler scores only when more than one node is feasible
            nodes = [self._select_host(nodes, requests, used, extender_scores)]
        current = self.cluster.store.get(R.PODS.storage_key, (meta["namespace"], meta["name"]))
        if current is None or current["metadata"]["uid"] != uid:
            self._forget(uid)
            return None
        self.bound_at[uid] = self.clock.now()  # before: the binding's observers read it
        try:
            self.cluster.bind(meta["namespace"], meta["name"], nodes[0], uid=uid)
        except S.ApiError:
            del self.bound_at[uid]
            raise
        self._forget(uid)
        self.unschedulable.pop(uid, None)
        self._kubelet_runs(meta["namespace"], meta["name"])
        return nodes[0]

    def _failed(self, pod: dict, message: str, *, error: bool = False, by_extender: bool = False) -> None:
        """Back to the queue, then the pod's PodScheduled condition (handleSchedulingFailure's order)."""
        meta = pod["metadata"]
        self.unschedulable[meta["uid"]] = message
        self.queue.failed(meta["uid"], error=error, by_extender=by_extender)
        stored = self.cluster.store.get(R.PODS.storage_key, (meta["namespace"], meta["name"]))
        if stored is None or stored["metadata"]["uid"] != meta["uid"]:
            return
        # 1.24 writes reason Unschedulable for an error too, with the error as the message (the
        # SchedulerError reason came later), as a real 1.24 showed for the extender's Error
        reason = "SchedulerError" if error and self.queue.version != V1_24 else "Unschedulable"
        conditions = (stored.get("status") or {}).get("conditions") or []
        before = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if before is not None and (before.get("status"), before.get("reason"), before.get("message")) == ("False", reason, message):
            return  # unchanged: kube-scheduler writes nothing
        body = self.cluster.render(R.PODS, stored)
        body["status"] = {**(body.get("status") or {}), "conditions": [c for c in conditions if c.get("type") != "PodScheduled"] + [
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
             "lastTransitionTime": rules.fmt_time(rules.now()), "reason": reason, "message": message}]}
        try:
            self.cluster.update(R.PODS, meta["namespace"], meta["name"], body, subresource="status", verb="scheduler")
        except S.ApiError as exc:  # deleted or changed meanwhile: kube-scheduler logs it and goes on
            log.debug("status of %s not written: %s", meta["name"], exc)

    def _select_host(self, nodes: list[str], requests: dict[str, int], used: dict[str, dict[str, int]],
                     extender_scores: dict[str, int]) -> str:
        """The node of the best total score; among equal totals, one at random."""
        allocatable = {n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or {}
                       for n in self.cluster.store.kind(R.NODES.storage_key).values()}
        totals = {name: _in_tree_score(allocatable.get(name, {}), used.get(name, {}), requests)
                  + extender_scores.get(name, 0) * self.extender_weight * 10 for name in nodes}
        top = max(totals.values())
        return self.random.choice([n for n in nodes if totals[n] == top])

    def _feasible(self, pod: dict, requests: dict[str, int]) -> tuple[list[str], dict[str, dict[str, int]]]:
        """The nodes the in-tree filters pass, and what the running pods take on each node."""
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
        return sorted(names), used

    def _kubelet_runs(self, namespace: str, name: str) -> None:
        stored = self.cluster.store.get(R.PODS.storage_key, (namespace, name))
        if stored is None or (stored.get("status") or {}).get("phase") in TERMINAL:
            return  # a kubelet never takes a pod out of a terminal phase
        body = self.cluster.render(R.PODS, stored)
        body["status"] = {**(body.get("status") or {}), "phase": "Running",
                          "startTime": rules.fmt_time(rules.now())}
        body["status"]["conditions"] = _with_ready(body["status"].get("conditions") or [], self.ready(body))
        self.cluster.update(R.PODS, namespace, name, body, subresource="status", verb="kubelet")

    def set_ready(self, namespace: str, name: str, ready: bool) -> bool:
        """The kubelet reports a running pod's Ready condition as `ready` (a probe passing or
        failing); False when there is no such running pod."""
        stored = self.cluster.store.get(R.PODS.storage_key, (namespace, name))
        if stored is None or (stored.get("status") or {}).get("phase") != "Running":
            return False
        body = self.cluster.render(R.PODS, stored)  # (shares the stored status: replaced, not edited)
        body["status"] = {**body["status"], "conditions": _with_ready(body["status"].get("conditions") or [], ready)}
        self.cluster.update(R.PODS, namespace, name, body, subresource="status", verb="kubelet")
        return True


def _in_tree_score(alloc: dict, used: dict[str, int], requests: dict[str, int]) -> int:
    """NodeResourcesFit (LeastAllocated) plus NodeResourcesBalancedAllocation, on cpu and memory,
    each 0-100, for the node with the pod on it."""
    fractions = []
    for r in ("cpu", "memory"):
        total = parse_engine_int(r, alloc[r]) if r in alloc else 0
        taken = used.get(r, 0) + requests.get(r, 0)
        fractions.append(min(taken / total, 1.0) if total > 0 else 1.0)
    least_allocated = sum((1 - f) * 100 for f in fractions) / len(fractions)
    balanced = (1 - abs(fractions[0] - fractions[1]) / 2) * 100
    return int(least_allocated) + int(balanced)


def _with_ready(conditions: list[dict], ready: bool) -> list[dict]:
    """The pod's conditions with Ready and ContainersReady set as the kubelet reports them."""
    now = rules.fmt_time(rules.now())
    value = "True" if ready else "False"
    out = [c for c in conditions if c.get("type") not in ("Ready", "ContainersReady")]
    for type_ in ("ContainersReady", "Ready"):
        before = next((c for c in conditions if c.get("type") == type_), None)
        if before is not None and before.get("status") == value:
            out.append(before)
            continue
        cond = {"type": type_, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
        if not ready:
            cond.update(reason="ContainersNotReady", message="containers with unready status: [main]")
        out.append(cond)
    return out
