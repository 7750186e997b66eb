"""The cache's incrementally kept profiles (what filter and score read instead of judging each
candidate) against a straightforward per-node reference written here, over random clusters:
three flavors, cordons, taints and tolerations, bound pods, in-flight reservations that expire,
a pod asked about again while it holds a reservation, nodes relabelled and removed, pods on
nodes the cache does not know, and candidates the cache has never seen."""

from __future__ import annotations

import random

import pytest

from gpuqueue.extender.placement import (FlavorSelector, NodeCache, NodeInfo, PodRequest, Taint, Toleration,
                                extender_scores, filter_nodes, score_nodes)
from gpuqueue.extender.placement.filter import resource_shortage
from gpuqueue.extender.placement.score import rank_values
from gpuqueue.api.scheduling import UNSCHEDULABLE_TAINT, untolerated_taint

PRODUCT = "nvidia.com/gpu.product"
FLAVORS = {"gh200": {PRODUCT: "GH200"}, "h100": {PRODUCT: "H100"}, "a100": {PRODUCT: "A100", "pool": "x"}}
SELECTORS = [FlavorSelector.of(f, labels) for f, labels in FLAVORS.items()] + [FlavorSelector.of("any"), None]
TAINTS = [Taint("nvidia.com/gpu", "present", "NoSchedule"), Taint("maint", "", "NoExecute"),
          Taint("busy", "", "PreferNoSchedule"), Taint("nvidia.com/gpu", "other", "NoSchedule")]
TOLERATIONS = [Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), Toleration("maint", "Exists"),
               Toleration("nvidia.com/gpu", "Equal", "present", ""),
               Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"), Toleration("", "Exists")]
JOBS = ["a/train", "a/eval", "b/train", None]
TTL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Model:
    """The cluster as plain records: nodes, and pods with where they are and until when."""

    def __init__(self, clock: Clock, topology: str | None) -> None:
        self.clock, self.topology = clock, topology
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, dict] = {}

    def live(self) -> list[dict]:
        now = self.clock()
        return [p for p in self.pods.values() if p["bound"] or p["expires"] > now]

    def reserve(self, uid, node, gpus, requests, job):
        cur = self.pods.get(uid)
        if cur is not None and cur["bound"]:
            return
        self.pods[uid] = dict(uid=uid, node=node, gpus=gpus, requests=requests, job=job, bound=False,
                              expires=self.clock() + TTL)

    def bind(self, uid, node, gpus, requests, job):
        self.pods[uid] = dict(uid=uid, node=node, gpus=gpus, requests=requests, job=job, bound=True, expires=0)

    def own(self, uid) -> dict | None:
        p = self.pods.get(uid)
        return p if p is not None and not p["bound"] and p["expires"] > self.clock() else None

    def domain(self, node: str) -> str | None:
        info = self.nodes.get(node)
        return info.labels.get(self.topology) if info is not None and self.topology else None


def ref_filter(pod: PodRequest, names: list[str], m: Model, nodes: dict[str, NodeInfo] | None = None):
    """Every candidate judged on its own, in the documented order of checks."""
    facts = nodes if nodes is not None else m.nodes
    own = m.own(pod.uid)
    live = m.live()
    passed, failed, unresolvable = [], {}, {}
    for name in names:
        info = facts.get(name)
        if info is None:
            failed[name] = "node is not in gpuqueue's node cache yet"
            continue
        if pod.flavor is not None and not all(info.labels.get(k) == v for k, v in pod.flavor.node_labels):
            unresolvable[name] = pod.flavor.mismatch_reason
            continue
        if info.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.all_tolerations):
            unresolvable[name] = "node is cordoned"
            continue
        taint = untolerated_taint(info.taints, pod.all_tolerations)
        if taint is not None:
            unresolvable[name] = f"node has taint {taint} that the pod does not tolerate"
            continue
        here = [p for p in live if p["node"] == name and p is not own]
        free = info.allocatable.get("nvidia.com/gpu", 0) - sum(p["gpus"] for p in here)
        if free < pod.gpus:
            free = max(free, 0)
            failed[name] = f"node has {free} GPU{'' if free == 1 else 's'} free, pod needs {pod.gpus}"
            continue
        short = None
        for r, need in pod.requests.items():
            if need > 0 and r in info.allocatable:
                left = info.allocatable[r] - sum(p["requests"].get(r, 0) for p in here)
                if left < need:
                    short = resource_shortage(r, left, need)
                    break
        if short is not None:
            failed[name] = short
            continue
        passed.append(name)
    return passed, failed, unresolvable


