"""The extender endpoints over real HTTPS, with request bodies as kube-scheduler 1.24 sent them
(shared/fixtures/k8s-1.24/extender/), adapted only where a test needs another pod or node."""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
from pathlib import Path

import aiohttp
import orjson
import pytest

from gpuqueue.jobframework.unqueued import how_to_queue
from gpuqueue.extender.placement import FlavorSelector, NodeCache, NodeInfo, Taint, Toleration
from gpuqueue.extender.scheduler import InMemoryClusterView, start
from gpuqueue.extender.scheduler.memory import job_uid
from gpuqueue.jobframework.enforcement import EnforcementConfig
from tests.shared_fixtures import k8s_recording
from tests.extender_support import chosen, extender_cert_dir, scheduler_context

GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
GH = FlavorSelector.of("gh200", GH200)
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
OFF = EnforcementConfig(mode="Off")


def fixture(name: str) -> dict:
    return json.loads(k8s_recording("extender", name).read_text())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> tuple[Path, Path]:
    """The cert dir `gpuqueue certs generate` writes (serving pair for 127.0.0.1, kube-scheduler's
    client pair) and its CA."""
    d = extender_cert_dir(tmp_path_factory.mktemp("certs"))
    return d, d / "ca.crt"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def mixed_cluster(clock: Clock | None = None, enforcement: EnforcementConfig | None = None) -> InMemoryClusterView:
    """The recorded cluster: two 4-GPU GH200 nodes and one 8-GPU H100 node."""
    cache = NodeCache(clock=clock or Clock(), reservation_ttl=10)
    for name in ("gh200-node-1", "gh200-node-2"):
        cache.upsert_node(NodeInfo(name, dict(GH200), allocatable={"nvidia.com/gpu": 4, "cpu": 72000}))
    cache.upsert_node(NodeInfo("h100-node-3", dict(H100), allocatable={"nvidia.com/gpu": 8, "cpu": 64000}))
    return InMemoryClusterView(cache, enforcement=enforcement)


class Extender:
    def __init__(self, session: aiohttp.ClientSession, base: str, view: InMemoryClusterView) -> None:
        self.session, self.base, self.view = session, base, view

    async def post(self, verb: str, body: bytes | dict, known: bool = True):
        """POST as kube-scheduler does. ``known``: the pod of a dict body is in the view's pod
        cache first, as the pod informer would have it (kube-scheduler asks about pods that exist)."""
        if known and isinstance(body, dict) and isinstance(body.get("Pod"), dict):
            self.view.add_pod(body["Pod"])
        data = body if isinstance(body, bytes) else orjson.dumps(body) + b"\n"  # Go's encoder adds \n
        async with self.session.post(f"{self.base}/{verb}", data=data,
                                     headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.content_type == "application/json"
            return orjson.loads(await resp.read())


async def running_extender(pki, view: InMemoryClusterView):
    cert_dir, _ = pki
    runner = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir)
    port = runner.addresses[0][1]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=scheduler_context(cert_dir))) as session:
        yield Extender(session, f"https://127.0.0.1:{port}", view)
    await runner.cleanup()


@pytest.fixture
async def ext(pki):
    """The extender over TLS with the default policy (Strict), asked by kube-scheduler."""
    async for e in running_extender(pki, mixed_cluster()):
        yield e


@pytest.fixture
async def ext_off(pki):
    """The same with enforcement Off: only Workloads' placement (Kueue's behaviour)."""
    async for e in running_extender(pki, mixed_cluster(enforcement=OFF)):
        yield e


def job_pod(body: dict, job: str = "train", *, namespace: str | None = None, uid: str | None = None,
            gpus: int | None = None, tolerations: list | None = None) -> dict:
    """Make the fixture's pod a pod of Job ``job`` (as the Job controller creates it: its
    controller ownerReference is the Job's uid, ``memory.job_uid``)."""
    body = copy.deepcopy(body)
    meta = body["Pod"]["metadata"]
    if namespace:
        meta["namespace"] = namespace
    if uid:
        meta["uid"] = uid
    meta["labels"]["job-name"] = job
    meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                "uid": job_uid(f"{meta['namespace']}/{job}"), "controller": True,
                                "blockOwnerDeletion": True}]
    if gpus is not None:
        res = body["Pod"]["spec"]["containers"][0]["resources"]
        res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = str(gpus)
    if tolerations is not None:
        body["Pod"]["spec"]["tolerations"] += tolerations
    return body


