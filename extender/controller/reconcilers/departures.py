"""Reservations of Jobs that are gone: a Job deleted (or replaced by a new one of its name) while
admitted, or a Workload holding a reservation that no tracked Job owns when a leader starts (its
Job deleted while no leader ran). The Job's pods may still run - deleted with its pods orphaned,
for as long as they like - so the engine keeps the reservation, under a key of its own
(job_state.departed_key, apart from any new Job of the name), until a live list shows none of
its pods. Then it is given back: a release, and the Workload deleted.

A departed reservation is no workload to admit or evict: workload_writes gives the engine's
decisions about it to `decided`."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

from gpuqueue.api.kueue import JOB_UID_LABEL
from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.core.equivalence import pod_sets_from_admission
from gpuqueue.extender.controller.kinds.managed_kinds import BATCH_JOB
from gpuqueue.extender.controller.core.job_state import JobState, Scheduling, departed_key
from gpuqueue.extender.controller.writes.jobs import JobSteering
from gpuqueue.extender.controller.client.kubeapi import KubeApi
from gpuqueue.extender.controller.writes.writes import Writes
from gpuqueue.extender.quota import decisions as d
from gpuqueue.extender.quota.model import Admission, WorkloadSpec
from gpuqueue.extender.quota.state import AdmittedWorkload

log = logging.getLogger("gpuqueue.controller")


class Departures:
    def __init__(self, sched: Scheduling, jobs: dict[str, JobState], kube: KubeApi, writes: Writes,
                 steering: JobSteering, mark_dirty: Callable[[], None], status_changed: Callable[[], None]) -> None:
        """`jobs`: the controller's tracked Jobs, where a departed reservation is kept too."""
        self.sched = sched
        self.jobs = jobs
        self.kube = kube
        self.writes = writes
        self.steering = steering
        self.mark_dirty = mark_dirty
        self.status_changed = status_changed

    def depart(self, st: JobState, w: AdmittedWorkload) -> None:
        """The admitted Job `st` is gone (the caller forgot it): its reservation `w` stays."""
        gone = dataclasses.replace(st, key=departed_key(st), phase="departed")
        self.sched.engine.restore_admitted(dataclasses.replace(w.spec, key=gone.key), w.admission, w.admitted_at[0])
        self.jobs[gone.key] = gone
        self._give_back_when_pods_gone(gone, w.admission.cluster_queue)

    def restore(self, wl: dict) -> None:
        """A new leader found `wl` holding a reservation that no Job it tracks owns."""
        meta = wl["metadata"]
        uid = (meta.get("labels") or {}).get(JOB_UID_LABEL) or next(
            (ref.get("uid", "") for ref in meta.get("ownerReferences") or () if ref.get("controller")), "")
        try:
            adm = W.admission_from_status(wl["status"]["admission"])
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("workload %s/%s has an unreadable admission: not counted: %s", meta["namespace"],
                        meta["name"], exc)
            return
        gone = JobState(key="", namespace=meta["namespace"], name=W.owner_job(wl) or meta["name"], uid=uid,
                        wl_name=meta["name"], created=W.parse_time(meta.get("creationTimestamp")) or time.time(),
                        phase="departed", maybe_reserved=True, queue_name=(wl.get("spec") or {}).get("queueName", ""),
                        kind=self.sched.kinds_by_kind.get(W.owner_ref(wl).get("kind", ""), BATCH_JOB))
        gone.key = departed_key(gone)
        reserved_at = W.parse_time((W.condition(wl, "QuotaReserved") or {}).get("lastTransitionTime")) or time.time()
        self.sched.engine.restore_admitted(spec_from_admission(gone, adm, wl), adm, reserved_at)
        self.jobs[gone.key] = gone
        log.info("workload %s/%s holds a reservation for a gone Job: counted until its pods are gone",
                 gone.namespace, gone.wl_name)
        self._give_back_when_pods_gone(gone, adm.cluster_queue)

    def decided(self, st: JobState, dec: d.Decision) -> None:
        """The engine preempted a departed reservation (its room goes to a preemptor, who waits
        for the pods: a release at the end of its chain, whose first write waits for them), or
        requeued and admitted it: either way it forgets it at once."""
        engine = self.sched.engine
        if engine is not None:
            engine.finish(dec.key)
        if isinstance(dec, (d.Preempted, d.Evicted)):
            self.writes.chain(st.key, _nothing, release=self.writes.release(dec.cluster_queue))

    def _give_back_when_pods_gone(self, gone: JobState, cluster_queue: str) -> None:
        async def wait():
            await self.steering.wait_stopped(gone)  # held: however long they take
            if self.jobs.get(gone.key) is not gone:
                return
            rid = self.writes.release(cluster_queue)
            del self.jobs[gone.key]
            if self.sched.engine is not None:
                self.sched.engine.finish(gone.key)
            self.mark_dirty()
            self.status_changed()
            log.info("the pods of gone Job %s/%s are gone: its reservation is given back", gone.namespace, gone.name)

            async def delete():
                await self.kube.delete(K.WORKLOADS, gone.namespace, gone.wl_name)

            self.writes.chain(gone.key, delete, release=rid)

        self.writes.chain(gone.key, wait)


def spec_from_admission(st: JobState, admission: Admission, wl: dict) -> WorkloadSpec:
    """The engine's view of a reservation with no readable Job: what it reserved (counts and
    per-pod amounts), at the Workload's priority."""
    return WorkloadSpec(key=st.key, namespace=st.namespace, queue_name=st.queue_name,
                        pod_sets=pod_sets_from_admission(admission),
                        priority=(wl.get("spec") or {}).get("priority") or 0, created=st.created, uid=st.uid)


async def _nothing() -> None:
    pass