def ref_values(pod: PodRequest, names: list[str], m: Model) -> list[float]:
    own = m.own(pod.uid)
    others = [p for p in m.live() if p is not own]
    domains = {m.domain(p["node"]) for p in others if p["job"] == pod.job_key} - {None}
    out = []
    for name in names:
        info = m.nodes.get(name)
        alloc = info.allocatable.get("nvidia.com/gpu", 0) if info is not None else 0
        after = sum(p["gpus"] for p in others if p["node"] == name) + pod.gpus
        value = 0.0 if alloc <= 0 else 7.0 * after / alloc if after < alloc else 7.0
        if pod.job_key is not None:
            if any(p["node"] == name and p["job"] == pod.job_key for p in others):
                value += 3.0
            elif m.domain(name) in domains:
                value += 1.5
        out.append(value)
    return out


def random_node(rnd: random.Random, name: str) -> NodeInfo:
    labels = dict(rnd.choice(list(FLAVORS.values())))
    if rnd.random() < 0.8:
        labels["zone"] = f"z{rnd.randrange(3)}"
    taints = tuple(rnd.sample(TAINTS, rnd.choice([0, 0, 0, 1, 2])))
    alloc = {"nvidia.com/gpu": rnd.choice([0, 4, 4, 8, 8])}
    if rnd.random() < 0.5:
        alloc["cpu"] = 8000
    return NodeInfo(name, labels, taints, unschedulable=rnd.random() < 0.1, allocatable=alloc)


def random_pod(rnd: random.Random, m: Model, again: dict | None = None) -> PodRequest:
    """A new pod, or (``again``) the pod of that in-flight reservation asked about again: same
    uid and Job; the GPUs it asks for may differ, its reservation is never counted against it."""
    flavor = rnd.choice(SELECTORS)
    if flavor is not None and rnd.random() < 0.2:
        flavor = FlavorSelector(flavor.name, flavor.node_labels, (rnd.choice(TOLERATIONS),))
    requests = {"cpu": rnd.choice([1000, 5000])} if rnd.random() < 0.2 else {}
    uid, job = (again["uid"], again["job"]) if again else (f"q-{rnd.randrange(10 ** 9)}", rnd.choice(JOBS))
    return PodRequest(uid, rnd.choice([0, 1, 1, 2, 4, 8]), requests,
                      tuple(rnd.sample(TOLERATIONS, rnd.choice([0, 0, 1, 2]))), flavor, job)


def mutate(rnd: random.Random, cache: NodeCache, m: Model, node_names: list[str], clock: Clock) -> None:
    op = rnd.random()
    name = rnd.choice(node_names)
    uid = f"p-{rnd.randrange(40)}"
    gpus, job = rnd.choice([0, 1, 1, 2, 4]), rnd.choice(JOBS)
    requests = {"cpu": rnd.choice([500, 2000])} if rnd.random() < 0.3 else {}
    if op < 0.3:
        cache.reserve(uid, name, gpus, requests, job)
        m.reserve(uid, name, gpus, requests, job)
    elif op < 0.55:
        cache.bind(uid, name, gpus, requests, job)
        m.bind(uid, name, gpus, requests, job)
    elif op < 0.7:
        cache.release(uid)
        m.pods.pop(uid, None)
    elif op < 0.8:
        clock.now += rnd.choice([1.0, 4.0, 9.0])
    elif op < 0.93:
        info = random_node(rnd, name)
        cache.upsert_node(info)
        m.nodes[name] = info
    else:
        cache.remove_node(name)
        m.nodes.pop(name, None)


@pytest.mark.parametrize("seed", range(12))
def test_profiles_agree_with_judging_each_node(seed):
    rnd = random.Random(seed)
    clock = Clock()
    topology = "zone" if seed % 3 else None
    cache = NodeCache(topology_label=topology, reservation_ttl=TTL, clock=clock)
    m = Model(clock, topology)
    node_names = [f"n{i}" for i in range(30)]
    for name in node_names[:25]:  # the last five come and go through mutations only
        info = random_node(rnd, name)
        cache.upsert_node(info)
        m.nodes[name] = info
    checked = reused = 0
    for step in range(300):
        for _ in range(rnd.randrange(4)):
            mutate(rnd, cache, m, node_names, clock)
        # a pod asked about again while it holds a reservation, or a new one
        own = [p for p in m.pods.values() if m.own(p["uid"]) is not None]
        pod = random_pod(rnd, m, rnd.choice(own) if own and rnd.random() < 0.4 else None)
        names = rnd.sample(node_names + ["ghost-1", "ghost-2"], rnd.randrange(1, 32))
        if rnd.random() < 0.1:
            names += names[:3]  # kube-scheduler never repeats a name; the answer must not break if it did
        full = None
        if rnd.random() < 0.15:  # nodeCacheCapable false: node facts from the request
            full = {n: (m.nodes.get(n) or random_node(rnd, n)) for n in names if rnd.random() < 0.9}
        got = filter_nodes(pod, names, cache, full)
        want = ref_filter(pod, names, m, full)
        assert (got.passed, got.failed, got.unresolvable) == want, (seed, step)
        if got.codes is not None and rnd.random() < 0.7:
            # /prioritize after /filter: the scores the filter read, with whatever changed since
            for _ in range(rnd.choice([0, 0, 1, 3])):
                mutate(rnd, cache, m, node_names, clock)
            later = [max(0, min(10, int(v + 0.5))) for v in ref_values(pod, got.passed, m)]
            assert extender_scores(pod, got.passed, cache, (got.codes, got.epoch)) == later, (seed, step)
            reused += 1
        values = ref_values(pod, names, m)
        assert rank_values(pod, names, cache) == values, (seed, step)
        want_scores = [max(0, min(10, int(v + 0.5))) for v in values]
        assert extender_scores(pod, names, cache) == want_scores, (seed, step)
        assert score_nodes(pod, names, cache) == list(zip(names, want_scores))
        checked += len(names)
    assert checked > 3000 and reused > 100