def names_request(pod_body: dict, names: list[str]) -> dict:
    body = copy.deepcopy(pod_body)
    body["Nodes"], body["NodeNames"] = None, names
    return body


FILTER_NCT = "filter.request.nodeCacheCapable-true.3-nodes.json"
FILTER_NCF = "filter.request.nodeCacheCapable-false.3-nodes.json"
NOT_GH200 = "node is not of flavor gh200 (needs nvidia.com/gpu.product=NVIDIA-GH200-480GB)"


# -- flavors -------------------------------------------------------------------------------

async def test_gh200_pod_is_offered_only_gh200_nodes_names_mode(ext):
    body = job_pod(fixture(FILTER_NCT))
    ext.view.admit("team-b/train", GH)
    r = await ext.post("filter", body)
    assert set(r) == FILTER_KEYS
    assert r["Nodes"] is None and r["Error"] == ""
    assert chosen(r, ["gh200-node-2", "gh200-node-1"])
    assert r["FailedAndUnresolvableNodes"] == {"h100-node-3": NOT_GH200}
    assert r["FailedNodes"] == {}


async def test_gh200_pod_is_offered_only_gh200_nodes_full_node_mode(ext):
    body = job_pod(fixture(FILTER_NCF))
    ext.view.admit("team-b/train", GH)
    r = await ext.post("filter", body)
    assert r["NodeNames"] is None
    assert r["Nodes"]["metadata"] == {}
    # the Node objects come back exactly as sent (kube-scheduler matches them by name)
    sent = {n["metadata"]["name"]: n for n in body["Nodes"]["items"]}
    assert chosen(r, ["gh200-node-2", "gh200-node-1"])
    assert all(n == sent[n["metadata"]["name"]] for n in r["Nodes"]["items"])
    assert r["FailedAndUnresolvableNodes"] == {"h100-node-3": NOT_GH200}


