"""The quota as a promise about GPUs on nodes, checked on every write the API server stand-in
commits (so at every instant the API passes through, not only at the end):

1. every pod that runs (bound to a node, not terminated) and requests GPUs, outside the exempt
   namespaces, belongs to a workload whose Workload holds a quota reservation;
2. a workload runs no more pods than its pod set was admitted for, none asking for more GPUs
   than the admission gave each pod;
3. the GPUs of running pods, summed per cohort over its ClusterQueues (and per ClusterQueue
   outside cohorts), never exceed the cohort's quota.

A pod belongs to the workload it started under: the one owned by the first of its controller
owners (walking up ownerReferences through the objects the API holds) that owns a Workload, when
the pod is first seen running.

Beside it, liveness (``PodLiveness``): whenever an admitted workload's pods fit on its flavor's
nodes, they are all bound within ``LIVENESS_BOUND`` seconds of the stand-in scheduler's clock.

tests/controller_support.py's PodObserver is the same promise for harnesses without a scheduler
(every pod of an unsuspended Job counts as running there); this one needs tests/standin/
scheduler.py, so that "runs" means bound by a scheduler that asked the extender.
"""
from __future__ import annotations

from collections import defaultdict

from gpuqueue.api.quantity import parse_engine_int

from tests.standin import resources as R
from tests.standin.registry import Cluster, Write
from tests.standin.scheduler import Scheduler, pod_requests, pod_runs

GPU = "nvidia.com/gpu"
# kube-scheduler's first attempt, the extender's wait for its caches (<= 1 s) and the binding: a
# pod that misses it was parked (backoff, or the unschedulable pods) on the way
LIVENESS_BOUND = 2.0
EXEMPT = frozenset({"kube-system", "gpuqueue-system", "gpu-operator", "nvidia-gpu-operator"})
_OWNER_KINDS = (R.JOBS,)


def _controller_uid(obj: dict) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return ref.get("uid")
    return None


def _true(wl: dict, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in (wl.get("status") or {}).get("conditions") or ())


def _reserved(wl: dict) -> bool:
    return _true(wl, "QuotaReserved") and bool((wl.get("status") or {}).get("admission"))


def _quota(obj: dict) -> int:
    return sum(parse_engine_int(GPU, r["nominalQuota"]) for rg in (obj.get("spec") or {}).get("resourceGroups") or ()
               for f in rg.get("flavors") or () for r in f.get("resources") or () if r.get("name") == GPU)


