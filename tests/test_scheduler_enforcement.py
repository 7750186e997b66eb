"""No GPU without admission, at the extender, against hostile tenants (issue 19): the controller on
the API server stand-in (its job controller makes the pods of unsuspended Jobs), the extender's
verbs over real TLS on the controller's caches, asked with kube-scheduler's client certificate
about pods as the API holds them; binding is written as kube-scheduler's binding would be.

Each attack: what the tenant does, then what kube-scheduler is told (the refusal reason is what
`kubectl describe pod` shows) and what stays reserved."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid

import aiohttp
import pytest
from kubernetes_asyncio import client

from gpuqueue.jobframework.unqueued import how_to_queue
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.controller import Controller
from gpuqueue.extender.controller.explain.explain import explain_job
from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
from gpuqueue.extender.scheduler.view import ADMITTED
from tests.controller_support import Harness, eventually
from tests.extender_support import anonymous_context, chosen, controller_and_extender, post
from tests.standin import resources as R
from tests.standin.faults import EXEMPT_HEADER

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
NODES = ["gh200-node-1", "gh200-node-2"]
KUEUE = "kueue.x-k8s.io/v1beta2"
OBJECTS = [
    {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "gh200"}, "spec": {"nodeLabels": GH200}},
    {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "cq-a"}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": "gh200", "resources": [{"name": "cpu", "nominalQuota": 64},
                                                        {"name": "memory", "nominalQuota": "512Gi"},
                                                        {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}},
    {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"namespace": "team-a", "name": "lq"},
     "spec": {"clusterQueue": "cq-a"}},
] + [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": GH200},
      "status": {"allocatable": {"cpu": "72", "memory": "480Gi", "nvidia.com/gpu": "4", "pods": "110"}}}
     for n in NODES]


def gpu_job(name: str, gpus: int = 1, parallelism: int = 1, completions: int | None = None) -> dict:
    spec = {"parallelism": parallelism, "template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "w", "image": "cuda", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": spec}


def gpu_pod(name: str, namespace: str = "team-a", gpus: int = 1, owner: dict | None = None, **spec) -> dict:
    """A pod as a tenant (or a Deployment's ReplicaSet, a StatefulSet...) creates it."""
    pod = {"metadata": {"name": name, "namespace": namespace},
           "spec": {"restartPolicy": "Never", "containers": [
               {"name": "w", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}], **spec}}
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [{"apiVersion": owner.get("apiVersion", "batch/v1"),
                                               "kind": owner.get("kind", "Job"), "name": owner["metadata"]["name"],
                                               "uid": owner["metadata"]["uid"], "controller": True}]
    return pod


class Cluster:
    """The stand-in with GH200 quota (cq-a: 8 GPUs), the controller, and the extender over its
    caches; `scheduler` asks as kube-scheduler does."""

    def __init__(self, h: Harness, ctl: Controller, view: ControllerClusterView, base: str,
                 scheduler: aiohttp.ClientSession) -> None:
        self.h, self.ctl, self.view, self.base, self.scheduler = h, ctl, view, base, scheduler
        h.client.set_default_header(EXEMPT_HEADER, "1")  # the tenant's kubectl: never held back

    # -- the API as the tenant and the cluster's own controllers change it ----------------------
    def pods_of(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]
        return [p for p in self.h.api.cluster.store.kind(R.PODS.storage_key).values()
                if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or ())]

    def pod(self, namespace: str, name: str) -> dict:
        return self.h.api.cluster.store.get(R.PODS.storage_key, (namespace, name))

    async def admitted(self, job: dict) -> dict:
        """Submit as kubectl after the webhook; wait for admission and for the extender to know it."""
        created = await self.h.submit(job)
        uid = created["metadata"]["uid"]
        await eventually(lambda: (self.view.workload_owned_by(uid) or _NONE).state == ADMITTED,
                         what=f"{job['metadata']['name']} admitted, as the extender sees it")
        return self.h.job("team-a", job["metadata"]["name"])

    async def pods_made(self, job: dict, count: int) -> list[dict]:
        """The job controller's pods of ``job``, once there are ``count`` and the extender knows them."""
        await eventually(lambda: len(self.pods_of(job)) == count, what=f"{count} pods of {job['metadata']['name']}")
        pods = self.pods_of(job)
        for pod in pods:
            await self.known(pod)
        return pods

    async def create_pod(self, pod: dict) -> dict:
        created = await self.h.kube.create(K.PODS, pod["metadata"]["namespace"], pod)
        await self.known(created)
        return created

    async def known(self, pod: dict) -> None:
        await eventually(lambda: self.view.pod(pod["metadata"]["uid"]) is not None, what="pod in the extender's cache")

    def bind(self, pod: dict, node: str) -> dict:
        """kube-scheduler's binding, then the kubelet runs it."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        body = copy.deepcopy(self.pod(ns, name))
        body["spec"]["nodeName"] = node
        self.h.api.cluster.update(R.PODS, ns, name, body, verb="binding")
        body = copy.deepcopy(self.pod(ns, name))
        body["status"] = {**body.get("status", {}), "phase": "Running"}
        return self.h.api.cluster.update(R.PODS, ns, name, body, subresource="status", verb="kubelet")

    async def bound(self, pod: dict, node: str) -> None:
        self.bind(pod, node)
        await eventually(lambda: self.view.nodes.pod_node(pod["metadata"]["uid"]) == (node, True), what="binding seen")

    def freeze_controller(self) -> None:
        """The controller's writes are held (a slow API server, a rollout): it has not reacted yet.
        Its watches, and so the extender's caches, go on."""
        hold = asyncio.Event()
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            self.h.api.faults.add("", method=method, hold=hold, times=10**6)

    # -- kube-scheduler --------------------------------------------------------------------------
    async def ask(self, verb: str, body: dict | bytes, session: aiohttp.ClientSession | None = None):
        status, answer = await post(session or self.scheduler, f"{self.base}/{verb}", body)
        assert status == 200, (verb, status, answer)
        return answer

    async def filter(self, pod: dict, names: list[str] = NODES) -> dict:
        return await self.ask("filter", {"Pod": self.live(pod), "Nodes": None, "NodeNames": names})

    async def prioritize(self, pod: dict, names: list[str] = NODES) -> list[dict]:
        return await self.ask("prioritize", {"Pod": self.live(pod), "Nodes": None, "NodeNames": names})

    def live(self, pod: dict) -> dict:
        return self.pod(pod["metadata"]["namespace"], pod["metadata"]["name"]) or pod

    async def schedule(self, pod: dict) -> str | None:
        """One scheduling attempt: filter, prioritize, bind to the best node; None: refused."""
        answer = await self.filter(pod)
        if not answer["NodeNames"]:
            return None
        scores = await self.prioritize(pod, answer["NodeNames"])
        node = max(scores, key=lambda h: (h["Score"], [-ord(c) for c in h["Host"]]))["Host"]
        await self.bound(pod, node)
        return node

    def reserved_gpus(self) -> dict[str, int]:
        return {n: self.view.nodes.states[n].gpus_reserved for n in NODES}

    def violations(self, reason: str) -> float:
        return self.ctl.metrics.registry.get_sample_value("gpuqueue_enforcement_violations_total",
                                                          {"reason": reason}) or 0.0