async def test_full_node_mode_judges_the_node_objects_sent(ext):
    """With nodeCacheCapable false the labels/taints come from the request, usage from the cache."""
    body = job_pod(fixture(FILTER_NCF))
    h100 = next(n for n in body["Nodes"]["items"] if n["metadata"]["name"] == "h100-node-3")
    h100["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-GH200-480GB"  # relabelled meanwhile
    gh2 = next(n for n in body["Nodes"]["items"] if n["metadata"]["name"] == "gh200-node-2")
    gh2["spec"]["unschedulable"] = True
    ext.view.admit("team-b/train", GH)
    ext.view.nodes.bind("someone", "gh200-node-1", 1)
    r = await ext.post("filter", body)
    assert [n["metadata"]["name"] for n in r["Nodes"]["items"]] == ["h100-node-3"]
    assert r["FailedAndUnresolvableNodes"] == {"gh200-node-2": "node is cordoned"}
    assert r["FailedNodes"] == {"gh200-node-1": "node has 3 GPUs free, pod needs 4"}


async def test_mixed_cluster_never_offers_another_flavor_as_gpus_fill_up(ext):
    """Many pods over a larger two-flavor cluster: whatever is full, no H100 node is ever offered."""
    cache = ext.view.nodes
    for i in range(6):
        cache.upsert_node(NodeInfo(f"gh-{i}", dict(GH200), allocatable={"nvidia.com/gpu": 4}))
        cache.upsert_node(NodeInfo(f"h100-{i}", dict(H100), allocatable={"nvidia.com/gpu": 8}))
    names = [f"{p}-{i}" for i in range(6) for p in ("h100", "gh")]
    ext.view.admit("team-b/train", GH)
    offered = []
    for k in range(14):  # 24 GH200 GPUs; 2-GPU pods: 12 fit, then none
        body = names_request(job_pod(fixture(FILTER_NCT), uid=f"pod-{k}", gpus=2), names)
        r = await ext.post("filter", body)
        assert set(r["FailedAndUnresolvableNodes"]) == {f"h100-{i}" for i in range(6)}
        offered.append(len(r["NodeNames"]))
        if r["NodeNames"]:
            top = chosen(r, [f"gh-{i}" for i in range(6)])
            cache.bind(f"pod-{k}", top, 2, job_key=job_uid("team-b/train"))  # the watch sees the binding
    assert offered == [1] * 12 + [0, 0]


# -- taints, cordons -----------------------------------------------------------------------

async def test_taints_and_tolerations(ext):
    cache = ext.view.nodes
    cache.upsert_node(NodeInfo("gh200-node-2", dict(GH200), (Taint("nvidia.com/gpu", "present", "NoSchedule"),),
                               allocatable={"nvidia.com/gpu": 4}))
    ext.view.admit("team-b/train", GH)
    r = await ext.post("filter", job_pod(fixture(FILTER_NCT)))
    assert r["NodeNames"] == ["gh200-node-1"]
    assert r["FailedAndUnresolvableNodes"]["gh200-node-2"] == (
        "node has taint nvidia.com/gpu=present:NoSchedule that the pod does not tolerate")
    tolerant = job_pod(fixture(FILTER_NCT), tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}])
    r = await ext.post("filter", tolerant)
    assert chosen(r, ["gh200-node-2", "gh200-node-1"])
    wrong_value = job_pod(fixture(FILTER_NCT), tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent", "effect": "NoSchedule"}])
    assert (await ext.post("filter", wrong_value))["NodeNames"] == ["gh200-node-1"]
    # the flavor's tolerations count too (the controller injects them into the pod template)
    ext.view.admit("team-b/train", FlavorSelector.of("gh200", GH200, (Toleration("nvidia.com/gpu", "Exists"),)))
    assert chosen(await ext.post("filter", job_pod(fixture(FILTER_NCT))), ["gh200-node-2", "gh200-node-1"])


async def test_cordoned_node_is_refused(ext):
    ext.view.nodes.upsert_node(NodeInfo("gh200-node-1", dict(GH200), unschedulable=True,
                                        allocatable={"nvidia.com/gpu": 4}))
    ext.view.admit("team-b/train", GH)
    r = await ext.post("filter", job_pod(fixture(FILTER_NCT)))
    assert r["NodeNames"] == ["gh200-node-2"]
    assert r["FailedAndUnresolvableNodes"] == {"h100-node-3": NOT_GH200, "gh200-node-1": "node is cordoned"}


# -- free GPUs -----------------------------------------------------------------------------

async def test_free_gpu_arithmetic_with_bound_and_in_flight_pods(ext):
    cache = ext.view.nodes
    ext.view.admit("team-b/train", GH)
    cache.bind("bound-a", "gh200-node-1", 1)
    cache.bind("bound-b", "gh200-node-2", 3)
    cache.reserve("flying", "gh200-node-1", 1)
    two = job_pod(fixture(FILTER_NCT), gpus=2)
    r = await ext.post("filter", two)
    assert r["NodeNames"] == ["gh200-node-1"]
    assert r["FailedNodes"] == {"gh200-node-2": "node has 1 GPU free, pod needs 2"}
    three = job_pod(fixture(FILTER_NCT), gpus=3, uid="another-pod")
    r = await ext.post("filter", three)
    assert r["NodeNames"] == []
    assert r["FailedNodes"] == {"gh200-node-2": "node has 1 GPU free, pod needs 3",
                                "gh200-node-1": "node has 0 GPUs free, pod needs 3"}
    # (gh200-node-1: 4 - 1 bound - 1 in flight - 2 reserved by the 2-GPU pod's filter, its only node)
    cache.clock.now += 11  # neither in-flight pod got bound: their GPUs come back
    cache.release("two-pod-is-gone")  # releasing an unknown pod is harmless
    r = await ext.post("filter", three)
    assert r["NodeNames"] == ["gh200-node-1"]
    assert r["FailedNodes"] == {"gh200-node-2": "node has 1 GPU free, pod needs 3"}
    # a single feasible node means prioritize is skipped: the filter itself reserves it
    cache.release("bound-b")
    only = names_request(job_pod(fixture(FILTER_NCT), gpus=4, uid="four"), ["gh200-node-2"])
    assert (await ext.post("filter", only))["NodeNames"] == ["gh200-node-2"]
    assert cache.pod_node("four") == ("gh200-node-2", False)


async def test_two_pods_back_to_back_do_not_both_take_the_last_gpus(ext):
    ext.view.admit("team-b/train", GH)
    ext.view.nodes.bind("x", "gh200-node-2", 2)
    first = job_pod(fixture(FILTER_NCT), gpus=2, uid="first")
    r = await ext.post("filter", first)
    assert r["NodeNames"] == ["gh200-node-2"]  # the fuller node: packed
    # kube-scheduler binds "first" to gh200-node-2, the one node passed; the watch has not seen it yet
    second = job_pod(fixture(FILTER_NCT), gpus=2, uid="second")
    r = await ext.post("filter", second)
    assert r["NodeNames"] == ["gh200-node-1"]
    assert r["FailedNodes"] == {"gh200-node-2": "node has 0 GPUs free, pod needs 2"}
    # the same pod asked again does not collide with its own reservation
    assert (await ext.post("filter", names_request(first, ["gh200-node-2"])))["NodeNames"] == ["gh200-node-2"]


# -- pods gpuqueue does not manage, and pods without quota -----------------------------------

async def test_with_enforcement_off_pods_of_no_workload_pass_through_untouched(ext_off):
    ext = ext_off
    ext.view.nodes.upsert_node(NodeInfo("gh200-node-1", dict(GH200), unschedulable=True,
                                        allocatable={"nvidia.com/gpu": 4}))
    r = await ext.post("filter", fixture(FILTER_NCT))  # the recorded pod: no Job owns it
    assert r == {"Nodes": None, "NodeNames": ["gh200-node-2", "h100-node-3", "gh200-node-1"],
                 "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    body = fixture(FILTER_NCF)
    r = await ext.post("filter", body)
    assert r["Nodes"]["items"] == body["Nodes"]["items"] and r["FailedAndUnresolvableNodes"] == {}
    # a Job without a Workload is no Workload's either
    r = await ext.post("filter", job_pod(fixture(FILTER_NCT), job="not-queued"))
    assert r["NodeNames"] == ["gh200-node-2", "h100-node-3", "gh200-node-1"]
    prio = await ext.post("prioritize", fixture("prioritize.request.nodeCacheCapable-true.json"))
    assert prio == [{"Host": "gh200-node-2", "Score": 0}, {"Host": "gh200-node-1", "Score": 0}]
    prio = await ext.post("prioritize", fixture("prioritize.request.nodeCacheCapable-false.json"))
    assert {h["Host"] for h in prio} == {"gh200-node-1", "gh200-node-2"} and {h["Score"] for h in prio} == {0}
    assert ext.view.nodes.pod_node(body["Pod"]["metadata"]["uid"]) is None  # nothing reserved
    assert list(ext.view.violations) == []


async def test_strict_refuses_a_gpu_pod_of_no_workload_but_not_in_an_exempt_namespace(ext):
    refusal = ("gpuqueue: pod team-b/nct-low-1 requests nvidia.com/gpu but belongs to no admitted workload; "
               + how_to_queue("team-b"))
    r = await ext.post("filter", fixture(FILTER_NCT))
    assert r["NodeNames"] == [] and r["FailedNodes"] == {}
    assert r["FailedAndUnresolvableNodes"] == {n: refusal for n in ("gh200-node-2", "h100-node-3", "gh200-node-1")}
    assert [(v.reason, v.message) for v in ext.view.violations] == [("no_workload", refusal.split("; ")[0])]
    r = await ext.post("filter", job_pod(fixture(FILTER_NCT), job="not-queued"))
    assert set(r["FailedAndUnresolvableNodes"].values()) == {refusal}
    system = job_pod(fixture(FILTER_NCT), job="device-plugin", namespace="kube-system", uid="sys")
    r = await ext.post("filter", system)
    assert r["NodeNames"] == ["gh200-node-2", "h100-node-3", "gh200-node-1"] and r["FailedAndUnresolvableNodes"] == {}
    assert (await ext.post("prioritize", names_request(system, r["NodeNames"])))[0]["Score"] == 0
    assert ext.view.nodes.pod_node("sys") is None


async def test_pod_without_quota_reservation_is_refused_everywhere_with_its_reason(ext):
    msg = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
           "in flavor gh200, 4 more needed")
    ext.view.pend("team-b/train", msg)
    r = await ext.post("filter", job_pod(fixture(FILTER_NCT)))
    assert r["NodeNames"] == [] and r["FailedNodes"] == {}
    assert r["FailedAndUnresolvableNodes"] == {n: msg for n in ("gh200-node-2", "h100-node-3", "gh200-node-1")}
    r = await ext.post("filter", job_pod(fixture(FILTER_NCF)))
    assert r["Nodes"] == {"metadata": {}, "items": []}
    assert set(r["FailedAndUnresolvableNodes"]) == {"gh200-node-2", "h100-node-3", "gh200-node-1"}


def scores(prio: list[dict]) -> dict[str, int]:
    assert len({h["Host"] for h in prio}) == len(prio)
    return {h["Host"]: h["Score"] for h in prio}


# -- scores --------------------------------------------------------------------------------

async def test_prioritize_bin_packs_and_keeps_siblings_together(ext):
    ext.view.admit("team-b/train", GH)
    cache = ext.view.nodes
    cache.bind("other-job", "gh200-node-1", 2, job_key=job_uid("team-a/other"))
    one = job_pod(fixture("prioritize.request.nodeCacheCapable-true.json"), gpus=1)
    prio = await ext.post("prioritize", one)
    assert set(prio[0]) == {"Host", "Score"}  # host order is not significant to kube-scheduler
    assert scores(prio) == {"gh200-node-2": 2, "gh200-node-1": 5}
    cache.release(one["Pod"]["metadata"]["uid"])  # drop the reservation prioritize just made
    cache.bind("sibling", "gh200-node-2", 1, job_key=job_uid("team-b/train"))
    prio = await ext.post("prioritize", one)
    assert scores(prio) == {"gh200-node-2": 7, "gh200-node-1": 5}
    full = job_pod(fixture("prioritize.request.nodeCacheCapable-false.json"), gpus=1, uid="full-mode")
    prio = await ext.post("prioritize", full)
    assert all(0 <= h["Score"] <= 10 for h in prio) and {h["Host"] for h in prio} == {"gh200-node-1", "gh200-node-2"}


# -- preemption ------------------------------------------------------------------------------

PREEMPT_NCT = "preempt.request.nodeCacheCapable-true.NodeNameToMetaVictims.json"
PREEMPT_NCF = "preempt.request.nodeCacheCapable-false.NodeNameToVictims.json"


def victims_of(r: dict) -> dict:
    return {n: [p["UID"] for p in v["Pods"]] for n, v in r["NodeNameToMetaVictims"].items()}


def victim(name: str, uid: str, namespace: str = "team-b", job: str | None = None) -> dict:
    """A pod the cache knows: of Job ``job`` (its controller ownerReference), or of no one."""
    meta = {"name": name, "namespace": namespace, "uid": uid, "labels": {"job-name": "train"}}
    if job is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True,
                                    "uid": job_uid(f"{namespace}/{job}")}]
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