class PodInvariant:
    """A pod belongs to the workload whose reservation it started under: the one its controller
    owners lead to when it is first seen running. It counts against that reservation until it is
    gone, also when the Workload itself is deleted first (a deleted Job's Workload is collected
    while its pods still terminate): the reservation it ran under stays the one it is judged by."""

    def __init__(self, cluster: Cluster, exempt: frozenset[str] = EXEMPT) -> None:
        self.cluster = cluster
        self.exempt = exempt
        self.violations: list[str] = []
        self.checks = 0
        self.peak_running_gpus = 0
        self.started_under: dict[str, str] = {}  # pod uid -> uid of the Workload it started under
        self.last_reserved: dict[str, dict] = {}  # Workload uid -> the Workload as last seen reserved
        cluster.observers.append(self)

    def __call__(self, write: Write) -> None:
        if write.resource in (R.PODS, R.WORKLOADS):
            self.check(f"rv {write.rv} ({write.verb} {write.resource.kind} {write.namespace}/{write.name})")

    def _kind(self, rt) -> list[dict]:
        return list(self.cluster.store.kind(rt.storage_key).values())

    def _owner_workload(self, pod: dict, workloads: dict, owners: dict) -> dict | None:
        wl, uid, seen = None, _controller_uid(pod), set()
        while uid is not None and uid not in seen and wl is None:
            seen.add(uid)
            wl = workloads.get(uid)
            uid = owners.get(uid)
        return wl

    def check(self, when: str) -> None:
        self.checks += 1
        live = {w["metadata"]["uid"]: w for w in self._kind(R.WORKLOADS)}
        for uid, wl in live.items():
            if _reserved(wl):
                self.last_reserved[uid] = wl
        by_owner = {_controller_uid(w): w for w in live.values() if _controller_uid(w) and not _true(w, "Finished")}
        owners = {o["metadata"]["uid"]: _controller_uid(o) for rt in _OWNER_KINDS for o in self._kind(rt)}
        running: dict[str, list[dict]] = defaultdict(list)  # workload uid -> its running GPU pods
        total = 0
        for pod in self._kind(R.PODS):
            gpus = pod_requests(pod).get(GPU, 0)
            if not gpus or not pod_runs(pod):
                continue
            total += gpus
            if pod["metadata"]["namespace"] in self.exempt:
                continue
            name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            wl_uid = self.started_under.get(pod["metadata"]["uid"])
            if wl_uid is None:
                wl = self._owner_workload(pod, by_owner, owners)
                if wl is None or not _reserved(wl):
                    self.violations.append(f"{when}: pod {name} runs {gpus} GPUs without an admitted workload"
                                           f" ({'none' if wl is None else wl['metadata']['name']})")
                    continue
                wl_uid = self.started_under[pod["metadata"]["uid"]] = wl["metadata"]["uid"]
            wl = live.get(wl_uid)
            if wl is not None and not _reserved(wl):
                self.violations.append(f"{when}: pod {name} runs {gpus} GPUs after the reservation of "
                                       f"{wl['metadata']['name']} it started under was cleared")
                continue
            running[wl_uid].append(pod)
        self.peak_running_gpus = max(self.peak_running_gpus, total)
        usage: dict[str, int] = defaultdict(int)  # ClusterQueue -> GPUs of its running pods
        for uid, pods in running.items():
            wl = live.get(uid) or self.last_reserved[uid]
            adm = wl["status"]["admission"]
            psa = (adm.get("podSetAssignments") or [{}])[0]
            count = psa.get("count") or 0
            per_pod = parse_engine_int(GPU, (psa.get("resourceUsage") or {}).get(GPU, "0")) // max(count, 1)
            name = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
            if len(pods) > count:
                self.violations.append(f"{when}: workload {name} runs {len(pods)} pods, admitted for {count}")
            for pod in pods:
                gpus = pod_requests(pod).get(GPU, 0)
                if gpus > per_pod:
                    self.violations.append(f"{when}: pod {pod['metadata']['name']} of {name} runs {gpus} GPUs, "
                                           f"admitted {per_pod} per pod")
                usage[adm.get("clusterQueue", "")] += gpus
        self._check_cohorts(when, usage)

    def _check_cohorts(self, when: str, usage: dict[str, int]) -> None:
        capacity: dict[str, int] = defaultdict(int)
        used: dict[str, int] = defaultdict(int)
        for cq in self._kind(R.CLUSTER_QUEUES):
            group = (cq.get("spec") or {}).get("cohortName") or (cq.get("spec") or {}).get("cohort")
            group = f"cohort {group}" if group else f"ClusterQueue {cq['metadata']['name']}"
            capacity[group] += _quota(cq)
            used[group] += usage.get(cq["metadata"]["name"], 0)
        for cohort in self._kind(R.COHORTS):
            capacity[f"cohort {cohort['metadata']['name']}"] += _quota(cohort)
        for group, gpus in used.items():
            if gpus > capacity[group]:
                self.violations.append(f"{when}: {group} runs {gpus} GPUs on a quota of {capacity[group]}")


def _admission(wl: dict) -> tuple[int, int, list[str]]:
    """(admitted pod count, GPUs per pod, flavor names) of pod set main."""
    psa = ((wl["status"]["admission"].get("podSetAssignments")) or [{}])[0]
    count = psa.get("count") or 0
    per_pod = parse_engine_int(GPU, (psa.get("resourceUsage") or {}).get(GPU, "0")) // max(count, 1)
    return count, per_pod, sorted(set((psa.get("flavors") or {}).values()))


