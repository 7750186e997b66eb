"""The enforcement point: what the verbs do with the pod a request names.

``judge`` trusts nothing in the request that the view can check. The pod is the view's own,
looked up by the body's UID; a body whose namespace, name or controller owner disagree with
that pod, and a pod the cache has not seen yet that asks for an enforced resource, get a
``Retry`` (an Error kube-scheduler retries with backoff: the cache may only lag).

``judge_pod`` then decides on the cached pod alone:

- placement (what Off does, Kueue's behaviour): a pod of a Workload holding quota must land on
  its flavor; a pod of a Workload waiting for quota is refused with Kueue's pending message;
  any other pod is kube-scheduler's business;
- for a pod that needs an admission (``EnforcementConfig``: it requests an enforced resource,
  outside the exempt namespaces), the policy: it belongs to a Workload holding quota (not
  finished, not being evicted), in a pod set of its admission, asks per pod for no more of each
  enforced resource than that pod set was admitted per pod, and the pod set's pods already
  running (bound and not terminated, plus in flight; itself not counted) are fewer than its
  admitted count. Strict refuses a pod that fails; Audit reports it and places it as Off would.

Every check is a few dict lookups, whatever the number of candidate nodes.
"""

from __future__ import annotations

from typing import Callable

from gpuqueue.api.base import ObjectMeta
from gpuqueue.api.quantity import format_engine_int
from gpuqueue.jobframework.unqueued import how_to_queue

from gpuqueue.extender.scheduler.ownership import Membership, membership
from gpuqueue.extender.scheduler.view import (ADMITTED, EVICTED, FINISHED, PENDING, UNMANAGED, Admitted, CachedPod,
                                              ClusterView, NotAdmitted, Retry, Verdict, Violation, controller_uid)

NO_RESERVATION = "the Workload has no quota reservation yet"


def judge(view: ClusterView, meta: ObjectMeta, body_requested: Callable[[], frozenset[str]],
          report: bool = False) -> Verdict:
    """The verdict on the pod a request body names (``meta``: its metadata as the body states
    it; ``body_requested``: the resources the body's spec asks for, read only for a pod the
    cache does not know). ``report``: hand a violation to the view (once per scheduling
    attempt: at /filter)."""
    verdict, violation = judge_request(view, meta, body_requested)
    if violation is not None and report:
        view.report(violation)
    return verdict


def judge_request(view: ClusterView, meta: ObjectMeta,
                  body_requested: Callable[[], frozenset[str]]) -> tuple[Verdict, Violation | None]:
    """``judge`` without reporting: the verdict and the violation found, if any."""
    uid = meta.uid or ""
    pod = view.pod(uid) if uid else None
    if pod is None:
        return _unknown(view, meta, body_requested), None
    if (meta.namespace or "") != pod.namespace or (meta.name or "") != pod.name:
        # a uid names one pod for its whole life: no newer version of it can make this right
        return Retry(f"gpuqueue: the request names pod {meta.namespace or ''}/{meta.name or ''} but uid {uid} "
                     f"is pod {pod.key} in gpuqueue's cache"), None
    stated = controller_uid(meta)
    if stated != pod.controller_uid:  # ownerReferences do change (adoption, orphaning)
        return Retry(f"gpuqueue: the request says pod {pod.key} is controlled by uid {stated or '(none)'}, "
                     f"gpuqueue's cache says {pod.controller_uid or '(none)'}",
                     lagging=newer(meta.resource_version, pod.resource_version)), None
    return judge_pod(view, pod)


def newer(stated: str | None, cached: str) -> bool:
    """Whether a request's resourceVersion is later than the cache's (etcd's revisions are
    integers; another form cannot be compared, and is not taken as later)."""
    return bool(stated and stated.isdigit() and cached.isdigit() and int(stated) > int(cached))


def _unknown(view: ClusterView, meta: ObjectMeta, body_requested: Callable[[], frozenset[str]]) -> Verdict:
    namespace = meta.namespace or ""
    if not view.enforcement.checked_requests(namespace, body_requested(), view.covered_resources()):
        return UNMANAGED  # nothing the quota covers: nothing to reserve, nothing to refuse
    who = f"pod {namespace}/{meta.name or ''}"
    if not meta.uid:
        return Retry(f"gpuqueue: {who} has no uid")
    if view.pod_deleted(meta.uid):  # kube-scheduler's own watch has not seen it go yet: nothing to wait for
        return Retry(f"gpuqueue: {who} (uid {meta.uid}) was deleted")
    return Retry(f"gpuqueue: {who} (uid {meta.uid}) is not in gpuqueue's pod cache", lagging=True)