async def test_preempt_keeps_unmanaged_victims_and_vetoes_admitted_ones(ext):
    body = job_pod(fixture(PREEMPT_NCT))
    uid1, uid2 = "36a8ce8f-93b6-496d-8ce7-84ba7b1cca25", "9807f227-4d31-486f-a07b-c09b2b398f8d"
    view = ext.view
    view.add_pod(victim("nct-low-1", uid1))  # a job-name label is no proof of anything
    view.add_pod(victim("train-x", uid2, job="train"))
    view.admit("team-b/train", GH)
    r = await ext.post("preempt", body)
    assert victims_of(r) == {"gh200-node-1": [uid1]}  # gh200-node-2's victim is an admitted Workload's pod
    assert r["NodeNameToMetaVictims"]["gh200-node-1"]["NumPDBViolations"] == 0
    asked = []
    view.set_eviction_policy(lambda pod: asked.append(pod.uid) or True)  # the engine agrees
    r = await ext.post("preempt", body)
    assert victims_of(r) == {"gh200-node-1": [uid1], "gh200-node-2": [uid2]} and asked == [uid2]


async def test_preempt_vetoes_unknown_victims_and_drops_partly_vetoed_nodes(ext):
    body = job_pod(fixture(PREEMPT_NCT))
    body["NodeNameToMetaVictims"]["gh200-node-1"]["Pods"].append({"UID": "guarded"})
    ext.view.add_pod(victim("nct-low-1", "36a8ce8f-93b6-496d-8ce7-84ba7b1cca25"))
    ext.view.add_pod(victim("g", "guarded", namespace="team-a", job="big"))
    ext.view.admit("team-a/big", GH)
    ext.view.admit("team-b/train", GH)
    r = await ext.post("preempt", body)
    # gh200-node-1: one victim may go, the other may not -> the node is dropped whole;
    # gh200-node-2: its victim is unknown to the cache -> vetoed
    assert r == {"NodeNameToMetaVictims": {}}