_NONE = type("_None", (), {"state": None})()


@contextlib.asynccontextmanager
async def cluster(tmp_path, mode: str = "Strict"):
    async with Harness() as h:
        for obj in OBJECTS:
            await h.apply(obj)
        async with controller_and_extender(h, tmp_path, mode) as (ctl, view, base, s):
            c = Cluster(h, ctl, view, base, s)
            c.cert_dir = tmp_path
            yield c


# -- case 1: pods beyond the admitted count --------------------------------------------------------

async def test_pods_beyond_the_admitted_count_are_refused_before_the_controller_reacts(tmp_path):
    """An admitted Job (completions 8, parallelism 1, 1 GPU: admitted for 1 pod) edited to
    parallelism 8: the job controller makes 7 more pods at once. The controller has not reacted
    (its writes are held); the extender refuses every pod past the first, whether the first is
    in flight or bound, and lets one through again only once the first has terminated."""
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train-1", completions=8))
        (first,) = await c.pods_made(job, 1)
        chosen(await c.filter(first), NODES)
        reserved = max(await c.prioritize(first), key=lambda h: (h["Score"], h["Host"] == NODES[0]))["Host"]
        assert c.view.nodes.pod_node(first["metadata"]["uid"]) == (reserved, False)  # in flight
        c.freeze_controller()
        await c.h.edit(K.JOBS, "team-a", "train-1", lambda j: j["spec"].__setitem__("parallelism", 8))
        extra = [p for p in await c.pods_made(job, 8) if p["metadata"]["uid"] != first["metadata"]["uid"]]
        wl = W.workload_name("train-1", job["metadata"]["uid"])
        full = f"gpuqueue: pod set main of workload team-a/{wl} is admitted for 1 pod and 1 already runs"
        for pod in extra:
            answer = await c.filter(pod)
            assert answer["NodeNames"] == [] and answer["FailedNodes"] == {}
            assert answer["FailedAndUnresolvableNodes"] == {n: full for n in NODES}
            assert {h["Score"] for h in await c.prioritize(pod)} == {0}
            assert c.view.nodes.pod_node(pod["metadata"]["uid"]) is None  # nothing held for them
        await c.bound(first, reserved)
        assert (await c.filter(extra[0]))["FailedAndUnresolvableNodes"] == {n: full for n in NODES}
        assert c.violations("pod_set_full") == len(extra) + 1  # one a /filter: each extra pod, extra[0] again
        # the first one finishes: its place is free for exactly one more
        c.h.api.job_controller.succeed_pods("team-a", "train-1", count=1)
        await eventually(lambda: c.view.nodes.pod_node(first["metadata"]["uid"]) is None, what="termination seen")
        assert await c.schedule(extra[0]) is not None
        assert (await c.filter(extra[1]))["FailedAndUnresolvableNodes"] == {n: full for n in NODES}
        text, _ = await explain_job(c.h.client, "team-a/train-1")
        assert f"team-a/{extra[1]['metadata']['name']}: {full}" in text, text


