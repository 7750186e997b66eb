"""The node cache: what each node has, and what pods bound or being bound there take.

A pod is either *bound* (the watch saw ``spec.nodeName``) or *in flight* (the extender
pointed kube-scheduler at a node and the binding has not been seen yet). An in-flight
reservation counts on its node until the pod is bound, released, reserved elsewhere, or
``reservation_ttl`` seconds pass, so two pods scheduled back to back do not both take the
last GPUs while the watch lags. The clock is injected; nothing here does I/O.

Filter and score must not cost a Python step per candidate node (kube-scheduler sends hundreds
per pod). So the cache keeps, per *profile*, the answer for every node, and updates it only for
the node that changed (a node event, a pod bound, reserved, released or expired):

- ``ScoreProfile`` (GPUs needed): each node's packing score, alone and with either bonus;
- ``FitProfile`` (flavor nodeLabels, GPUs needed, tolerations): the nodes that take such a pod,
  each with its score from the ScoreProfile of that need, and the reason for each other node.

A request then filters and scores its candidates with set and dict operations that run in C,
and /filter's choice of one node reuses the score codes its fit check read, re-reading only the
nodes the cache's journal says changed since. Profiles are registered on first use, at the
cost of one pass over the nodes, and bounded in number.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from gpuqueue.extender.placement.model import FlavorSelector, NodeInfo, Toleration
from gpuqueue.extender.placement.rules import (SAME_DOMAIN_BONUS, SAME_NODE_BONUS, extender_score, judge, packing_value,
                                      tolerates_cordon)

DEFAULT_RESERVATION_TTL = 10.0
_MAX_SELECTORS = 256
_MAX_FIT_PROFILES = 256
_MAX_SCORE_PROFILES = 64
_MAX_JOURNAL = 4096  # node changes remembered for readers of an earlier epoch


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
    pods: int = 0  # bound and in-flight pods counted here
    used: dict[str, int] = field(default_factory=dict)
    reserved: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)  # job key -> pods here (bound or in flight)

    def _add(self, rec: "_PodRecord", sign: int) -> None:
        self.pods += sign
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
        st = NodeState(self.name, gpus_used=self.gpus_used, gpus_reserved=self.gpus_reserved, pods=self.pods,
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


_VERDICTS: dict[tuple[str, bool], tuple[str, bool]] = {}  # reasons are few: GPU counts, taints, flavors


class FitProfile:
    """Pods of one flavor needing ``need`` GPUs with these tolerations. For every node of the
    flavor, ``fits`` says whether it takes such a pod: the node's code in ``score`` (the
    ScoreProfile of the same need, so the filter reads the scores a following /prioritize
    needs in the same lookup), or None; for a node of the flavor that does not, and for every
    other known node, ``refusals`` says why: (reason, unresolvable); unresolvable is a cordon,
    a taint or another flavor, not a GPU shortage."""

    __slots__ = ("members", "need", "tolerations", "cordon_ok", "mismatch", "score", "fits", "refusals")

    def __init__(self, members: set[str], need: int, tolerations: frozenset[Toleration],
                 mismatch_reason: str, score: "ScoreProfile") -> None:
        self.members = members  # the cache's live member set of the flavor
        self.need = need
        self.tolerations = tuple(tolerations)
        self.cordon_ok = tolerates_cordon(self.tolerations)
        self.mismatch = (mismatch_reason, True)
        self.score = score  # kept current before this profile by the cache's _touch
        self.fits: dict[str, ScoreCode | None] = {}
        self.refusals: dict[str, tuple[str, bool]] = {}

    def update(self, name: str, st: "NodeState | None") -> None:
        if st is None or st.info is None:
            self.fits.pop(name, None)
            self.refusals.pop(name, None)
            return
        if name not in self.members:  # only the flavor's nodes are in ``fits``: a smaller table
            self.fits.pop(name, None)
            self.refusals[name] = self.mismatch
            return
        verdict = judge(st, self.need, self.tolerations, self.cordon_ok)
        # Entries are overwritten, never deleted while the node is of the flavor: a node moving
        # between fitting and not on every reservation would otherwise fill the tables with dead
        # slots that lookups probe. So a refused node is None in ``fits``, and ``refusals`` is read
        # only for those (an entry left there from before the node fitted again is never read).
        if verdict is None:
            self.fits[name] = self.score.codes[name]
            return
        self.fits[name] = None
        # one shared tuple per distinct verdict: filtering reads few, hot objects
        if len(_VERDICTS) > 8192:  # only sharing is lost
            _VERDICTS.clear()
        self.refusals[name] = _VERDICTS.setdefault(verdict, verdict)


class ScoreCode:
    """One node's scores for pods of one need: alone, beside a pod of the same Job, in a
    topology domain the Job is in; and the node's domain. Nodes in the same situation share one
    code, compared by identity, so a request turns its candidates' codes into scores with
    lookups that hash addresses only."""

    __slots__ = ("alone", "beside_job", "in_job_domain", "domain")

    def __init__(self, alone: int, beside_job: int, in_job_domain: int, domain: str | None) -> None:
        self.alone, self.beside_job, self.in_job_domain, self.domain = alone, beside_job, in_job_domain, domain


class DomainScores(dict):
    """ScoreCode -> its score for a pod whose Job is in ``domains`` (the same-domain bonus where
    the code's domain is one of them), filled on first use of each code: a pure function of
    immutable codes, so one table serves every request of a Job whose domains are the same."""

    __slots__ = ("domains",)

    def __init__(self, domains: frozenset[str]) -> None:
        super().__init__()
        self.domains = domains

    def __missing__(self, code: ScoreCode) -> int:
        score = self[code] = code.in_job_domain if code.domain in self.domains else code.alone
        return score


class ScoreProfile:
    """Pods needing ``need`` GPUs: every node's ScoreCode, each score rounded from the exact
    value. Reading a node's code costs one lookup of its name and nothing else that is cold."""

    __slots__ = ("need", "codes", "_shared", "_domain_scores")

    def __init__(self, need: int) -> None:
        self.need = need
        self.codes: dict[str, ScoreCode] = {}
        self._shared: dict[tuple, ScoreCode] = {}
        self._domain_scores: dict[frozenset[str], DomainScores] = {}

    def domain_scores(self, domains: frozenset[str]) -> DomainScores:
        table = self._domain_scores.get(domains)
        if table is None or len(table) > 4096:  # bounded: codes replaced over time stay in it
            if len(self._domain_scores) >= 64:
                self._domain_scores.clear()
            table = self._domain_scores[domains] = DomainScores(domains)
        return table

    def update(self, name: str, st: "NodeState | None") -> None:
        if st is None:
            self.codes.pop(name, None)
            return
        value = packing_value(st.gpus_alloc, st.gpus_used + st.gpus_reserved + self.need)
        key = (extender_score(value), extender_score(value + SAME_NODE_BONUS),
               extender_score(value + SAME_DOMAIN_BONUS), st.domain)
        code = self._shared.get(key)
        if code is None:
            if len(self._shared) > 4096:  # only sharing is lost
                self._shared.clear()
            code = self._shared[key] = ScoreCode(*key)
        self.codes[name] = code


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
        self._job_nodes: dict[str, dict[str, int]] = {}  # job key -> node -> pods
        self._job_pods: dict[str, int] = {}  # job key -> pods (bound or in flight), for admitted counts
        self.domain_of: dict[str, str] = {}  # node -> its topology value, for nodes that have one
        self._fit_profiles: dict[tuple, FitProfile] = {}
        self._score_profiles: dict[int, ScoreProfile] = {}
        # Names of the nodes touched, in order: epoch ``_journal_base + i`` is entry i.
        self._journal: list[str] = []
        self._journal_base = 0

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
            if new_domain is None:
                self.domain_of.pop(info.name, None)
            else:
                self.domain_of[info.name] = new_domain
        for key, members in self._selectors.items():
            if all(info.labels.get(k) == v for k, v in key):
                members.add(info.name)
            else:
                members.discard(info.name)
        self._touch(info.name)

    def remove_node(self, name: str) -> None:
        st = self.states.get(name)
        if st is None:
            return
        self._move_domain(st, st.domain, None)
        self.domain_of.pop(name, None)
        st._set_info(None, self.topology_label)
        for members in self._selectors.values():
            members.discard(name)
        if not st.pods:
            del self.states[name]
        self._touch(name)

    def node(self, name: str) -> NodeInfo | None:
        st = self.states.get(name)
        return st.info if st is not None else None

    def node_names(self) -> list[str]:
        return sorted(n for n, st in self.states.items() if st.info is not None)

    def members(self, flavor: FlavorSelector | None) -> set[str]:
        """Names of cached nodes carrying all of the flavor's nodeLabels (every cached node for
        None), kept up to date incrementally. Do not modify."""
        return self._members(flavor.node_labels if flavor is not None else ())

    def _members(self, key: tuple[tuple[str, str], ...]) -> set[str]:
        members = self._selectors.get(key)
        if members is None:
            if len(self._selectors) >= _MAX_SELECTORS:
                self._selectors.clear()
                self._fit_profiles.clear()  # they hold the member sets just dropped
            members = {n for n, st in self.states.items()
                       if st.info is not None and all(st.info.labels.get(k) == v for k, v in key)}
            self._selectors[key] = members
        return members

    def fit_profile(self, flavor: FlavorSelector | None, need: int,
                    tolerations: Iterable[Toleration]) -> FitProfile:
        """Which nodes take a pod of ``flavor`` needing ``need`` GPUs with these tolerations,
        and why each other node does not (registered on first use, one pass over the nodes;
        current from then on). Do not modify."""
        tolerations = frozenset(tolerations)
        key = (flavor.node_labels if flavor is not None else (), flavor.name if flavor is not None else None,
               need, tolerations)
        prof = self._fit_profiles.get(key)
        if prof is None:
            members = self._members(key[0])
            score = self.score_profile(need)
            if len(self._fit_profiles) >= _MAX_FIT_PROFILES:
                self._fit_profiles.clear()
            prof = FitProfile(members, need, tolerations, flavor.mismatch_reason if flavor is not None else "", score)
            for name, st in self.states.items():
                prof.update(name, st)
            self._fit_profiles[key] = prof
        return prof

    def score_profile(self, need: int) -> ScoreProfile:
        """Every node's packing score for a pod needing ``need`` GPUs. Do not modify."""
        prof = self._score_profiles.get(need)
        if prof is None:
            if len(self._score_profiles) >= _MAX_SCORE_PROFILES:
                self._score_profiles.clear()
                self._fit_profiles.clear()  # they read the score profiles just dropped
            prof = self._score_profiles[need] = ScoreProfile(need)
            for name, st in self.states.items():
                prof.update(name, st)
        return prof

    @property
    def epoch(self) -> int:
        """Advances with every change to any node's usage or facts (``touched_since``)."""
        return self._journal_base + len(self._journal)

    def touched_since(self, epoch: int) -> set[str] | None:
        """Names of the nodes changed since ``epoch``, or None when the journal no longer
        reaches that far back (the caller reads everything again)."""
        start = epoch - self._journal_base
        if start < 0:
            return None
        return set(self._journal[start:])

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

    def job_nodes(self, job_key: str) -> Mapping[str, int]:
        """Nodes the Job has pods on (bound or in flight), with pod counts."""
        return self._job_nodes.get(job_key, {})

    def job_pods(self, job_key: str) -> int:
        """Pods of the Job bound (and not terminated) or in flight."""
        self.expire()
        return self._job_pods.get(job_key, 0)

    def pod_job(self, uid: str) -> str | None:
        """The job key a bound or in-flight pod is counted under."""
        self.expire()
        rec = self._pods.get(uid)
        return rec.job_key if rec is not None else None

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
        if rec.job_key is not None:
            _bump(self._job_pods, rec.job_key, sign)
            nodes = self._job_nodes.setdefault(rec.job_key, {})
            _bump(nodes, rec.node, sign)
            if not nodes:
                del self._job_nodes[rec.job_key]
            if st.domain is not None:
                self._bump_domain(rec.job_key, st.domain, sign)
        if sign < 0 and st.info is None and not st.pods:  # a node unknown to the cache, now empty
            del self.states[rec.node]
        self._touch(rec.node)

    def _touch(self, name: str) -> None:
        """Bring every profile's answer for this node up to date, and note the change."""
        st = self.states.get(name)
        for sprof in self._score_profiles.values():  # first: fit profiles read their codes
            sprof.update(name, st)
        for prof in self._fit_profiles.values():
            prof.update(name, st)
        journal = self._journal
        if len(journal) >= _MAX_JOURNAL:
            self._journal_base += len(journal)
            journal.clear()
        journal.append(name)

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