async def test_preempt_with_full_victim_pods_reads_only_their_uids(ext):
    body = job_pod(fixture(PREEMPT_NCF))
    ext.view.admit("team-b/train", GH)
    victims = {n: v["Pods"][0]["metadata"] for n, v in body["NodeNameToVictims"].items()}
    for meta in victims.values():
        ext.view.add_pod({"metadata": meta, "spec": {"containers": []}})
    r = await ext.post("preempt", body)  # recorded victims: plain pods, no Job
    assert victims_of(r) == {"gh200-node-1": ["71fbd39a-af83-4575-aa30-54534361ba44"],
                             "gh200-node-2": ["1fa6809e-c2c6-4567-9c49-f224c07acc14"]}
    # the body cannot make a victim unmanaged: the cache says it is an admitted Workload's pod
    ext.view.add_pod(victim(victims["gh200-node-2"]["name"], victims["gh200-node-2"]["uid"],
                            victims["gh200-node-2"]["namespace"], job="train"))
    r = await ext.post("preempt", body)
    assert victims_of(r) == {"gh200-node-1": ["71fbd39a-af83-4575-aa30-54534361ba44"]}
    # and a victim the cache does not know is not evicted, whatever the body says of it
    ext.view.remove_pod("71fbd39a-af83-4575-aa30-54534361ba44")
    assert await ext.post("preempt", body) == {"NodeNameToMetaVictims": {}}