class PodLiveness:
    """A pod is owed a node while its workload holds quota (reserved, not being evicted, not
    finished), the workload runs fewer pods than admitted (its oldest pending pods are owed the
    rest), the pod asks for no more GPUs per pod than admitted, and some node of the admitted
    flavors fits it beside the pods running there. From the moment it becomes owed (scheduler
    clock), it must be bound within ``bound``; ``waits`` are the owed-to-bound times seen."""

    def __init__(self, cluster: Cluster, scheduler: Scheduler, bound: float = LIVENESS_BOUND,
                 exempt: frozenset[str] = EXEMPT) -> None:
        self.cluster, self.scheduler, self.bound, self.exempt = cluster, scheduler, bound, exempt
        self.owed_since: dict[str, float] = {}  # pod uid -> since when it is owed a node
        self.names: dict[str, str] = {}
        self.waits: list[float] = []
        self.violations: list[str] = []
        self._late: set[str] = set()
        cluster.observers.append(self)

    def __call__(self, write: Write) -> None:
        if write.resource in (R.PODS, R.WORKLOADS, R.NODES):
            self.check(f"rv {write.rv} ({write.verb} {write.resource.kind} {write.namespace}/{write.name})")

    @property
    def worst(self) -> float:
        return max(self.waits, default=0.0)

    def check(self, when: str) -> None:
        now = self.scheduler.clock.now()
        owed = self.owed()
        for uid in [u for u in self.owed_since if u not in owed]:
            since = self.owed_since.pop(uid)
            bound_at = self.scheduler.bound_at.get(uid)
            if bound_at is not None:
                self.waits.append(bound_at - since)
                if bound_at - since > self.bound and uid not in self._late:
                    self.violations.append(f"{when}: pod {self.names[uid]} was bound {bound_at - since:.1f} s "
                                           f"after it was owed a node (bound {self.bound} s)")
        for uid, name in owed.items():
            since = self.owed_since.setdefault(uid, now)
            self.names[uid] = name
            if now - since > self.bound and uid not in self._late:
                self._late.add(uid)
                why = self.scheduler.unschedulable.get(uid, "never tried")
                self.violations.append(f"{when}: pod {name} is still unbound {now - since:.1f} s after it was owed "
                                       f"a node (bound {self.bound} s); last failure: {why}")

    def owed(self) -> dict[str, str]:
        """The pods owed a node now: uid -> namespace/name."""
        kind = lambda rt: list(self.cluster.store.kind(rt.storage_key).values())  # noqa: E731
        workloads = {_controller_uid(w): w for w in kind(R.WORKLOADS)
                     if _controller_uid(w) and _reserved(w) and not _true(w, "Evicted") and not _true(w, "Finished")}
        owners = {o["metadata"]["uid"]: _controller_uid(o) for rt in _OWNER_KINDS for o in kind(rt)}
        running: dict[str, int] = defaultdict(int)
        pending: dict[str, list[dict]] = defaultdict(list)
        for pod in kind(R.PODS):
            if pod["metadata"]["namespace"] in self.exempt:
                continue
            uid, seen, wl = _controller_uid(pod), set(), None
            while uid is not None and uid not in seen and wl is None:
                seen.add(uid)
                wl = workloads.get(uid)
                uid = owners.get(uid)
            if wl is None:
                continue
            if pod_runs(pod):
                running[wl["metadata"]["uid"]] += 1
            elif self.scheduler._ours(pod):
                pending[wl["metadata"]["uid"]].append(pod)
        flavors = {f["metadata"]["name"]: f for f in kind(R.RESOURCE_FLAVORS)}
        node_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in kind(R.NODES)}
        by_uid = {w["metadata"]["uid"]: w for w in workloads.values()}
        out = {}
        for wl_uid, pods in pending.items():
            count, per_pod, names = _admission(by_uid[wl_uid])
            labels: dict[str, str] = {}
            for name in names:
                labels.update(((flavors.get(name) or {}).get("spec") or {}).get("nodeLabels") or {})
            pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))
            for pod in pods[:max(count - running[wl_uid], 0)]:
                requests = pod_requests(pod)
                if requests.get(GPU, 0) > per_pod or not any(
                        all(node_labels.get(n, {}).get(k) == v for k, v in labels.items())
                        for n in self.scheduler._feasible(pod, requests)[0]):
                    continue
                out[pod["metadata"]["uid"]] = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        return out
