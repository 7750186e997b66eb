"""The node cache: what each node has, and what pods bound or being bound there take.

A pod is either *bound* (the watch saw ``spec.nodeName``) or *in flight* (the extender
pointed kube-scheduler at a node and the binding has not been seen yet). An in-flight
reservation counts on its node until the pod is bound, released, reserved elsewhere, or
``reservation_ttl`` seconds pass, so two pods scheduled back to back do not both take the
last GPUs while the watch lags. The clock is injected; nothing here does I/O.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from extender.placement.model import FlavorSelector, NodeInfo

DEFAULT_RESERVATION_TTL = 10.0
_MAX_SELECTORS = 256


@dataclass(slots=True)
class NodeState:
    """Usage on one node. ``info`` is None for a node that pods are bound to but that the
    cache has not seen (or no longer has)."""

    name: str
    info: NodeInfo | None = None
    # copied from ``info`` so the per-node loops of filter and score read attributes only
    gpus_alloc: int = 0
    unschedulable: bool = False
    hard_taints: tuple = ()
    domain: str | None = None  # value of the cache's topology label
    gpus_used: int = 0  # bound pods
    gpus_reserved: int = 0  # in-flight pods
    used: dict[str, int] = field(default_factory=dict)
    reserved: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)  # job key -> pods here (bound or in flight)

    def _add(self, rec: "_PodRecord", sign: int) -> None:
        if rec.bound:
            self.gpus_used += sign * rec.gpus
            target = self.used
        else:
            self.gpus_reserved += sign * rec.gpus
            target = self.reserved
        for r, v in rec.requests.items():
            target[r] = target.get(r, 0) + sign * v
        if rec.job_key is not None:
            _bump(self.jobs, rec.job_key, sign)

    @property
    def gpus_taken(self) -> int:
        return self.gpus_used + self.gpus_reserved

    def _set_info(self, info: NodeInfo | None, topology_label: str | None) -> None:
        self.info = info
        self.gpus_alloc = info.gpus if info is not None else 0
        self.unschedulable = info.unschedulable if info is not None else False
        self.hard_taints = info.hard_taints if info is not None else ()
        self.domain = info.labels.get(topology_label) if info is not None and topology_label else None

    def overlay(self, info: NodeInfo, topology_label: str | None) -> "NodeState":
        """This node's usage with node facts from elsewhere (a Node object kube-scheduler sent)."""
        st = NodeState(self.name, gpus_used=self.gpus_used, gpus_reserved=self.gpus_reserved,
                       used=self.used, reserved=self.reserved, jobs=self.jobs)
        st._set_info(info, topology_label)
        return st


@dataclass(slots=True)
class _PodRecord:
    uid: str
    node: str
    gpus: int
    requests: Mapping[str, int]
    job_key: str | None
    bound: bool
    expires: float = 0.0