async def test_a_pod_being_deleted_counts_until_it_is_gone(tmp_path):
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train-1"))
        (first,) = await c.pods_made(job, 1)
        node = await c.schedule(first)
        c.freeze_controller()
        c.h.api.cluster.pod_deletion_delay = None  # the kubelet takes its time: the pod runs on, Terminating
        # the tenant deletes the running pod (graceful: it runs until the kubelet is done with it) and
        # makes another with the Job as its controller
        c.h.api.cluster.delete(R.PODS, "team-a", first["metadata"]["name"])
        assert c.pod("team-a", first["metadata"]["name"])["metadata"]["deletionTimestamp"]
        twin = await c.create_pod(gpu_pod("twin", owner=job))  # seen after the deletion: one watch, in order
        wl = W.workload_name("train-1", job["metadata"]["uid"])
        assert (await c.filter(twin))["FailedAndUnresolvableNodes"] == {
            n: f"gpuqueue: pod set main of workload team-a/{wl} is admitted for 1 pod and 1 already runs" for n in NODES}
        c.h.api.cluster.delete(R.PODS, "team-a", first["metadata"]["name"], grace_period=0)  # the kubelet is done
        await eventually(lambda: c.view.nodes.pod_node(first["metadata"]["uid"]) is None, what="pod gone")
        chosen(await c.filter(twin), NODES)
        assert node in NODES


# -- case 5: forged extender calls ------------------------------------------------------------------

async def test_forged_prioritize_reserves_nothing_and_real_pods_keep_their_gpus(tmp_path):
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train-1"))
        (real,) = await c.pods_made(job, 1)
        owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-1", "uid": job["metadata"]["uid"],
                  "controller": True}]

        def forged(**meta) -> dict:
            pod = copy.deepcopy(real)
            pod["metadata"].update(meta)
            for c_ in pod["spec"]["containers"]:
                c_["resources"] = {"requests": {"nvidia.com/gpu": "100000"}, "limits": {"nvidia.com/gpu": "100000"}}
            return {"Pod": pod, "Nodes": None, "NodeNames": NODES}

        made_up = forged(uid=str(uuid.uuid4()), name="train-1-forged", ownerReferences=owner)
        label_only = forged(uid=str(uuid.uuid4()), name="train-1-label", ownerReferences=[],
                            labels={"job-name": "train-1", "controller-uid": job["metadata"]["uid"]})
        for body in (made_up, label_only):
            uid = body["Pod"]["metadata"]["uid"]
            answer = await c.ask("filter", body)
            assert answer["Error"] == (f"gpuqueue: pod team-a/{body['Pod']['metadata']['name']} (uid {uid}) is not in "
                                       "gpuqueue's pod cache (waited 1 s for it)")
            for _ in range(3):  # "renewed every 10 s"
                assert {h["Score"] for h in await c.ask("prioritize", body)} == {0}
            assert c.view.nodes.pod_node(uid) is None
        # the real pod's uid with a made-up name, or a made-up owner: refused as not matching
        renamed = forged(name="someone-else")
        assert (await c.ask("filter", renamed))["Error"].startswith(
            f"gpuqueue: the request names pod team-a/someone-else but uid {real['metadata']['uid']} is pod team-a/")
        reowned = forged(ownerReferences=[{**owner[0], "uid": "another-jobs-uid"}])
        assert "controlled by uid another-jobs-uid" in (await c.ask("filter", reowned))["Error"]
        assert {h["Score"] for h in await c.ask("prioritize", renamed)} == {0}
        # the real pod's own body claiming 100,000 GPUs: judged, and held, as the 1 GPU it asks for
        claims = forged()
        chosen(await c.ask("filter", claims), NODES)
        await c.ask("prioritize", claims)
        node, bound = c.view.nodes.pod_node(real["metadata"]["uid"])
        assert not bound and c.reserved_gpus() == {n: int(n == node) for n in NODES}
        # real pods see the GPUs that are there
        c.view.nodes.release(real["metadata"]["uid"])
        assert c.reserved_gpus() == {n: 0 for n in NODES}
        answer = await c.filter(real)
        assert chosen(answer, NODES) and answer["FailedNodes"] == {}


