"""The FLAME walkthrough run to the point a Kueue operator would look at a dashboard, and /metrics
read over HTTP(S) the way Prometheus reads it (shared by the metrics and dashboard tests)."""

from __future__ import annotations

import math

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.controller_support import Harness, eventually, flame_running, job_key, scenario

# Besides FLAME: a ClusterQueue with cpu and memory quota (no cohort), so usage shows in Kueue's
# units, and one whose flavor does not exist (inactive: Kueue's status "pending").
CPU_QUEUE = [
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cpu-queue"},
     "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
         {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "1500m", "borrowingLimit": "0"},
                                                  {"name": "memory", "nominalQuota": "2Gi"}]}]}]}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"namespace": "team-d", "name": "default"},
     "spec": {"clusterQueue": "cpu-queue"}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "group-x"},
     "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
         {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"namespace": "team-x", "name": "default"},
     "spec": {"clusterQueue": "group-x"}},
]


def _job(ns: str, name: str, limits: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": ns, "name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "worker", "image": "busybox", "resources": {"limits": limits}}]}}}}


CPU_JOB = _job("team-d", "d-1", {"cpu": "500m", "memory": "512Mi"})
X_JOB = _job("team-x", "x-1", {"nvidia.com/gpu": 1})


async def flame_reclaimed(h: Harness):
    """FLAME up to the reclaim (A holds its 4, two of C's 4 were preempted and wait), plus the
    cpu ClusterQueue with one Job admitted and the inactive one with one Job waiting. Returns the
    controller and A's and C's Job keys."""
    from gpuqueue.extender.controller.core import workload as W

    for obj in CPU_QUEUE:
        await h.apply(obj)
    ctl, keys = await flame_running(h)
    _, _, later = scenario("flame.yaml")
    for job in later + [CPU_JOB, X_JOB]:
        await h.submit(job)
    a_keys = [job_key(j) for j in later]
    c_keys = [k for k in keys if k[0] == "team-c"]
    await eventually(lambda: all(h.running(*k) for k in a_keys + [("team-d", "d-1")]), what="A's jobs and d-1 running")
    victims = [k for k in c_keys if not h.running(*k)]
    assert len(victims) == 2
    for k in victims:
        await eventually(lambda k=k: W.is_true(h.workload_of(*k), "Requeued"), what="victim requeued")
    return ctl, a_keys, c_keys


class Scrape:
    """One /metrics exposition: value(name, **labels) of a sample, and the families present."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[tuple[str, tuple], float] = {}
        self.families: set[str] = set()
        for family in text_string_to_metric_families(text):
            self.families.add(family.name)
            for s in family.samples:
                self.samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        self.names = {name for name, _ in self.samples}

    def value(self, metric: str, /, **labels) -> float | None:
        return self.samples.get((metric, tuple(sorted(labels.items()))))

    def matching(self, metric: str, /, **labels) -> dict[tuple, float]:
        want = set(labels.items())
        return {lbls: v for (n, lbls), v in self.samples.items() if n == metric and want <= set(lbls)}


async def scrape(url: str, token: str | None = None, ssl=None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers=headers, ssl=ssl) as r:
            return r.status, await r.text()


INF = math.inf


def serving_certs(tmp_path, service: str = "gpuqueue-extender"):
    """A CA and a serving certificate for 127.0.0.1 (as `gpuqueue certs generate` writes them) and
    a client SSLContext that trusts that CA."""
    import ssl

    from gpuqueue.certs.generate import ServingIdentity, generate, write_files

    write_files(tmp_path, generate(ServingIdentity(service, "gpuqueue-system", (), ("127.0.0.1",))))
    return tmp_path, ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))


def apply_manifest_objects(names: set[str]) -> list[dict]:
    """The shipped objects of these names (as `kubectl apply -k manifests/` would create them)."""
    from manifests.tools import render

    return [o for o in render.build() if o["metadata"]["name"] in names]


def declared_families(registry) -> dict[str, tuple[str, frozenset[str]]]:
    """Every family `registry` declares, named as a scrape names it (a counter with `_total`): its
    type and label names, whether or not it has a series yet. (prometheus_client has no public
    accessor for the label names of a family without a child: hence its `_labelnames`.)"""
    out = {}
    for collector in list(registry._collector_to_names):
        name = collector._name + ("_total" if collector._type == "counter" else "")
        out[name] = (collector._type, frozenset(collector._labelnames))
    return out