def test_a_profile_registered_early_follows_every_later_change():
    """The same request before and after each kind of change, on one registered profile."""
    clock = Clock()
    cache = NodeCache(topology_label="zone", reservation_ttl=TTL, clock=clock)
    gh = FlavorSelector.of("gh200", FLAVORS["gh200"])
    for i in range(3):
        cache.upsert_node(NodeInfo(f"n{i}", {**FLAVORS["gh200"], "zone": "z0"}, allocatable={"nvidia.com/gpu": 4}))
    pod = PodRequest("p", 2, flavor=gh, job_key="a/train")
    names = ["n0", "n1", "n2"]
    assert filter_nodes(pod, names, cache).passed == names
    cache.reserve("x", "n1", 3)
    assert filter_nodes(pod, names, cache).failed == {"n1": "node has 1 GPU free, pod needs 2"}
    clock.now += TTL
    assert filter_nodes(pod, names, cache).passed == names  # expired
    cache.upsert_node(NodeInfo("n2", {**FLAVORS["gh200"], "zone": "z0"}, unschedulable=True,
                               allocatable={"nvidia.com/gpu": 4}))
    assert filter_nodes(pod, names, cache).unresolvable == {"n2": "node is cordoned"}
    cache.upsert_node(NodeInfo("n2", FLAVORS["h100"], allocatable={"nvidia.com/gpu": 4}))
    assert filter_nodes(pod, names, cache).unresolvable == {"n2": FlavorSelector.of("gh200", FLAVORS["gh200"]).mismatch_reason}
    cache.remove_node("n0")
    assert filter_nodes(pod, names, cache).failed == {"n0": "node is not in gpuqueue's node cache yet"}
    assert extender_scores(pod, names, cache) == [0, 4, 4]  # 7 x 2/4, rounded half up
    cache.bind("sib", "n1", 1, job_key="a/train")
    assert extender_scores(pod, names, cache) == [0, 8, 4]  # 7 x 3/4 + 3
    cache.reserve("p", "n1", 2, job_key="a/train")  # the pod itself: neither its GPUs nor its bonus count
    assert extender_scores(pod, names, cache) == [0, 8, 4]
    assert filter_nodes(PodRequest("p", 3, flavor=gh), names, cache).passed == ["n1"]
    assert filter_nodes(PodRequest("q", 3, flavor=gh), names, cache).failed == {
        "n0": "node is not in gpuqueue's node cache yet", "n1": "node has 1 GPU free, pod needs 3"}


def test_scores_read_by_a_filter_are_read_again_once_the_journal_has_moved_past_them():
    """A /prioritize long after its /filter (more node changes than the journal keeps): every
    score is read again, none is taken from the filter."""
    clock = Clock()
    cache = NodeCache(reservation_ttl=TTL, clock=clock)
    gh = FlavorSelector.of("gh200", FLAVORS["gh200"])
    for i in range(3):
        cache.upsert_node(NodeInfo(f"n{i}", FLAVORS["gh200"], allocatable={"nvidia.com/gpu": 4}))
    pod = PodRequest("p", 1, flavor=gh)
    got = filter_nodes(pod, ["n0", "n1", "n2"], cache)
    assert extender_scores(pod, got.passed, cache, (got.codes, got.epoch)) == [2, 2, 2]  # 7 x 1/4
    cache.bind("x", "n1", 2)
    for k in range(5000):  # churn on another node
        cache.reserve(f"r{k}", "n2", 0)
    assert cache.touched_since(got.epoch) is None
    assert extender_scores(pod, got.passed, cache, (got.codes, got.epoch)) == [2, 5, 2]  # 7 x 3/4