async def test_without_kube_schedulers_client_certificate_nothing_is_served(tmp_path):
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train-1"))
        (real,) = await c.pods_made(job, 1)
        body = {"Pod": real, "Nodes": None, "NodeNames": NODES}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=anonymous_context(c.cert_dir))) as anon:
            for verb in ("filter", "prioritize", "preempt"):
                status, answer = await post(anon, f"{c.base}/{verb}", body)
                assert status == 403 and b"client certificate" in answer
        assert c.view.nodes.pod_node(real["metadata"]["uid"]) is None and c.reserved_gpus() == {n: 0 for n in NODES}


# -- case 6: GPU pods of no workload --------------------------------------------------------------------

def _others(c: Cluster, namespace: str) -> list[dict]:
    """A bare pod, a Deployment's pod (its ReplicaSet controls it), a StatefulSet's pod, each asking
    for a GPU, and a CPU-only pod."""
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "w", "image": "cuda"}]}}
    spec = {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": template}
    rs = c.h.api.cluster.create(R.REPLICA_SETS, namespace, {"metadata": {"name": "web-6d4cf"}, "spec": spec})
    sts = c.h.api.cluster.create(R.STATEFUL_SETS, namespace, {"metadata": {"name": "db"},
                                                               "spec": {**spec, "serviceName": "db"}})
    cpu = gpu_pod("cpu-only", namespace, gpus=0)
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return [gpu_pod("bare", namespace), gpu_pod("web-6d4cf-x2x9z", namespace, owner={**rs, "kind": "ReplicaSet",
                                                                                         "apiVersion": "apps/v1"}),
            gpu_pod("db-0", namespace, owner={**sts, "kind": "StatefulSet", "apiVersion": "apps/v1"}), cpu]


@pytest.mark.parametrize("mode", ["Strict", "Audit", "Off"])
async def test_gpu_pods_of_no_workload(tmp_path, mode, caplog):
    async with cluster(tmp_path, mode) as c:
        tenant = [await c.create_pod(p) for p in _others(c, "team-a")]
        system = [await c.create_pod(p) for p in _others(c, "kube-system")]
        for pod in tenant[:3]:
            answer = await c.filter(pod)
            if mode == "Strict":
                why = (f"gpuqueue: pod team-a/{pod['metadata']['name']} requests nvidia.com/gpu but belongs to no "
                       f"admitted workload; {how_to_queue('team-a')}")
                assert answer["NodeNames"] == [] and answer["FailedAndUnresolvableNodes"] == {n: why for n in NODES}
            else:
                assert answer["NodeNames"] == NODES and answer["FailedAndUnresolvableNodes"] == {}
            assert {h["Score"] for h in await c.prioritize(pod)} == {0}  # neutral; nothing held for it
        assert c.violations("no_workload") == (0 if mode == "Off" else 3)
        audited = [r.getMessage() for r in caplog.records if "enforcement (Audit" in r.getMessage()]
        assert len(audited) == (3 if mode == "Audit" else 0)
        # a CPU-only pod, and everything in an exempt namespace (kube-system: the default), pass untouched
        for pod in tenant[3:] + system:
            answer = await c.filter(pod)
            assert answer["NodeNames"] == NODES and answer["FailedAndUnresolvableNodes"] == {}, pod["metadata"]
        assert c.violations("no_workload") == (0 if mode == "Off" else 3)
        assert c.reserved_gpus() == {n: 0 for n in NODES}
        # Audit also tells the pod's owner, where `kubectl describe pod` shows it: one Warning per pod
        await c.filter(tenant[0])  # a second attempt records no second Event

        def events():
            return sorted((e["involvedObject"]["name"], e["type"], e["message"])
                          for e in c.h.api.cluster.store.kind(R.EVENTS.storage_key).values()
                          if e.get("reason") == "QuotaNotEnforced")
        want = sorted((p["metadata"]["name"], "Warning", f"gpuqueue: pod team-a/{p['metadata']['name']} requests "
                       "nvidia.com/gpu but belongs to no admitted workload (enforcement Audit: not refused)")
                      for p in tenant[:3]) if mode == "Audit" else []
        await eventually(lambda: events() == want, what=f"QuotaNotEnforced events {events()}")


# -- a pod's requests as Kubernetes counts them, against its pod set's admission ------------------------

async def test_a_pod_asking_more_than_its_pod_set_was_admitted_per_pod_is_refused(tmp_path):
    """The Job is admitted for 1 GPU per pod. Pods with the Job as their controller (a tenant
    can write that ownerReference) asking for more, however they ask, are refused; as much passes."""
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train-1", parallelism=4, completions=4))
        pods = await c.pods_made(job, 4)
        wl = W.workload_name("train-1", job["metadata"]["uid"])
        c.freeze_controller()
        for pod in pods[:3]:
            c.h.api.cluster.delete(R.PODS, "team-a", pod["metadata"]["name"], grace_period=0)  # room in the count
        init = gpu_pod("init-heavy", owner=job, initContainers=[
            {"name": "warm", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "4"}}}])
        limits_only = gpu_pod("limits-only", gpus=2, owner=job)
        uneven = gpu_pod("uneven", owner=job)
        uneven["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "2"},
                                                        "limits": {"nvidia.com/gpu": "2"}}
        uneven["spec"]["containers"].append({"name": "sidecar", "image": "x", "resources": {
            "requests": {"cpu": "1"}, "limits": {"cpu": "2"}}})
        for pod, asks in ((init, 4), (limits_only, 2), (uneven, 2)):
            pod = await c.create_pod(pod)
            answer = await c.filter(pod)
            why = (f"gpuqueue: pod team-a/{pod['metadata']['name']} requests {asks} nvidia.com/gpu but pod set main "
                   f"of workload team-a/{wl} is admitted for 1 per pod")
            assert answer["FailedAndUnresolvableNodes"] == {n: why for n in NODES}
        fits = await c.create_pod(gpu_pod("fits", owner=job))
        chosen(await c.filter(fits), NODES)
        assert c.violations("requests_exceed_admission") == 3