async def test_preemptor_without_quota_evicts_nobody(ext):
    body = job_pod(fixture(PREEMPT_NCF), job="hungry")
    ext.view.pend(f"{body['Pod']['metadata']['namespace']}/hungry", "Workload is pending evaluation in the scheduling queue")
    assert await ext.post("preempt", body) == {"NodeNameToMetaVictims": {}}
    # nor does a preemptor of no Workload (Strict), nor one the cache has not seen yet
    assert await ext.post("preempt", fixture(PREEMPT_NCF)) == {"NodeNameToMetaVictims": {}}
    assert await ext.post("preempt", job_pod(fixture(PREEMPT_NCF), uid="unseen"), known=False) == {
        "NodeNameToMetaVictims": {}}


# -- malformed requests ------------------------------------------------------------------------

@pytest.mark.parametrize("body, error", [
    (b"", "empty request body, expected ExtenderArgs JSON"),
    (b"{not json", "request body is not valid JSON"),
    (b"[1, 2]", "ExtenderArgs must be a JSON object, got an array"),
    (b'{"NodeNames": ["a"]}', "invalid ExtenderArgs: Pod: Field required"),
    (b'{"Pod": "x", "NodeNames": ["a"]}', "invalid ExtenderArgs: Pod: Input should be a valid dictionary"),
    (b'{"Pod": {}, "NodeNames": [1]}', "invalid ExtenderArgs: NodeNames[0]: Input should be a valid string"),
    (b'{"Pod": {}, "Nodes": null, "NodeNames": null}', "ExtenderArgs has neither Nodes nor NodeNames"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "four"}}}]}}',
     "Nodes.items[0]: Node n: status.allocatable.nvidia.com/gpu: quantities must match"),
])
async def test_malformed_filter_bodies_get_a_clear_error(ext, body, error):
    r = await ext.post("filter", body)
    assert set(r) == FILTER_KEYS
    assert r["Error"].startswith(error), r["Error"]
    assert r["Nodes"] is None and r["NodeNames"] is None
    prio = await ext.post("prioritize", body)
    assert prio["Error"].startswith(error)
    pre = await ext.post("preempt", body)
    assert pre["NodeNameToMetaVictims"] == {} and pre["Error"]


