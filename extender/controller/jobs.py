"""Steering the Jobs of admitted and evicted Workloads: started with the admitted flavors'
nodeSelector and tolerations, suspended (a victim's quota counts until its pods are gone: see
wait_stopped), their own pod template restored, a Job running without a reservation suspended
again - and when the API refuses the new pod template, the quota given back.

What is particular to batch/v1 Jobs is BatchJob's; another kind (JobSet, PyTorchJob, ...) would
come as an adapter of the same shape.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

import orjson
from prometheus_client import Histogram
from pydantic import ValidationError

from gpuqueue.api import core
from gpuqueue.api.labelselector import LabelSelectorError, check_label_selector, selector_query

from gpuqueue.extender.controller import kinds as K
from gpuqueue.extender.controller import workload as W
from gpuqueue.extender.controller.equivalence import admission_mismatch
from gpuqueue.extender.controller.events import EventRecorder
from gpuqueue.extender.controller.job_state import JobState, Scheduling
from gpuqueue.extender.controller.kubeapi import KubeApi, is_status
from gpuqueue.extender.controller.records import WorkloadRecords, read_modify_write
from gpuqueue.extender.controller.writes import Writes
from gpuqueue.kube import Informer, object_key
from gpuqueue.extender.quota import convert
from gpuqueue.extender.quota.model import Admission, FlavorSpec, PodSetSpec
from gpuqueue.jobframework.managed import job_queue_name

log = logging.getLogger("gpuqueue.controller")
# The Job's UID on its pods, kept when the Job is deleted with its pods orphaned (which drops their
# ownerReferences): the legacy label and the one Kubernetes 1.27 added.
JOB_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")


class BatchJob:
    """A batch/v1 Job as the controller sees it (Kueue's GenericJob): its model for the engine,
    and the edits the steering makes. Each edit returns a new object, or None when the Job
    already is so, and leaves the one it is given as it was."""

    kind = K.JOBS

    def __init__(self) -> None:
        self._templates: dict[bytes, core.PodTemplateSpec] = {}

    def model(self, job: dict) -> core.Job:
        """The Job validated, its pod template validated once per distinct template: Jobs made
        from one template (most of them) share one model - validating each whole Job was a twelfth
        of the controller's CPU in bench/kueue_realtime.py - and the engine computes the pod set of
        a shared template once (convert.pod_set_from_template)."""
        spec = job.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        if not isinstance(template, dict):
            return core.Job.model_validate(job)
        key = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
        model = self._templates.get(key)
        if model is None:
            try:
                model = core.PodTemplateSpec.model_validate(template)
            except ValidationError:
                return core.Job.model_validate(job)  # raises, naming the field from the Job down
            if len(self._templates) >= 4096:
                self._templates.clear()
            self._templates[key] = model
        return core.Job.model_validate({**job, "spec": {**spec, "template": model}})

    def pod_sets(self, job: dict) -> tuple[PodSetSpec, ...]:
        """Its pod sets as the engine counts them (Kueue's PodSets): one, `main`, of
        min(parallelism, completions) pods of its template. Raises ValidationError or ValueError
        for a Job that cannot be read."""
        model = self.model(job)
        return (convert.pod_set_from_template(convert.MAIN_POD_SET, model.pod_count(), model.spec.template),)

    @staticmethod
    def queue_name(job: dict) -> str | None:
        return job_queue_name(job)

    @staticmethod
    def generation(job: dict) -> int:
        """Bumped by the API server on every change of the spec."""
        return int(job["metadata"].get("generation") or 0)

    @staticmethod
    def pod_owners(pod: dict) -> set[str]:
        """The UIDs of the Jobs a pod belongs to: its controller reference, or the Job's UID label
        once the Job is gone and the pod orphaned."""
        uids = {ref["uid"] for ref in pod["metadata"].get("ownerReferences") or ()
                if ref.get("controller") and ref.get("kind") == K.JOBS.kind and ref.get("uid")}
        if not uids:
            labels = pod["metadata"].get("labels") or {}
            uids = {labels[k] for k in JOB_UID_LABELS if labels.get(k)}
        return uids

    @staticmethod
    def run(job: dict, flavors: list[FlavorSpec]) -> dict | None:
        new = W.admitted_job(job, flavors)
        return None if new == job else new

    @staticmethod
    def suspend(job: dict) -> dict | None:
        return None if job["spec"].get("suspend") else W.suspended_job(job)

    @staticmethod
    def restore(job: dict) -> dict | None:
        if not job["spec"].get("suspend"):
            return None
        new = W.restored_job(job)
        return None if new == job else new

    @staticmethod
    def suspended(job: dict) -> bool:
        return bool(job["spec"].get("suspend"))

    @staticmethod
    def stopped(job: dict) -> bool:
        """Suspended, and its controller counts no active pod."""
        return bool(job["spec"].get("suspend")) and not (job.get("status") or {}).get("active")


class JobSteering:
    def __init__(self, sched: Scheduling, kube: KubeApi, jobs: Informer, workloads: WorkloadRecords, writes: Writes,
                 events: EventRecorder, admission_wait: Histogram, resubmit: Callable[[JobState], None],
                 mark_dirty: Callable[[], None], resubmit_backoff: float, adapter: BatchJob | None = None) -> None:
        """`resubmit`: queue a Job again after the API refused its pod template; `mark_dirty`:
        ask for a scheduling pass."""
        self.sched = sched
        self.kube = kube
        self.cache = jobs
        self.workloads = workloads
        self.writes = writes
        self.events = events
        self.admission_wait = admission_wait
        self.resubmit = resubmit
        self.mark_dirty = mark_dirty
        self.resubmit_backoff = resubmit_backoff
        self.adapter = adapter or BatchJob()
        self.pods_by_owner: dict[str, set[str]] = {}
        self._waiters: dict[str, asyncio.Event] = {}
        self.refused: list[str] = []  # keys whose new pod template the API refused (for tests/logs)
        self._stop_queued: set[str] = set()  # Jobs whose suspension (stop) is chained and not begun

    # -- pods -----------------------------------------------------------------------------------------------
    def on_pod(self, pod: dict) -> None:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self.on_pod_delete(pod)  # a terminated pod holds nothing
            return
        for uid in self._owners(pod):
            self.pods_by_owner.setdefault(uid, set()).add(object_key(pod))
            self.poke(uid)

    def on_pod_delete(self, pod: dict) -> None:
        for uid in self._owners(pod):
            pods = self.pods_by_owner.get(uid)
            if pods is not None:
                pods.discard(object_key(pod))
                if not pods:
                    del self.pods_by_owner[uid]
            self.poke(uid)

    def _owners(self, pod: dict) -> set[str]:
        return self.adapter.pod_owners(pod)

    def pods_gone(self, uid: str) -> bool:
        return not self.pods_by_owner.get(uid)

    def poke(self, uid: str) -> None:
        """The Job or one of its pods changed: whoever waits for it to stop looks again."""
        ev = self._waiters.get(uid)
        if ev is not None:
            ev.set()

    async def _wait_until(self, uid: str, predicate: Callable[[], bool]) -> None:
        ev = self._waiters.setdefault(uid, asyncio.Event())
        try:
            while not predicate():
                ev.clear()
                try:
                    await asyncio.wait_for(ev.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._waiters.pop(uid, None)

    # -- reads and read-modify-writes -------------------------------------------------------------------------
    def job(self, st: JobState) -> dict | None:
        return self.cache.get(st.key)

    async def _update(self, st: JobState, change: Callable[[dict], dict | None]) -> dict | None:
        """`change` returns a new object (an adapter's edit) and leaves the one it is given as it was."""
        def checked(job: dict) -> dict | None:
            if job["metadata"].get("uid") != st.uid:
                return None
            return change(job)

        try:
            return await read_modify_write(self.kube, self.adapter.kind, st.namespace, st.name, self.job(st), checked,
                                           protect=_as_is)
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise

    # -- running ----------------------------------------------------------------------------------------------
    def flavors(self, admission: Admission) -> list[FlavorSpec]:
        """The specs of the flavors an admission gives, as the engine holds them now."""
        engine = self.sched.engine
        return [engine.state.flavors[f] for f in sorted(set(admission.flavors_of(W.MAIN).values()))
                if f in engine.state.flavors] if engine else []

    async def unsuspend(self, st: JobState, admission: Admission, flavors: list[FlavorSpec], resumed: bool,
                        only_suspended: bool = False) -> None:
        def change(job: dict) -> dict | None:
            if only_suspended and not self.adapter.suspended(job):
                return None
            if not self.fits(job, admission):
                return None  # changed since it was admitted: the Job's own event evicts it
            return self.adapter.run(job, flavors)

        try:
            result = await self._update(st, change)
        except Exception as exc:
            if is_status(exc, 422):
                await self._refused(st, admission, exc)
                return
            raise
        if result is not None:
            created = st.created
            self.admission_wait.labels(admission.cluster_queue).observe(max(0.0, time.time() - created))
            self.events.event(st, "Resumed" if resumed else "Started",
                              f"Admitted by clusterQueue {admission.cluster_queue}")

    def fits(self, job: dict, admission: Admission) -> bool:
        """The Job's pods are what the admission reserved (equivalence.admission_mismatch)."""
        try:
            return admission_mismatch(self.adapter.pod_sets(job), admission) is None
        except (ValidationError, ValueError):
            return False

    async def _refused(self, st: JobState, admission: Admission, exc: Exception) -> None:
        """Kubernetes 1.24 lets a Job's pod template scheduling fields change only while it is
        suspended and has never started. Give the quota back, say why, and queue the Job again:
        its current template (still carrying the flavor it ran on) limits where it can go."""
        body = getattr(exc, "body", "") or ""
        log.warning("the API refused the pod template of %s for flavor(s) %s: %s", st.key,
                    admission.flavors_of(W.MAIN), body[:300])
        self.refused.append(st.key)
        engine = self.sched.engine
        rid = self.writes.release(admission.cluster_queue)
        if engine is not None:
            engine.finish(st.key)
        st.phase = "blocked"
        st.refusals += 1
        flavors = ", ".join(sorted(set(admission.flavors_of(W.MAIN).values())))
        message = (f"couldn't admit to flavor {flavors}: the API refused the change of the Job's pod template "
                   f"(its nodeSelector and tolerations may change only while it is suspended and has never "
                   f"started, Kubernetes 1.24); waiting for quota in a flavor its template already matches")

        async def give_back():
            await self.workloads.update(st, lambda wl: W.unreserved(wl, "Pending", message))
            st.maybe_reserved = False
            self.events.event(st, "AdmissionRefused", message, "Warning")

        self.writes.chain(st.key, give_back, release=rid)
        delay = min(60.0, self.resubmit_backoff * (2 ** (st.refusals - 1)))
        asyncio.get_running_loop().call_later(delay, self.resubmit, st)
        self.mark_dirty()

    def ensure_running(self, st: JobState, admission: Admission) -> None:
        """The Job of an admitted Workload must run: after a restart (the last leader may have
        died between the two writes), or when someone suspended it by hand."""
        flavors = self.flavors(admission)

        async def write():
            # The decision may not be written yet (its write waits for releases, and may be
            # abandoned): a Job is never started without its reservation in the API's record.
            wl = self.workloads.get(st)
            if not self.sched.leader or st.phase != "admitted" or not (wl and W.is_true(wl, "QuotaReserved")):
                return
            await self.unsuspend(st, admission, flavors, resumed=False, only_suspended=True)

        self.writes.chain(st.key, write)

    # -- stopping ---------------------------------------------------------------------------------------------
    def may_run(self, st: JobState) -> bool:
        """The Job may have pods: the engine holds its admission and the reservation's write has
        gone out (an admission waiting for its victims' pods to go has not)."""
        return st.phase == "admitted" and st.maybe_reserved and self.sched.jobs.get(st.key) is st

    def stop(self, st: JobState) -> None:
        """A managed Job running without a reservation - created unsuspended with no webhook in
        front, its Workload deleted, unsuspended by its owner while pending, while its admission
        waits for its victims' pods, or while it is evicted: suspend it, every time it is seen so
        (Kueue re-suspends on every reconcile). The suspension is judged again on the live Job
        (it may have been admitted meanwhile), in a chain of its own: an admission waiting for its
        releases or an eviction waiting for pods must not hold it up. A pending Job's pods count
        until they are gone (a release); an evicted one's are its eviction's to wait for."""
        if st.key in self._stop_queued:
            return  # one still waits for its turn: it judges the Job as it is then
        self._stop_queued.add(st.key)
        rid = self.writes.release(self._cluster_queue(st)) if st.phase in ("pending", "blocked") else None

        async def write():
            self._stop_queued.discard(st.key)
            changed = await self._update(st, lambda job: None if self.may_run(st) else self.adapter.suspend(job))
            if changed is not None and rid is not None:
                # until its pods are gone - or its owner starts it again after this suspension (a
                # later generation; the next stop takes over), or it is admitted meanwhile
                ours = self.adapter.generation(changed)
                await self.wait_stopped(st, held=False, done=lambda: self.may_run(st) or self._restarted(st, ours))

        task = self.writes.chain(st.key + "/stop", write, release=rid)
        task.add_done_callback(lambda _t, key=st.key: self._stop_queued.discard(key))  # cancelled, refused

    def _cluster_queue(self, st: JobState) -> str | None:
        """The ClusterQueue of the Job's LocalQueue (None: unknown). A Job its owner keeps starting
        then holds back only the admissions of that cohort tree, not the cluster's."""
        engine = self.sched.engine
        lq = engine.state.local_queues.get(f"{st.namespace}/{st.queue_name}") if engine is not None else None
        return lq.cluster_queue if lq is not None else None

    async def suspend(self, st: JobState) -> dict | None:
        return await self._update(st, self.adapter.suspend)

    async def wait_stopped(self, st: JobState, held: bool = True, done: Callable[[], bool] = lambda: False) -> None:
        """Until the Job is suspended (or gone) and its pods are gone - confirmed by a live list, not
        only the pod cache: 1.24's job controller sets `status.active` to 0 as soon as it marks the
        pods for deletion, and a pod watch that lags may never have shown them to us; clearing the
        reservation then would hand out GPUs that terminating pods still hold.

        `held`: the pods hold a reservation, so they are waited for even once the Job is no longer
        tracked (deleted with its pods orphaned, they run on uncounted otherwise). Else the wait
        ends when the Job is forgotten, or when `done()` says so."""
        pause = 0.05
        while True:
            await self._wait_until(st.uid, lambda: done() or self._stopped(st, held))
            if done() or (not held and self.sched.jobs.get(st.key) is not st) or not await self._live_pods(st):
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _live_pods(self, st: JobState) -> int:
        # The Job's own pods by its selector (every pod its controller counts matches it), not the
        # namespace's (issue 16); the whole namespace once the Job is gone or its selector unread.
        job = self.job(st)
        selector = (job.get("spec") or {}).get("selector") if job is not None and job["metadata"].get(
            "uid") == st.uid else None
        try:
            check_label_selector(selector)
            query = [("labelSelector", selector_query(selector))] if selector else None
        except LabelSelectorError:
            query = None
        listed = await self.kube.request("GET", K.PODS.path(st.namespace), query=query)
        return sum(1 for pod in listed.get("items") or ()
                   if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                   and st.uid in self.adapter.pod_owners(pod))

    def _restarted(self, st: JobState, after_generation: int) -> bool:
        """The Job was started again by a change made after `after_generation` (the cache may still
        show it as it was before our suspension)."""
        job = self.job(st)
        return (job is not None and job["metadata"].get("uid") == st.uid and not self.adapter.suspended(job)
                and self.adapter.generation(job) > after_generation)

    def _stopped(self, st: JobState, held: bool) -> bool:
        if not held and self.sched.jobs.get(st.key) is not st:
            return True
        job = self.job(st)
        if job is not None and job["metadata"].get("uid") == st.uid and not self.adapter.stopped(job):
            return False
        return self.pods_gone(st.uid)

    async def restore(self, st: JobState) -> None:
        """The Job's own pod template back (its scheduling fields as they were before admission)."""
        try:
            await self._update(st, self.adapter.restore)
        except Exception as exc:
            if not is_status(exc, 422):
                raise
            # 1.24 keeps startTime on suspend, so the template stays as admitted: the Job can only
            # come back on the same flavor (its nodeSelector says so to the engine).
            log.info("%s keeps its admitted pod template (the API refused the restore)", st.key)


def _as_is(obj: dict) -> dict:
    return obj