async def test_a_pod_of_a_finished_workload_is_refused(tmp_path):
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train-1"))
        await c.h.finish_job("team-a", "train-1")
        uid = job["metadata"]["uid"]
        await eventually(lambda: c.view.workload_owned_by(uid).state == "finished", what="finished, as the extender sees it")
        late = await c.create_pod(gpu_pod("late", owner=job))
        wl = W.workload_name("train-1", uid)
        answer = await c.filter(late)
        assert answer["FailedAndUnresolvableNodes"] == {
            n: f"gpuqueue: pod team-a/late requests nvidia.com/gpu but its workload team-a/{wl} is finished" for n in NODES}


# -- case 7 over the controller's caches ------------------------------------------------------------------

async def test_preempt_with_an_out_of_range_pdb_count_is_answered(tmp_path):
    async with cluster(tmp_path) as c:
        job = await c.admitted(gpu_job("train-1"))
        (pod,) = await c.pods_made(job, 1)
        victim = await c.create_pod(gpu_pod("victim", "kube-system"))
        body = {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
            "gh200-node-1": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": "99999999999999999999"}}}
        answer = await c.ask("preempt", body)
        assert answer["NodeNameToMetaVictims"] == {}
        assert "NodeNameToMetaVictims.gh200-node-1.NumPDBViolations" in answer["Error"]
        body["NodeNameToMetaVictims"]["gh200-node-1"]["NumPDBViolations"] = 0
        assert (await c.ask("preempt", body))["NodeNameToMetaVictims"] == {
            "gh200-node-1": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0}}


# -- the policy comes from the Configuration ------------------------------------------------------------

@pytest.mark.parametrize("section, error", [
    ("mode: strict", "enforcement.mode: must be one of Strict, Audit, Off, got 'strict'"),
    ("exemptNamespaces: kube-system", "enforcement.exemptNamespaces: must be a list of names"),
    ("resource: [nvidia.com/gpu]", "enforcement.resource: unknown field"),
])
def test_a_bad_enforcement_section_stops_the_extender_naming_the_field(tmp_path, capsys, section, error):
    from gpuqueue.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(f"apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nenforcement:\n  {section}\n")
    assert main(["extender", "--kubeconfig", "/nonexistent", "--insecure-http", "--config", str(config)]) == 2
    assert capsys.readouterr().err == f"gpuqueue extender: --config {config}: {error}\n"
    assert main(["explain", "team-a/train-1", "--config", str(config)]) == 2
    assert capsys.readouterr().err == f"gpuqueue explain: --config {config}: {error}\n"