async def test_bad_quantity_in_a_pod_the_cache_does_not_know_is_named(ext):
    body = job_pod(fixture(FILTER_NCT))
    body["Pod"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "4 GPUs"
    ext.view.admit("team-b/train", GH)
    r = await ext.post("filter", body, known=False)
    assert r["Error"].startswith("Pod team-b/nct-low-1: spec.containers[0].resources.requests.nvidia.com/gpu:")
    assert "'4 GPUs'" in r["Error"]
    # a pod the cache knows is judged as the cache has it: the body's spec is not read
    ext.view.add_pod(job_pod(fixture(FILTER_NCT))["Pod"])
    r = await ext.post("filter", body, known=False)
    assert r["Error"] == "" and chosen(r, ["gh200-node-2", "gh200-node-1"])


async def test_wrong_method_and_path_are_client_errors_not_5xx(ext):
    async with ext.session.get(f"{ext.base}/filter") as resp:
        assert resp.status == 405
    async with ext.session.post(f"{ext.base}/bind", data=b"{}") as resp:
        assert resp.status == 404
    async with ext.session.get(f"{ext.base}/healthz") as resp:
        assert resp.status == 200


async def test_a_bug_in_a_verb_is_an_error_answer_not_a_5xx(ext, monkeypatch):
    def boom(pod):
        raise RuntimeError("view exploded")

    monkeypatch.setattr(ext.view, "pod", boom)
    r = await ext.post("filter", fixture(FILTER_NCT))
    assert r["Error"] == "gpuqueue extender: internal error in /filter: RuntimeError: view exploded"


# -- transport -------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
async def test_https_only_unless_plain_http_is_asked_for(pki):
    with pytest.raises(ValueError, match="serves HTTPS"):
        await start(mixed_cluster(), host="127.0.0.1", port=0)
    cert_dir, ca = pki
    runner = await start(mixed_cluster(), host="127.0.0.1", port=0, cert_dir=cert_dir)
    port = runner.addresses[0][1]
    try:
        old = ssl.create_default_context(cafile=str(ca))
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.minimum_version = ssl.TLSVersion.TLSv1
        # TLS 1.2 offering only CBC suites (no AEAD): refused, as by the webhook (gpuqueue/tls.py)
        cbc = ssl.create_default_context(cafile=str(ca))
        cbc.maximum_version = ssl.TLSVersion.TLSv1_2
        cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-RSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA:AES128-SHA")
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientError):
                await s.post(f"https://127.0.0.1:{port}/filter", data=b"{}", ssl=old)
            with pytest.raises(aiohttp.ClientError):
                await s.post(f"https://127.0.0.1:{port}/filter", data=b"{}", ssl=cbc)
            tls12 = ssl.create_default_context(cafile=str(ca))
            tls12.maximum_version = ssl.TLSVersion.TLSv1_2
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls12, server_hostname="127.0.0.1")
            cipher, version, _bits = writer.get_extra_info("cipher")
            writer.close()
            await writer.wait_closed()
            assert version == "TLSv1.2" and cipher.startswith("ECDHE") and ("GCM" in cipher or "CHACHA20" in cipher)
            with pytest.raises(aiohttp.ClientError):
                await s.post(f"http://127.0.0.1:{port}/filter", data=b"{}")
    finally:
        await runner.cleanup()
    runner = await start(mixed_cluster(), host="127.0.0.1", port=0, insecure_http=True)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{runner.addresses[0][1]}/filter",
                              data=orjson.dumps(fixture(FILTER_NCT))) as resp:
                # served (to anyone: plain HTTP has no client certificates); the pod is unknown
                assert (await resp.json())["Error"].startswith("gpuqueue: pod team-b/nct-low-1 (uid ")
    finally:
        await runner.cleanup()