def judge_pod(view: ClusterView, pod: CachedPod) -> tuple[Verdict, Violation | None]:
    """The verdict on a pod the cache knows, and the policy violation found, if any (reported
    in Strict and Audit; the verdict refuses it only in Strict)."""
    member = membership(view, pod)
    verdict = _placement(pod, member)
    enforcement = view.enforcement
    if not enforcement.enforcing:
        return verdict, None
    checked = enforcement.checked_requests(pod.namespace, pod.requested, view.covered_resources())
    if not checked:
        return verdict, None
    violation = _violation(view, pod, member, sorted(checked))
    if violation is not None and enforcement.refusing and not isinstance(verdict, NotAdmitted):
        # A pod of no workload at all waits for ever: its PodScheduled message says how to queue it.
        hint = f"; {how_to_queue(pod.namespace)}" if violation.reason == "no_workload" else ""
        verdict = NotAdmitted(violation.message + hint)
    return verdict, violation


def _placement(pod: CachedPod, member: Membership | None) -> Verdict:
    if member is None:
        return UNMANAGED
    wl = member.workload
    if wl.state == PENDING:
        return NotAdmitted(wl.message or NO_RESERVATION)
    admitted = wl.pod_sets.get(member.pod_set) if member.pod_set is not None else None
    flavor = admitted.flavor if admitted is not None and admitted.flavor is not None else wl.flavor
    if wl.state in (ADMITTED, EVICTED) and flavor is not None:
        if admitted is not None and admitted.topology is not None:
            return Admitted(flavor, member.key, pod, admitted.topology, _where(member))
        return Admitted(flavor, member.key, pod)
    return UNMANAGED  # finished: its pods are no longer the quota's


def _violation(view: ClusterView, pod: CachedPod, member: Membership | None, checked: list[str]) -> Violation | None:
    asks = checked[0]
    if member is None:
        return Violation("no_workload", f"gpuqueue: pod {pod.key} requests {asks} but belongs to no admitted workload",
                         pod)
    wl = member.workload
    if wl.state != ADMITTED:
        why = {PENDING: f"is not admitted ({wl.message or NO_RESERVATION})", FINISHED: "is finished",
               EVICTED: f"is being evicted ({wl.message})" if wl.message else "is being evicted"}[wl.state]
        return Violation(f"workload_{wl.state}", f"gpuqueue: pod {pod.key} requests {asks} but its workload "
                         f"{wl.key} {why}", pod)
    if member.pod_set is None:
        return Violation("pod_set_not_admitted", f"gpuqueue: pod {pod.key} names no pod set of workload {wl.key}",
                         pod)
    admitted = wl.pod_sets.get(member.pod_set)
    if admitted is None:
        return Violation("pod_set_not_admitted", f"gpuqueue: pod {pod.key} is in {_where(member)}, which has no "
                         "admission", pod)
    for r in checked:
        need, total = pod.requests[r], admitted.usage.get(r, 0)
        if need * admitted.count > total:
            per_pod = format_engine_int(r, total // admitted.count) if admitted.count > 0 else "0"
            return Violation("requests_exceed_admission", f"gpuqueue: pod {pod.key} requests "
                             f"{format_engine_int(r, need)} {r} but {_where(member)} is admitted for {per_pod} per pod",
                             pod)
    nodes = view.nodes
    running = sum(nodes.job_pods(key) for key in member.counted)
    if nodes.pod_job(pod.uid) in member.counted:
        running -= 1  # itself, bound or in flight: it does not take a second place
    if running >= admitted.count:
        return Violation("pod_set_full", f"gpuqueue: {_where(member)} is admitted for {admitted.count} "
                         f"pod{'' if admitted.count == 1 else 's'} and {running} already "
                         f"run{'s' if running == 1 else ''}", pod)
    return None


def _where(member: Membership) -> str:
    return f"pod set {member.pod_set} of workload {member.workload.key}"
