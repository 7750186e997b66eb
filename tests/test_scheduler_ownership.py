"""Enforcement covers every kind: the extender (over TLS, asked as kube-scheduler asks) finds a
pod's Workload through its owners' UIDs and its pod set through its kind's integration, for each
kind gpuqueue queues. A pod of a multi-pod-set Workload lands only on its own pod set's flavor,
within its own pod set's count and per-pod requests; what its labels claim picks among the pod
sets of the one Workload its UIDs lead to, never another Workload's."""

from __future__ import annotations

import copy

import pytest

from gpuqueue.jobframework.unqueued import how_to_queue
from gpuqueue.extender.placement import FlavorSelector
from gpuqueue.extender.scheduler.ownership import count_key, membership
from gpuqueue.extender.scheduler.view import PENDING, WorkloadEntry
from tests.test_scheduler_extender import (FILTER_NCT, H100, GH200, fixture, mixed_cluster,  # noqa: F401 (pki)
                                           pki, running_extender)

GH200_FLAVOR = FlavorSelector.of("gh200", dict(GH200))
H100_FLAVOR = FlavorSelector.of("h100", dict(H100))
GH200_NODES = ["gh200-node-2", "gh200-node-1"]
H100_NODES = ["h100-node-3"]
NS = "team-b"  # the recorded pod's namespace


@pytest.fixture
async def ext(pki):
    async for e in running_extender(pki, mixed_cluster()):
        yield e


def pod(uid: str, owner: tuple[str, str, str] | None, labels: dict | None = None, annotations: dict | None = None,
        gpus: int = 1, namespace: str = NS) -> dict:
    """The recorded filter request, for a pod ``uid`` controlled by ``owner`` (kind, name, uid)."""
    body = copy.deepcopy(fixture(FILTER_NCT))
    meta = body["Pod"]["metadata"]
    meta.update(uid=uid, name=uid, namespace=namespace, labels=labels or {}, annotations=annotations or {})
    if owner is not None:
        kind, name, owner_uid = owner
        meta["ownerReferences"] = [{"apiVersion": "x/v1", "kind": kind, "name": name, "uid": owner_uid,
                                    "controller": True}]
    res = body["Pod"]["spec"]["containers"][0]["resources"]
    res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = str(gpus)
    return body


async def offered(ext, body) -> tuple[list[str] | None, str]:
    r = await ext.post("filter", body)
    reasons = sorted(set((r.get("FailedAndUnresolvableNodes") or {}).values()) | set((r.get("FailedNodes") or {}).values()))
    return r.get("NodeNames") or None, "; ".join(reasons)