# -- enforcement, state by state (the hostile-tenant cases over the controller's caches are in
#    test_scheduler_enforcement.py) ------------------------------------------------------------------

def _refused(r: dict) -> set[str]:
    assert r["NodeNames"] == [] and r["FailedNodes"] == {}
    return set(r["FailedAndUnresolvableNodes"].values())


@pytest.mark.parametrize("mode", ["Strict", "Audit", "Off"])
async def test_each_workload_state_and_pod_set_in_each_mode(pki, mode):
    from gpuqueue.extender.scheduler.view import EVICTED, FINISHED, PodSetAdmission, WorkloadEntry

    view = mixed_cluster(enforcement=EnforcementConfig(mode=mode))
    async for ext in running_extender(pki, view):
        placed = ["gh200-node-2", "gh200-node-1"]
        everywhere = ["gh200-node-2", "h100-node-3", "gh200-node-1"]
        # a Job of another namespace named as controller: not its Workload (nor its quota)
        view.admit("team-a/train", GH, count=1)
        stranger = job_pod(fixture(FILTER_NCT), uid="stranger")
        stranger["Pod"]["metadata"]["ownerReferences"][0]["uid"] = job_uid("team-a/train")
        r = await ext.post("filter", stranger)
        if mode == "Strict":
            assert _refused(r) == {"gpuqueue: pod team-b/nct-low-1 requests nvidia.com/gpu but belongs to no "
                                   f"admitted workload; {how_to_queue('team-b')}"}
        else:
            assert r["NodeNames"] == everywhere
        # being evicted: no new pods (Off: still kept to its flavor)
        view.admit("team-b/train", GH)
        view.set_state("team-b/train", EVICTED, "Preempted to accommodate a workload")
        r = await ext.post("filter", job_pod(fixture(FILTER_NCT), uid="late"))
        if mode == "Strict":
            assert _refused(r) == {"gpuqueue: pod team-b/nct-low-1 requests nvidia.com/gpu but its workload "
                                   "team-b/job-train is being evicted (Preempted to accommodate a workload)"}
        else:
            assert chosen(r, placed)
        view.set_state("team-b/train", FINISHED)
        r = await ext.post("filter", job_pod(fixture(FILTER_NCT), uid="later"))
        if mode == "Strict":
            assert _refused(r) == {"gpuqueue: pod team-b/nct-low-1 requests nvidia.com/gpu but its workload "
                                   "team-b/job-train is finished"}
        else:
            assert r["NodeNames"] == everywhere
        # a pod set the admission does not name
        view.put_workload(WorkloadEntry("team-b", "job-train", job_uid("team-b/train"), "admitted", "", GH,
                                        {"workers": PodSetAdmission(2, {"nvidia.com/gpu": 8})}))
        r = await ext.post("filter", job_pod(fixture(FILTER_NCT), uid="odd"))
        if mode == "Strict":
            assert _refused(r) == {"gpuqueue: pod team-b/nct-low-1 is in pod set main of workload team-b/job-train, "
                                   "which has no admission"}
        else:
            assert chosen(r, placed)
            view.nodes.release("odd")  # never bound: its reservation let go
        # one pod admitted, a second one: Audit lets it through and holds its GPUs like any admitted pod's
        view.admit("team-b/train", GH, count=1, per_pod={"nvidia.com/gpu": 4})
        view.nodes.bind("first", "gh200-node-1", 4, job_key=job_uid("team-b/train"))
        second = job_pod(fixture(FILTER_NCT), uid="second")
        r = await ext.post("filter", second)
        if mode == "Strict":
            assert _refused(r) == {"gpuqueue: pod set main of workload team-b/job-train is admitted for 1 pod and "
                                   "1 already runs"}
        else:
            assert r["NodeNames"] == ["gh200-node-2"]  # kept to its flavor, where there is room
            assert view.nodes.pod_node("second") == ("gh200-node-2", False)
        reasons = [v.reason for v in view.violations]
        assert reasons == ([] if mode == "Off" else
                           ["no_workload", "workload_evicted", "workload_finished", "pod_set_not_admitted",
                            "pod_set_full"])
