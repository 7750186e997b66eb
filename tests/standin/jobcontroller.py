"""A tiny stand-in for the 1.24 job controller (off by default): it writes what the real one wrote in
shared/fixtures/k8s-1.24/job-lifecycle: the Suspended condition, startTime, pods for an unsuspended Job,
pod deletion on re-suspend, and Complete once enough pods Succeeded. Pods never run by themselves: call
`succeed_pods` (standing in for the kubelet) to finish them."""
from __future__ import annotations

import asyncio
import copy

from . import resources as R
from . import rules
from .loop import BackgroundLoop
from .registry import Cluster, Write


class JobController(BackgroundLoop):
    def __init__(self, cluster: Cluster, *, keep_start_time_on_suspend: bool = True):
        # 1.24 keeps status.startTime when a Job is suspended (fact 33); later releases clear it.
        self.cluster = cluster
        self.keep_start_time_on_suspend = keep_start_time_on_suspend
        self._dirty: set[tuple[str, str]] = set()
        self._wake = asyncio.Event()
        cluster.observers.append(self._on_write)

    def _on_write(self, write: Write) -> None:
        if write.resource is R.JOBS and write.verb != "job-controller":
            self._dirty.add((write.namespace, write.name))
        elif write.resource is R.PODS:
            for ref in write.new["metadata"].get("ownerReferences") or ():
                if ref.get("kind") == "Job" and ref.get("controller"):
                    self._dirty.add((write.namespace, ref["name"]))
        else:
            return
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                ns, name = self._dirty.pop()
                self.sync(ns, name)

    # --- the reconcile loop --------------------------------------------------------------------------

    def _pods(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]
        return [p for p in self.cluster.store.kind(R.PODS.storage_key).values()
                if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or ())]

    def sync(self, namespace: str, name: str) -> None:
        job = self.cluster.store.get(R.JOBS.storage_key, (namespace, name))
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        status = copy.deepcopy(job.get("status") or {})
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in status.get("conditions") or ()):
            return
        now = rules.fmt_time(rules.now())
        spec = job["spec"]
        pods = self._pods(job)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        active = [p for p in live if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        if spec.get("suspend"):
            for pod in active:
                self.cluster.delete(R.PODS, namespace, pod["metadata"]["name"], verb="job-controller")
            active = []
            _set_condition(status, "Suspended", "True", now, "JobSuspended", "Job suspended")
            if not self.keep_start_time_on_suspend:
                status.pop("startTime", None)
        else:
            if _condition(status, "Suspended", "True"):
                _set_condition(status, "Suspended", "False", now, "JobResumed", "Job resumed")
                status["startTime"] = now  # reset on every resume (fact 31)
            status.setdefault("startTime", now)
            completions = spec.get("completions") or spec.get("parallelism", 1)
            want = min(spec.get("parallelism", 1), completions - succeeded) - len(active)
            for _ in range(max(want, 0)):
                active.append(self._create_pod(job))
            if succeeded >= completions:
                status["conditions"] = list(status.get("conditions") or []) + [{
                    "type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}]
                status["completionTime"] = now
        if active:
            status["active"] = len(active)
        else:
            status.pop("active", None)
        if succeeded:
            status["succeeded"] = succeeded
        status["ready"] = sum(1 for p in active if _pod_ready(p))
        if status != job.get("status"):
            body = copy.deepcopy(job)
            body["status"] = status
            self.cluster.update(R.JOBS, namespace, name, body, subresource="status", verb="job-controller")

    def _create_pod(self, job: dict) -> dict:
        meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
        tmeta = template.get("metadata") or {}
        pod = {"metadata": {"generateName": f"{meta['name']}-", "labels": tmeta.get("labels") or {},
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                 "uid": meta["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": template.get("spec") or {}}
        if tmeta.get("annotations"):
            pod["metadata"]["annotations"] = tmeta["annotations"]
        return self.cluster.create(R.PODS, meta["namespace"], pod, verb="job-controller")

    # --- the kubelet's part, on request ----------------------------------------------------------------

    def succeed_pods(self, namespace: str, job_name: str, count: int | None = None, bound_only: bool = False) -> int:
        """Mark up to `count` active pods of the Job Succeeded via pods/status, as fixture 10 did.
        `bound_only`: only pods bound to a node, as a kubelet reports the end only of a pod it ran
        (with a scheduler binding pods; tests without one end pods that never had a node)."""
        job = self.cluster.store.get(R.JOBS.storage_key, (namespace, job_name))
        if job is None:
            return 0
        done = 0
        now = rules.fmt_time(rules.now())
        for pod in self._pods(job):
            if count is not None and done >= count:
                break
            if (pod.get("status") or {}).get("phase") not in ("Pending", "Running") or bound_only and not pod["spec"].get("nodeName"):
                continue
            body = copy.deepcopy(pod)
            body["status"] = {**(pod.get("status") or {}), "phase": "Succeeded", "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastProbeTime": None,
                 "lastTransitionTime": now}]}
            self.cluster.update(R.PODS, namespace, pod["metadata"]["name"], body, subresource="status",
                                verb="kubelet")
            done += 1
        return done


def _condition(status: dict, type_: str, value: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == value for c in status.get("conditions") or ())


def _set_condition(status: dict, type_: str, value: str, now: str, reason: str, message: str) -> None:
    conditions = list(status.get("conditions") or [])
    for i, c in enumerate(conditions):
        if c.get("type") == type_:
            if c.get("status") != value:
                conditions[i] = {"type": type_, "status": value, "lastProbeTime": now, "lastTransitionTime": now,
                                 "reason": reason, "message": message}
            break
    else:
        conditions.append({"type": type_, "status": value, "lastProbeTime": now, "lastTransitionTime": now,
                           "reason": reason, "message": message})
    status["conditions"] = conditions


def _pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())