# One case per kind: the owners between a pod and its Workload's owner, the Workload's pod sets
# (count, per-pod GPUs, flavor), and a pod of each pod set (labels, annotations, controller).
JOBSET = dict(
    owners=[("JobSet", "train", "js-uid", None), ("Job", "train-workers-0", "job-w0", "js-uid"),
            ("Job", "train-driver-0", "job-d0", "js-uid")],
    workload=("jobset-train-abcde", "js-uid"),
    pod_sets={"driver": (1, 1, H100_FLAVOR), "workers": (2, 4, GH200_FLAVOR)},
    pods={"driver": (("Job", "train-driver-0", "job-d0"), {"jobset.sigs.k8s.io/replicatedjob-name": "driver"}, {}),
          "workers": (("Job", "train-workers-0", "job-w0"), {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}, {})},
)
PYTORCHJOB = dict(
    owners=[("PyTorchJob", "bert", "ptj-uid", None)],
    workload=("pytorchjob-bert-abcde", "ptj-uid"),
    pod_sets={"master": (1, 1, H100_FLAVOR), "worker": (2, 4, GH200_FLAVOR)},
    pods={"master": (("PyTorchJob", "bert", "ptj-uid"), {"training.kubeflow.org/replica-type": "master"}, {}),
          "worker": (("PyTorchJob", "bert", "ptj-uid"), {"training.kubeflow.org/replica-type": "worker"}, {})},
)
MPIJOB = dict(
    owners=[("MPIJob", "ar", "mpi-uid", None), ("Job", "ar-launcher", "launcher-uid", "mpi-uid")],
    workload=("mpijob-ar-abcde", "mpi-uid"),
    pod_sets={"launcher": (1, 1, H100_FLAVOR), "worker": (2, 4, GH200_FLAVOR)},
    pods={"launcher": (("Job", "ar-launcher", "launcher-uid"), {"training.kubeflow.org/job-role": "launcher"}, {}),
          "worker": (("MPIJob", "ar", "mpi-uid"), {"training.kubeflow.org/job-role": "worker"}, {})},
)
TRAINJOB = dict(
    owners=[("TrainJob", "llama", "tj-uid", None), ("JobSet", "llama", "tjs-uid", "tj-uid"),
            ("Job", "llama-node-0", "tjob-uid", "tjs-uid"), ("Job", "llama-init-0", "tinit-uid", "tjs-uid")],
    workload=("trainjob-llama-abcde", "tj-uid"),
    pod_sets={"initializer": (1, 1, H100_FLAVOR), "node": (2, 4, GH200_FLAVOR)},
    pods={"initializer": (("Job", "llama-init-0", "tinit-uid"), {"jobset.sigs.k8s.io/replicatedjob-name": "initializer"}, {}),
          "node": (("Job", "llama-node-0", "tjob-uid"), {"jobset.sigs.k8s.io/replicatedjob-name": "node"}, {})},
)
RAYJOB = dict(
    owners=[("RayJob", "tune", "rj-uid", None), ("RayCluster", "tune-raycluster", "rc-uid", "rj-uid"),
            ("Job", "tune", "submit-uid", "rj-uid")],
    workload=("rayjob-tune-abcde", "rj-uid"),
    pod_sets={"head": (1, 1, H100_FLAVOR), "gpu-group": (2, 4, GH200_FLAVOR), "submitter": (1, 1, H100_FLAVOR)},
    pods={"head": (("RayCluster", "tune-raycluster", "rc-uid"), {"ray.io/node-type": "head", "ray.io/group": "headgroup"}, {}),
          "gpu-group": (("RayCluster", "tune-raycluster", "rc-uid"),
                        {"ray.io/node-type": "worker", "ray.io/group": "GPU-Group"}, {}),
          "submitter": (("Job", "tune", "submit-uid"), {}, {})},
)
RAYCLUSTER = dict(
    owners=[("RayCluster", "serve", "rcs-uid", None)],
    workload=("raycluster-serve-abcde", "rcs-uid"),
    pod_sets={"head": (1, 1, H100_FLAVOR), "gpu-group": (2, 4, GH200_FLAVOR)},
    pods={"head": (("RayCluster", "serve", "rcs-uid"), {"ray.io/node-type": "head"}, {}),
          "gpu-group": (("RayCluster", "serve", "rcs-uid"), {"ray.io/node-type": "worker", "ray.io/group": "gpu-group"}, {})},
)
GROUP = {"kueue.x-k8s.io/pod-group-name": "g"}
LWS = dict(  # the group Workload is owned by every pod of the group (and the LWS)
    owners=[("LeaderWorkerSet", "vllm", "lws-uid", None), ("StatefulSet", "vllm", "sts-leader", "lws-uid"),
            ("Pod", "vllm-0", "pod-leader", "sts-leader"), ("StatefulSet", "vllm-0", "sts-workers", "pod-leader")],
    workload=("leaderworkerset-vllm-0-abcde", "lws-uid"),
    members=True,
    pod_sets={"leader": (1, 1, H100_FLAVOR), "worker": (2, 4, GH200_FLAVOR)},
    pods={"leader": (("StatefulSet", "vllm", "sts-leader"), GROUP, {"kueue.x-k8s.io/role-hash": "leader"}),
          "worker": (("StatefulSet", "vllm-0", "sts-workers"), GROUP, {"kueue.x-k8s.io/role-hash": "worker"})},
)
POD_GROUP = dict(
    owners=[],
    workload=("sweep", None),
    members=True,
    pod_sets={"a1b2c3d4": (1, 1, H100_FLAVOR), "e5f6a7b8": (2, 4, GH200_FLAVOR)},
    pods={"a1b2c3d4": (None, GROUP, {"kueue.x-k8s.io/role-hash": "a1b2c3d4"}),
          "e5f6a7b8": (None, GROUP, {"kueue.x-k8s.io/role-hash": "e5f6a7b8"})},
)
KINDS = {"JobSet": JOBSET, "PyTorchJob": PYTORCHJOB, "MPIJob": MPIJOB, "TrainJob": TRAINJOB, "RayJob": RAYJOB,
         "RayCluster": RAYCLUSTER, "LeaderWorkerSet": LWS, "pod group": POD_GROUP}


def set_up(view, case: dict) -> dict[str, list[str]]:
    """The owners and the admitted Workload in the view; returns, per pod set, the uids of the
    pods a test may send (count + 1 of them, the last one too many)."""
    for kind, name, uid, controller in case["owners"]:
        view.add_owner(kind, f"{NS}/{name}", uid, controller)
    name, owner_uid = case["workload"]
    uids = {ps: [f"{ps}-pod-{i}" for i in range(count + 1)] for ps, (count, _, _) in case["pod_sets"].items()}
    members = frozenset(u for us in uids.values() for u in us) if case.get("members") else frozenset()
    view.admit_pod_sets(f"{NS}/{name}", owner_uid or "no-controller", {
        ps: (count, {"nvidia.com/gpu": gpus}, flavor) for ps, (count, gpus, flavor) in case["pod_sets"].items()},
        members=members)
    return uids


def body_of(case: dict, ps: str, uid: str, gpus: int | None = None) -> dict:
    owner, labels, annotations = case["pods"][ps]
    return pod(uid, owner, labels, annotations, gpus if gpus is not None else case["pod_sets"][ps][1])


