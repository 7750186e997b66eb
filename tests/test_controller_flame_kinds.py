"""The FLAME walkthrough through the controller with other kinds (tests/scenarios/flame-kinds.yaml,
which the simulator runs as FLAME in tests/test_simulate_kinds.py): team B's two Jobs, team C's four
borrowers as PyTorchJobs, team A's four reclaimers as JobSets. Borrowing, reclaim (two of C's
PyTorchJobs preempted for InCohortReclamation, their pods gone before A's run, their templates
restored), and C's automatic resume once A's JobSets complete - as with Jobs."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import yaml

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.kinds.managed_kinds import kind_of
from gpuqueue.jobframework.names import workload_name
from gpuqueue.jobframework.registry import BY_KIND, IntegrationsConfig
from tests.controller_support import FAST, Harness, eventually
from tests.kind_controllers import KindControllers, finish
from tests.workload_kinds import JOBSET, PYTORCHJOB

SCENARIO = Path(__file__).parent / "scenarios" / "flame-kinds.yaml"
GH200 = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
WORKLOADS = "workloads.kueue.x-k8s.io"
KINDS = ("PyTorchJob", "JobSet")


def load() -> tuple[list[dict], list[dict], list[dict]]:
    objects, workloads, later = [], [], []
    for doc in yaml.safe_load_all(SCENARIO.read_text()):
        if not doc:
            continue
        if doc["kind"] == "Scenario":
            later = [e["submit"] for e in doc.get("events") or () if "submit" in e]
        elif doc["kind"] in ("Job", *KINDS):
            workloads.append(doc)
        else:
            objects.append(doc)
    return objects, workloads, later


class Flame:
    def __init__(self, h: Harness) -> None:
        self.h = h
        self.uids: dict[tuple[str, str], str] = {}

    async def submit(self, obj: dict) -> None:
        """As the webhook leaves it: in the namespace's default LocalQueue, suspended."""
        if obj["kind"] == "Job":
            created = await self.h.submit(obj)
        else:
            integ = BY_KIND[obj["kind"]]
            body = copy.deepcopy(obj)
            body["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "default"
            body = integ.suspend(body) or body
            await self.h.namespace(body["metadata"]["namespace"])
            created = await self.h.kube.create(kind_of(integ), body["metadata"]["namespace"], body)
        self.uids[self.key(obj)] = created["metadata"]["uid"]

    @staticmethod
    def key(obj: dict) -> tuple[str, str]:
        return obj["metadata"]["namespace"], obj["metadata"]["name"]

    def obj(self, kind: str, key: tuple[str, str]) -> dict | None:
        k = kind_of(BY_KIND[kind])
        storage = "jobs" if kind == "Job" else f"{k.plural}.{k.group}"
        return self.h.api.cluster.store.get(storage, key)

    def running(self, kind: str, key: tuple[str, str]) -> bool:
        obj = self.obj(kind, key)
        return obj is not None and not BY_KIND[kind].is_suspended(obj)

    def workload(self, kind: str, key: tuple[str, str]) -> dict | None:
        integ = BY_KIND[kind]
        return self.h.api.cluster.store.get(WORKLOADS, (key[0], workload_name(kind, integ.group, key[1],
                                                                               self.uids[key])))

    def gpu_pods_of(self, name_prefix: str) -> list[dict]:
        return [p for p in self.h.api.cluster.store.kind("pods").values()
                if p["metadata"]["name"].startswith(name_prefix) and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


async def test_flame_with_pytorchjob_borrowers_and_jobset_reclaimers():
    objects, workloads, later = load()
    frameworks = ("batch/job", "kubeflow.org/pytorchjob", "jobset.x-k8s.io/jobset")
    async with Harness(pod_deletion_delay=0.2) as h:
        h.api.install_crds(*PYTORCHJOB.crds, *JOBSET.crds)
        for obj in objects:
            await h.apply(obj)
        await h.controller(dataclasses.replace(FAST, integrations=IntegrationsConfig(frameworks)))
        flame = Flame(h)
        async with KindControllers(h.kube, [PYTORCHJOB, JOBSET]) as stand_ins:
            # 1. B runs its 2 guaranteed GPUs, C's PyTorchJobs borrow 4
            for obj in workloads:
                await flame.submit(obj)
            b = [flame.key(o) for o in workloads if o["kind"] == "Job"]
            c = [flame.key(o) for o in workloads if o["kind"] == "PyTorchJob"]
            assert len(b) == 2 and len(c) == 4
            await eventually(lambda: all(h.running(*k) for k in b) and all(flame.running("PyTorchJob", k) for k in c),
                             what="B's Jobs and C's PyTorchJobs admitted")
            for k in c:
                wl = flame.workload("PyTorchJob", k)
                assert W.condition(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue group-c"
                assert wl["status"]["admission"]["podSetAssignments"] == [
                    {"name": "master", "flavors": {"nvidia.com/gpu": "gh200"},
                     "resourceUsage": {"nvidia.com/gpu": "1"}, "count": 1}]
                master = flame.obj("PyTorchJob", k)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
                assert master["nodeSelector"] == GH200
            await eventually(lambda: (h.cluster_queue("group-c").get("status") or {}).get("reservingWorkloads") == 4,
                             what="group-c reserving 4")
            await eventually(lambda: all(len(flame.gpu_pods_of(k[1])) == 1 for k in c), what="C's pods running")

            # 2. A's four JobSets reclaim: two of C's PyTorchJobs preempted, B untouched
            for obj in later:
                await flame.submit(obj)
            a = [flame.key(o) for o in later]
            assert len(a) == 4 and all(o["kind"] == "JobSet" for o in later)
            await eventually(lambda: all(flame.running("JobSet", k) for k in a), timeout=10,
                             what="A's JobSets admitted")
            victims = [k for k in c if not flame.running("PyTorchJob", k)]
            assert len(victims) == 2
            assert all(h.running(*k) for k in b)
            for k in victims:
                assert flame.gpu_pods_of(k[1]) == []  # gone before A's JobSets ran (the observer checks it too)
                await eventually(lambda: W.is_true(flame.workload("PyTorchJob", k), "Requeued"), what="requeued")
                wl = flame.workload("PyTorchJob", k)
                preempted = W.condition(wl, "Preempted")
                assert preempted["status"] == "True" and preempted["reason"] == "InCohortReclamation"
                assert preempted["message"].endswith("preemptor path: /flame/group-a; preemptee path: /flame/group-c")
                assert "admission" not in wl["status"]
                await eventually(lambda: "nodeSelector" not in flame.obj("PyTorchJob", k)["spec"][
                    "pytorchReplicaSpecs"]["Master"]["template"]["spec"], what="its own template restored")
            for k in a:
                wl = flame.workload("JobSet", k)
                assert wl["status"]["admission"]["podSetAssignments"][0]["name"] == "trainer"
                assert W.condition(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue group-a"

            # 3. A's JobSets complete: C's two come back by themselves
            await eventually(lambda: all(len(flame.gpu_pods_of(k[1])) == 1 for k in a), what="A's pods running")
            for k in a:
                for pod in flame.gpu_pods_of(k[1]):
                    await h.kube.replace(K.PODS, {**pod, "status": {**(pod.get("status") or {}),
                                                                    "phase": "Succeeded"}}, "status")
                await finish(h.kube, {**flame.obj("JobSet", k), "kind": "JobSet"}, JOBSET.finished_status)
            await eventually(lambda: all(W.is_true(flame.workload("JobSet", k), "Finished") for k in a),
                             what="A's Workloads finished")
            await eventually(lambda: all(flame.running("PyTorchJob", k) for k in c), timeout=10,
                             what="C's PyTorchJobs resumed")
            for k in victims:
                wl = flame.workload("PyTorchJob", k)
                assert W.is_true(wl, "QuotaReserved") and W.condition(wl, "Evicted")["status"] == "False"
            assert stand_ins.errors == []
        assert h.observer.violations == []
        await h.pods.held()
        assert not h.api.internal_errors
