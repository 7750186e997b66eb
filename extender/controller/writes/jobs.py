"""Steering the Jobs of admitted and evicted Workloads: started with the admitted flavors'
nodeSelector and tolerations, suspended (a victim's quota counts until its pods are gone: see
wait_stopped), their own pod template restored, a Job running without a reservation suspended
again - and when the API refuses the new pod template, the quota given back.

What is particular to a kind is its ManagedKind's (managed_kinds.py, over the integration of
gpuqueue/jobframework/).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from prometheus_client import Histogram
from pydantic import ValidationError

from gpuqueue.api.labelselector import LabelSelectorError, check_label_selector, selector_query

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.writes import parked_pods
from gpuqueue.extender.controller.core import workload as W
from gpuqueue.extender.controller.core.equivalence import admission_mismatch
from gpuqueue.extender.controller.writes.events import EventRecorder
from gpuqueue.extender.controller.core.job_state import JobState, Scheduling
from gpuqueue.extender.controller.client.kubeapi import KubeApi, is_status
from gpuqueue.extender.controller.kinds.managed_kinds import PodOwners, pod_set_infos
from gpuqueue.extender.controller.kinds.pod_groups import PodGroupKind
from gpuqueue.extender.controller.writes.records import WorkloadRecords, read_modify_write
from gpuqueue.extender.controller.writes.writes import Writes
from gpuqueue.kube import Informer, object_key
from gpuqueue.extender.quota.model import Admission
from gpuqueue.jobframework.kinds import pods as P
from gpuqueue.jobframework.podset import PodSetInfo

log = logging.getLogger("gpuqueue.controller")
# gpuqueue's own reason (Kueue keeps retrying the refused start): the Event's, and the Evicted
# condition's while the quota is given back
ADMISSION_REFUSED = "AdmissionRefused"


class JobSteering:
    def __init__(self, sched: Scheduling, kube: KubeApi, informers: dict[str, Informer], workloads: WorkloadRecords,
                 writes: Writes, events: EventRecorder, admission_wait: Histogram,
                 resubmit: Callable[[JobState], None], mark_dirty: Callable[[], None], resubmit_backoff: float,
                 owners: PodOwners | None = None) -> None:
        """`informers`: the controller's, by name (each kind's objects under its Kind.name);
        `owners`: which objects a pod belongs to (default: its Job); `resubmit`: queue a Job
        again after the API refused its pod template; `mark_dirty`: ask for a scheduling pass."""
        self.sched = sched
        self.kube = kube
        self.informers = informers
        self.owners = owners or PodOwners({"Job": informers["jobs"]})
        self.workloads = workloads
        self.writes = writes
        self.events = events
        self.admission_wait = admission_wait
        self.resubmit = resubmit
        self.mark_dirty = mark_dirty
        self.resubmit_backoff = resubmit_backoff
        self.pods_by_owner: dict[str, set[str]] = {}
        self._indexed: dict[str, set[str]] = {}  # pod key -> the owners it is counted under
        self._waiters: dict[str, set[asyncio.Event]] = {}  # Job uid -> the waits for it to stop, one event each
        self.refused: list[str] = []  # keys whose new pod template the API refused (for tests/logs)
        self._stop_queued: set[str] = set()  # Jobs whose suspension (stop) is chained and not begun
        self._deleting_excess: set[str] = set()  # uids of a group's excess pods being deleted

    # -- pods -----------------------------------------------------------------------------------------------
    def on_pod(self, pod: dict) -> None:
        if P.ended(pod):
            self.on_pod_delete(pod)  # a pod that ended holds nothing
            return
        key = object_key(pod)
        # every owner it was ever seen under: its chain may break later (a RayJob's RayCluster deleted
        # before its pods), and its end must still reach the owners at the top
        uids = self._indexed.setdefault(key, set())
        uids |= self._owners(pod)
        for uid in uids:
            self.pods_by_owner.setdefault(uid, set()).add(key)
            self.poke(uid)

    def on_pod_delete(self, pod: dict) -> None:
        key = object_key(pod)
        for uid in self._indexed.pop(key, set()) | self._owners(pod):
            pods = self.pods_by_owner.get(uid)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self.pods_by_owner[uid]
            self.poke(uid)

    def _owners(self, pod: dict) -> set[str]:
        return self.owners.uids(pod)

    async def retry_parked(self, st: JobState, admission: Admission) -> int:
        """The Job's pods that kube-scheduler parked before this admission, or while no leader
        ran (parked_pods.py): as many as the admission leaves room for beside its pods already
        bound, so a tenant's extra pods cost no write each. How many were written."""
        if "pods" not in self.informers or st.kind.deletes_to_stop:
            return 0
        pods = self.pods_of(st.uid)
        bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName") and not P.ended(p))
        room = sum(admission.counts.values()) - bound
        if room <= 0:
            return 0
        return await parked_pods.retry(self.kube, pods, limit=room)

    def pods_of(self, uid: str) -> list[dict]:
        """The pods counted under owner ``uid``, as the pod cache has them."""
        cache = self.informers.get("pods")
        if cache is None:
            return []
        return [p for p in (cache.get(key) for key in sorted(self.pods_by_owner.get(uid, ()))) if p is not None]

    def pods_gone(self, uid: str) -> bool:
        return not self.pods_by_owner.get(uid)

    def poke(self, uid: str) -> None:
        """The Job or one of its pods changed: whoever waits for it to stop looks again."""
        for ev in self._waiters.get(uid, ()):
            ev.set()

    async def _wait_until(self, uid: str, predicate: Callable[[], bool]) -> None:
        # an event of its own: a wait ending must not take away the wake-ups of another on the same Job
        ev = asyncio.Event()
        self._waiters.setdefault(uid, set()).add(ev)
        try:
            while not predicate():
                ev.clear()
                try:
                    async with asyncio.timeout(1.0):  # not wait_for: on 3.11 it can lose a cancellation
                        await ev.wait()
                except TimeoutError:
                    pass
        finally:
            waits = self._waiters[uid]
            waits.discard(ev)
            if not waits:
                del self._waiters[uid]

    # -- reads and read-modify-writes -------------------------------------------------------------------------
    def job(self, st: JobState) -> dict | None:
        return st.kind.cached(self.informers).get(f"{st.namespace}/{st.name}")

    async def _update(self, st: JobState, change: Callable[[dict], dict | None]) -> dict | None:
        """`change` returns a new object (an adapter's edit) and leaves the one it is given as it was."""
        def checked(job: dict) -> dict | None:
            if job["metadata"].get("uid") != st.uid:
                return None
            return change(job)

        if isinstance(st.kind, PodGroupKind):
            return await self._update_group(st, change)
        cached = None if st.kind.deletes_to_stop else self.job(st)  # a pod's cached copy is trimmed
        try:
            return await read_modify_write(self.kube, st.kind.kind, st.namespace, st.name, cached, checked,
                                           protect=_as_is)
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise

    async def _update_group(self, st: JobState, change: Callable[[dict], dict | None]) -> dict | None:
        """A group's edit is judged on its cached pods, then written to each pod from a live read
        (run: each ungated with its role's flavor)."""
        group = self.job(st)
        new = change(group) if group is not None and group["metadata"].get("uid") == st.uid else None
        if new is None:
            return None
        wrote = None
        for pod in st.kind.counted(group):
            uid = pod["metadata"]["uid"]

            def edit(live: dict, uid=uid) -> dict | None:
                return st.kind.run_pod(live, new["infos"]) if live["metadata"].get("uid") == uid else None
            try:
                wrote = await read_modify_write(self.kube, K.PODS, st.namespace, pod["metadata"]["name"], None,
                                                edit) or wrote
            except Exception as exc:
                if not is_status(exc, 404):
                    raise
        return wrote

    # -- running ----------------------------------------------------------------------------------------------
    def flavors(self, admission: Admission) -> dict[str, PodSetInfo]:
        """What each admitted pod set's pods get: its own flavors' nodeSelector and tolerations, as
        the engine holds the flavors now."""
        engine = self.sched.engine
        return pod_set_infos(admission, engine.state.flavors) if engine else {}

    async def unsuspend(self, st: JobState, admission: Admission, flavors: dict[str, PodSetInfo], resumed: bool,
                        only_suspended: bool = False) -> None:
        def change(job: dict) -> dict | None:
            if only_suspended and not st.kind.held(job):
                return None
            if not self.fits(st, job, admission):
                return None  # changed since it was admitted: the Job's own event evicts it
            return st.kind.run(job, flavors)

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

    def fits(self, st: JobState, job: dict, admission: Admission) -> bool:
        """The Job's pods are what the admission reserved (equivalence.admission_mismatch)."""
        try:
            return admission_mismatch(st.kind.pod_sets(job), admission) is None
        except (ValidationError, ValueError):
            return False

    async def _refused(self, st: JobState, admission: Admission, exc: Exception) -> None:
        """Kubernetes 1.24 lets a Job's pod template scheduling fields change only while it is
        suspended and has never started. Give the quota back, say why, and queue the Job again:
        its current template (still carrying the flavor it ran on) limits where it can go."""
        body = getattr(exc, "body", "") or ""
        log.warning("the API refused the pod template of %s for flavor(s) %s: %s", st.key,
                    admission.flavors, body[:300])
        self.refused.append(st.key)
        engine = self.sched.engine
        rid = self.writes.release(admission.cluster_queue)
        if engine is not None:
            engine.finish(st.key)
        st.phase = "blocked"
        st.refusals += 1
        flavors = ", ".join(sorted({f for by_res in admission.flavors.values() for f in by_res.values()}))
        message = (f"couldn't admit to flavor {flavors}: the API refused the change of the Job's pod template "
                   f"(its nodeSelector and tolerations may change only while it is suspended and has never "
                   f"started, Kubernetes 1.24); waiting for quota in a flavor its template already matches")

        async def give_back():
            # Its owner may have started it (that is why the API refuses): pods waiting for a node
            # got one as soon as the reservation was in the extender's cache. As an eviction: the
            # extender refuses them first, the quota is given back once they are gone.
            await self.workloads.mark_evicted(st, ADMISSION_REFUSED, message)
            await self.suspend(st)
            await self.wait_stopped(st, fenced=lambda: self.workloads.refuses_pods(st))
            await self.workloads.update(st, lambda wl: W.unreserved(wl, "Pending", message))
            st.maybe_reserved = False
            self.events.event(st, ADMISSION_REFUSED, message, "Warning")

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
            changed = await self._halt(st, unless=lambda: self.may_run(st))
            if changed is not None and rid is not None:
                # until its pods are gone - or its owner starts it again after this suspension (a
                # later generation; the next stop takes over), or it is admitted meanwhile
                ours = st.kind.generation(changed)
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
        return await self._halt(st)

    async def _halt(self, st: JobState, unless: Callable[[], bool] = lambda: False) -> dict | None:
        """Suspended - or, for a kind that cannot be (a pod), deleted, as Kueue stops a pod. Returns
        the object as written, None when nothing was (`unless()` true, already so, or gone)."""
        if not st.kind.deletes_to_stop:
            return await self._update(st, lambda job: None if unless() else st.kind.suspend(job))
        live = self.job(st)
        if unless() or live is None or live["metadata"].get("uid") != st.uid:
            return None
        deleted = None
        for pod in st.kind.members(live):
            if not pod["metadata"].get("deletionTimestamp"):
                deleted = await self.kube.delete(K.PODS, st.namespace, pod["metadata"]["name"],
                                                 uid=pod["metadata"]["uid"]) or deleted
        return deleted

    def delete_excess(self, pods: list[dict]) -> None:
        """A group's pods beyond its total count, deleted as Kueue deletes them (the newest); each
        then loses Kueue's finalizer once it has ended (`pods.ended`, `releasable`)."""
        for pod in pods:
            meta = pod["metadata"]
            uid = meta.get("uid", "")
            if not uid or uid in self._deleting_excess or meta.get("deletionTimestamp"):
                continue
            self._deleting_excess.add(uid)

            async def write(meta=meta, uid=uid):
                try:
                    await self.kube.delete(K.PODS, meta["namespace"], meta["name"], uid=uid)
                finally:
                    self._deleting_excess.discard(uid)

            # not in the group's chain: a slow deletion must not hold up its admission
            if self.writes.spawn(write()).done():  # refused: this replica does not lead
                self._deleting_excess.discard(uid)

    async def wait_stopped(self, st: JobState, held: bool = True, done: Callable[[], bool] = lambda: False,
                           fenced: Callable[[], bool] = lambda: True) -> None:
        """Until the Job is suspended (or gone) and its pods are gone - confirmed by live reads, not
        only the caches: 1.24's job controller sets `status.active` to 0 as soon as it marks the
        pods for deletion, and a pod watch that lags may never have shown them to us; clearing the
        reservation then would hand out GPUs that terminating pods still hold.

        `fenced()`: no new pod of the Job can get a node any more (the extender's cache, which is
        ours, has seen the eviction). Only then does "no pod now" stay true: a pod created after
        the live list is judged by that cache, while one created before is in the list. Without
        the fence, an owner who starts the Job again at once gets pods placed by a cache that
        still shows the admission, after the reservation was cleared.

        `held`: the pods hold a reservation, so they are waited for even once the Job is no longer
        tracked (deleted with its pods orphaned, they run on uncounted otherwise). Else the wait
        ends when the Job is forgotten, or when `done()` says so."""
        pause = 0.05
        while True:
            await self._wait_until(st.uid, lambda: done() or (self._stopped(st, held) and fenced()))
            if done() or (not held and self.sched.jobs.get(st.key) is not st):
                return
            if await self._live_stopped(st) and not await self._live_pods(st):
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _live_stopped(self, st: JobState) -> bool:
        """The Job, read live, is suspended or gone: its controller makes no new pod. (A replica of
        the extender whose cache lags more than ours would still place one of an unsuspended Job.)"""
        try:
            job = await self.kube.request("GET", st.kind.kind.path(st.namespace, st.name))
        except Exception as exc:
            if is_status(exc, 404):
                return True
            raise
        return job.get("metadata", {}).get("uid") != st.uid or st.kind.suspended(job) or (
            st.kind.deletes_to_stop and P.holds_nothing(job))  # a pod, deleted before it got a node

    async def _live_pods(self, st: JobState) -> int:
        """Its pods not terminated, by a live list: up its pods' owner chains, and, failing safe,
        those whose chain breaks at an owner named after it (a JobSet's child Job, a RayJob's
        RayCluster, gone from the cache before their pods). A Job's own pods are listed by its
        selector (every pod its controller counts matches it), not the namespace's (issue 16); the
        whole namespace for the other kinds, once the Job is gone, or its selector unread."""
        job = self.job(st) if st.kind.kind is K.JOBS else None
        selector = (job.get("spec") or {}).get("selector") if job is not None and job["metadata"].get(
            "uid") == st.uid else None
        try:
            check_label_selector(selector)
            query = [("labelSelector", selector_query(selector))] if selector else None
        except LabelSelectorError:
            query = None
        listed = await self.kube.request("GET", K.PODS.path(st.namespace), query=query)
        count = 0
        for pod in listed.get("items") or ():
            if P.ended(pod):
                continue
            uids, broken = self.owners.chain(pod)
            if st.uid in uids or (broken is not None and st.kind.kind is not K.JOBS
                                  and str(broken.get("name", "")).startswith(st.name)):
                count += 1
        return count

    def _restarted(self, st: JobState, after_generation: int) -> bool:
        """The Job was started again by a change made after `after_generation` (the cache may still
        show it as it was before our suspension)."""
        job = self.job(st)
        return (job is not None and job["metadata"].get("uid") == st.uid and not st.kind.suspended(job)
                and st.kind.generation(job) > after_generation)

    def _stopped(self, st: JobState, held: bool) -> bool:
        if not held and self.sched.jobs.get(st.key) is not st:
            return True
        job = self.job(st)
        if job is not None and job["metadata"].get("uid") == st.uid and not st.kind.stopped(job):
            return False
        return self.pods_gone(st.uid)

    def adopt(self, st: JobState, wl: dict) -> None:
        """A Job admitted and started before gpuqueue led (by Kueue): what stopping it puts back is
        recorded on it first (ManagedKind.adopted); nothing else of it changes."""
        async def write():
            await self._update(st, lambda job: st.kind.adopted(job, wl))

        self.writes.chain(st.key, write)

    async def restore(self, st: JobState) -> None:
        """The Job's own pod template back (its scheduling fields as they were before admission)."""
        try:
            await self._update(st, st.kind.restore)
        except Exception as exc:
            if not is_status(exc, 422):
                raise
            # 1.24 keeps startTime on suspend, so the template stays as admitted: the Job can only
            # come back on the same flavor (its nodeSelector says so to the engine).
            log.info("%s keeps its admitted pod template (the API refused the restore)", st.key)


def _as_is(obj: dict) -> dict:
    return obj