@pytest.mark.parametrize("kind", KINDS)
async def test_each_pod_set_lands_on_its_own_flavor_within_its_own_count(ext, kind):
    case = KINDS[kind]
    uids = set_up(ext.view, case)
    for ps, (count, gpus, flavor) in case["pod_sets"].items():
        nodes = H100_NODES if flavor is H100_FLAVOR else GH200_NODES
        for uid in uids[ps][:count]:
            names, why = await offered(ext, body_of(case, ps, uid))
            assert names and set(names) <= set(nodes), (ps, why)
            ext.view.bind_pod(uid, nodes[0] if gpus == 1 else {0: "gh200-node-2", 1: "gh200-node-1"}[uids[ps].index(uid)])
        member = membership(ext.view, ext.view.pod(uids[ps][0]))
        assert member.pod_set == ps and count_key(ext.view, ext.view.pod(uids[ps][0])) == member.key
        # one pod more than the pod set's count: refused, and the other pod sets are not affected
        names, why = await offered(ext, body_of(case, ps, uids[ps][count]))
        wl = f"{NS}/{case['workload'][0]}"
        assert (names, why) == (None, f"gpuqueue: pod set {ps} of workload {wl} is admitted for {count} "
                                      f"pod{'' if count == 1 else 's'} and {count} already run{'s' if count == 1 else ''}")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_pod_claiming_another_pod_set_is_held_to_that_one(ext, kind):
    case = KINDS[kind]
    uids = set_up(ext.view, case)
    small = list(case["pod_sets"])[0]
    greedy = uids[small][0]
    # a pod of the small pod set asking for the big pod set's GPUs
    names, why = await offered(ext, body_of(case, small, greedy, gpus=4))
    assert names is None and why == (f"gpuqueue: pod {NS}/{greedy} requests 4 nvidia.com/gpu but pod set {small} of "
                                     f"workload {NS}/{case['workload'][0]} is admitted for 1 per pod")


@pytest.mark.parametrize("kind", [k for k in KINDS if not KINDS[k].get("members")])
async def test_a_pod_that_names_no_pod_set_is_refused(ext, kind):
    case = KINDS[kind]
    set_up(ext.view, case)
    ps = [p for p in case["pods"] if case["pods"][p][1]][-1]  # a pod set its pods are labelled into
    owner, _, _ = case["pods"][ps]
    names, why = await offered(ext, pod("unlabelled", owner, {}, {}, 1))
    assert names is None and why == f"gpuqueue: pod {NS}/unlabelled names no pod set of workload {NS}/{case['workload'][0]}"


async def test_a_pod_with_the_group_label_that_is_not_a_member_is_nobodys(ext):
    """The group's Workload lists its pods by UID: another pod carrying the group's label and a
    role hash (a tenant's, or one more than the group counts) belongs to no Workload."""
    set_up(ext.view, POD_GROUP)
    names, why = await offered(ext, pod("intruder", None, GROUP, {"kueue.x-k8s.io/role-hash": "e5f6a7b8"}, 4))
    assert names is None and why == ("gpuqueue: pod team-b/intruder requests nvidia.com/gpu but belongs to no "
                                     f"admitted workload; {how_to_queue('team-b')}")


async def test_a_pod_group_member_of_another_namespace_is_nobodys(ext):
    set_up(ext.view, POD_GROUP)
    names, why = await offered(ext, pod("e5f6a7b8-pod-0", None, GROUP, {"kueue.x-k8s.io/role-hash": "e5f6a7b8"},
                                        4, namespace="team-a"))
    assert names is None and why.split(";")[0].endswith("belongs to no admitted workload")


async def test_a_pending_workload_of_any_kind_holds_its_pods(ext):
    ext.view.add_owner("JobSet", f"{NS}/train", "js-uid")
    ext.view.add_owner("Job", f"{NS}/train-workers-0", "job-w0", "js-uid")
    ext.view.put_workload(WorkloadEntry(NS, "jobset-train-abcde", "js-uid", PENDING,
                                        "couldn't assign flavors to pod set workers: insufficient unused quota for "
                                        "nvidia.com/gpu in flavor gh200, 4 more needed"))
    names, why = await offered(ext, pod("w", ("Job", "train-workers-0", "job-w0"),
                                        {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}))
    assert names is None and why == ("couldn't assign flavors to pod set workers: insufficient unused quota for "
                                     "nvidia.com/gpu in flavor gh200, 4 more needed")


async def test_a_job_owned_by_a_jobset_of_another_namespace_leads_nowhere(ext):
    ext.view.add_owner("JobSet", "team-a/train", "js-uid")
    ext.view.add_owner("Job", f"{NS}/train-workers-0", "job-w0", "js-uid")
    ext.view.admit_pod_sets("team-a/jobset-train-abcde", "js-uid", {"workers": (8, {"nvidia.com/gpu": 4}, GH200_FLAVOR)})
    names, why = await offered(ext, pod("w", ("Job", "train-workers-0", "job-w0"),
                                        {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}))
    assert names is None and why.split(";")[0].endswith("belongs to no admitted workload")