def _bump(counts: dict[str, int], key: str, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


class NodeCache:
    def __init__(self, *, topology_label: str | None = None,
                 reservation_ttl: float = DEFAULT_RESERVATION_TTL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.topology_label = topology_label
        self.reservation_ttl = reservation_ttl
        self.clock = clock
        self.states: dict[str, NodeState] = {}
        self._pods: dict[str, _PodRecord] = {}
        self._expiry: deque[tuple[float, str, _PodRecord]] = deque()
        self._selectors: dict[tuple[tuple[str, str], ...], set[str]] = {}
        self._job_domains: dict[str, dict[str, int]] = {}  # job key -> topology value -> pods

    # -- nodes ---------------------------------------------------------------------
    def upsert_node(self, info: NodeInfo) -> None:
        st = self.states.get(info.name)
        if st is None:
            st = self.states[info.name] = NodeState(info.name)
        old_domain = st.domain
        st._set_info(info, self.topology_label)
        new_domain = st.domain
        if old_domain != new_domain:
            self._move_domain(st, old_domain, new_domain)
        for key, members in self._selectors.items():
            if all(info.labels.get(k) == v for k, v in key):
                members.add(info.name)
            else:
                members.discard(info.name)

    def remove_node(self, name: str) -> None:
        st = self.states.get(name)
        if st is None:
            return
        self._move_domain(st, st.domain, None)
        st._set_info(None, self.topology_label)
        for members in self._selectors.values():
            members.discard(name)
        if not st.jobs and not st.gpus_taken and not st.used and not st.reserved:
            del self.states[name]

    def node(self, name: str) -> NodeInfo | None:
        st = self.states.get(name)
        return st.info if st is not None else None

    def node_names(self) -> list[str]:
        return sorted(n for n, st in self.states.items() if st.info is not None)

    def members(self, flavor: FlavorSelector) -> set[str]:
        """Names of cached nodes carrying all of the flavor's nodeLabels (kept up to date
        incrementally, so a filter call is a set lookup per node)."""
        key = flavor.node_labels
        members = self._selectors.get(key)
        if members is None:
            if len(self._selectors) >= _MAX_SELECTORS:
                self._selectors.clear()
            members = {n for n, st in self.states.items() if st.info is not None and flavor.matches(st.info.labels)}
            self._selectors[key] = members
        return members

    # -- pods ----------------------------------------------------------------------
    def bind(self, uid: str, node: str, gpus: int, requests: Mapping[str, int] | None = None,
             job_key: str | None = None) -> None:
        """The pod is bound to ``node`` (replaces any reservation or earlier binding)."""
        self._put(_PodRecord(uid, node, gpus, dict(requests or {}), job_key, True))

    def reserve(self, uid: str, node: str, gpus: int, requests: Mapping[str, int] | None = None,
                job_key: str | None = None) -> None:
        """Count an in-flight pod on ``node`` until it is bound or the TTL passes. A pod already
        bound stays bound; a pod reserved elsewhere moves here."""
        self.expire()
        cur = self._pods.get(uid)
        if cur is not None and cur.bound:
            return
        rec = _PodRecord(uid, node, gpus, dict(requests or {}), job_key, False,
                         self.clock() + self.reservation_ttl)
        self._put(rec)
        self._expiry.append((rec.expires, uid, rec))

    def release(self, uid: str) -> None:
        """The pod is gone or finished: its resources are free again."""
        rec = self._pods.pop(uid, None)
        if rec is not None:
            self._account(rec, -1)

    def pod_node(self, uid: str) -> tuple[str, bool] | None:
        """(node, bound) for a known pod."""
        self.expire()
        rec = self._pods.get(uid)
        return (rec.node, rec.bound) if rec is not None else None

    def expire(self) -> None:
        now = self.clock()
        q = self._expiry
        while q and q[0][0] <= now:
            _, uid, rec = q.popleft()
            if self._pods.get(uid) is rec:  # not bound, moved or released since
                del self._pods[uid]
                self._account(rec, -1)

    def own_reservation(self, uid: str) -> tuple[str, int, Mapping[str, int]] | None:
        """Where this pod is itself counted in flight (excluded when judging that same pod)."""
        rec = self._pods.get(uid)
        if rec is None or rec.bound:
            return None
        return rec.node, rec.gpus, rec.requests

    # -- topology ------------------------------------------------------------------
    def domain(self, name: str) -> str | None:
        st = self.states.get(name)
        return st.domain if st is not None else None

    def job_domains(self, job_key: str) -> Mapping[str, int]:
        """Topology domains the Job has pods in (bound or in flight), with pod counts."""
        return self._job_domains.get(job_key, {})

    # -- internals -----------------------------------------------------------------
    def _put(self, rec: _PodRecord) -> None:
        old = self._pods.pop(rec.uid, None)
        if old is not None:
            self._account(old, -1)
        self._pods[rec.uid] = rec
        self._account(rec, +1)

    def _account(self, rec: _PodRecord, sign: int) -> None:
        st = self.states.get(rec.node)
        if st is None:
            st = self.states[rec.node] = NodeState(rec.node)
        st._add(rec, sign)
        if rec.job_key is not None and st.domain is not None:
            self._bump_domain(rec.job_key, st.domain, sign)
        if sign < 0 and st.info is None and not st.jobs and not st.gpus_taken:
            del self.states[rec.node]

    def _bump_domain(self, job: str, domain: str, delta: int) -> None:
        doms = self._job_domains.setdefault(job, {})
        _bump(doms, domain, delta)
        if not doms:
            del self._job_domains[job]

    def _move_domain(self, st: NodeState, old: str | None, new: str | None) -> None:
        for job, n in st.jobs.items():
            if old is not None:
                self._bump_domain(job, old, -n)
            if new is not None:
                self._bump_domain(job, new, n)


def cache_of(nodes: Iterable[NodeInfo], **kwargs) -> NodeCache:
    cache = NodeCache(**kwargs)
    for n in nodes:
        cache.upsert_node(n)
    return cache
