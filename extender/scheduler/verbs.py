"""The three extender verbs: request body in, response document out. No HTTP here, so the
logic is testable and measurable on its own; ``app.py`` puts it behind the HTTP/1.1 engine of
``http11.py``."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Awaitable, Callable, NamedTuple

import orjson

from gpuqueue.api.base import ObjectMeta
from gpuqueue.jsonmemo import JsonMemo
from gpuqueue.extender.placement.filter import FilterResult, filter_nodes
from gpuqueue.api.podrequests import engine_pod_requests
from gpuqueue.extender.placement.kube import InvalidObject, node_info_from_dict, pod_spec
from gpuqueue.extender.placement.model import NodeInfo, PodRequest
from gpuqueue.extender.placement.preemption import NodeVictims, veto
from gpuqueue.extender.placement.score import choose, extender_scores
from gpuqueue.extender.placement.topology import outside_assignment
from gpuqueue.extender.scheduler.catchup import ADMISSION, behind, nodes_behind
from gpuqueue.extender.scheduler.enforce import judge, judge_pod, judge_request
from gpuqueue.extender.scheduler.ownership import membership
from gpuqueue.extender.scheduler.view import (Admitted, ClusterView, NotAdmitted, Retry, Unmanaged, Verdict,
                                              Violation)
from gpuqueue.extender.scheduler.memo import DecodedPod, PodMemo
from gpuqueue.extender.scheduler.wire import (BadRequest, ExtenderArgs, ExtenderPreemptionArgs, Pod, decode, decode_names, decode_pod,
                                     encode_filter_result, encode_host_priorities, filter_error, filter_result, pod_head,
                                     preemption_result, split_names_request)

log = logging.getLogger("gpuqueue.extender")


# What the body's spec asks for is read only for a pod the cache has not seen (to know whether it
# must wait for the cache); the pods of a Job share their spec, so it is read once per spec JSON.
_REQUESTED: JsonMemo[frozenset[str]] = JsonMemo()


def body_requested(pod: Pod) -> frozenset[str]:
    """The resources the body's spec asks a positive amount of; BadRequest names a field the
    spec gets wrong."""
    return _REQUESTED(pod.spec, partial(_spec_requested, pod))


def _spec_requested(pod: Pod) -> frozenset[str]:
    try:
        spec = pod_spec(pod.spec)
    except InvalidObject as exc:
        raise BadRequest(f"Pod {_name(pod)}: {exc}") from None
    return frozenset(r for r, v in engine_pod_requests(spec).items() if v > 0)


def _requested_reader(pod: Pod | DecodedPod) -> Callable[[], frozenset[str]]:
    if not isinstance(pod, DecodedPod):
        return partial(body_requested, pod)

    def read() -> frozenset[str]:  # once per pod bytes, errors included
        if pod.requested is None:
            try:
                pod.requested = body_requested(pod.pod)
            except BadRequest as exc:
                pod.requested = str(exc)
        if isinstance(pod.requested, str):
            raise BadRequest(pod.requested)
        return pod.requested

    return read


def pod_request(verdict: Admitted) -> PodRequest:
    """What placement judges: the cached pod's GPUs and tolerations, never the body's. Only GPUs
    are judged here: cpu, memory and the rest are kube-scheduler's own fit check, whose cache of
    them is the authoritative one (the simulator's place() checks them all)."""
    pod = verdict.pod
    return PodRequest(pod.uid, pod.gpus, {}, pod.tolerations, verdict.flavor, verdict.job_key)


def _names_request(body: bytes, memo: PodMemo | None) -> tuple[DecodedPod, list[str]] | None:
    """A nodeCacheCapable request as kube-scheduler lays it out, read through the memo: the pod
    decoded once per attempt, and /prioritize's names taken from /filter's answer when they are
    the same bytes. None: anything else, for the general decode (which also words any error)."""
    if memo is None:
        return None
    parts = split_names_request(body)
    if parts is None:
        return None
    pod_json, names_json = parts
    entry = memo.get(pod_json)
    if entry is not None and names_json == entry.answered:
        return entry, entry.answered_names
    names = decode_names(names_json)
    if names is None:
        return None
    if entry is None:
        pod = decode_pod(pod_json)
        if pod is None:
            return None
        entry = memo.put(pod_json, DecodedPod(pod))
    return entry, names


def _candidates(args: ExtenderArgs) -> tuple[list[str], dict[str, NodeInfo] | None, dict[str, dict] | None]:
    """Node names in request order, plus NodeInfo and the raw objects when full Nodes came."""
    if args.Nodes is not None:
        infos: dict[str, NodeInfo] = {}
        raws: dict[str, dict] = {}
        for i, raw in enumerate(args.Nodes.items or ()):
            try:
                info = node_info_from_dict(raw)
            except InvalidObject as exc:
                raise BadRequest(f"Nodes.items[{i}]: {exc}") from None
            infos[info.name] = info
            raws[info.name] = raw
        return list(infos), infos, raws
    if args.NodeNames is not None:
        return args.NodeNames, None, None
    raise BadRequest("ExtenderArgs has neither Nodes nor NodeNames")


def _name(pod: Pod) -> str:
    return f"{pod.metadata.namespace or ''}/{pod.metadata.name or ''}"


class _Request(NamedTuple):
    pod: Pod | DecodedPod | None  # None: not decoded (_filter_known_version)
    names: list[str]
    infos: dict[str, NodeInfo] | None  # full Nodes by name, when they came
    raws: dict[str, dict] | None  # and their JSON
    meta: ObjectMeta | None  # None: not decoded
    fast: bool  # read by the fast path


def _read_request(body: bytes, memo: PodMemo | None) -> _Request:
    """A /filter or /prioritize body."""
    fast = _names_request(body, memo)
    if fast is not None:
        pod, names = fast
        return _Request(pod, names, None, None, pod.pod.metadata, True)
    args: ExtenderArgs = decode(body, ExtenderArgs)
    names, infos, raws = _candidates(args)
    return _Request(args.Pod, names, infos, raws, args.Pod.metadata, False)


class _Judged(NamedTuple):
    verdict: Verdict
    violation: Violation | None
    result: FilterResult | None  # the nodes' verdicts, for an admitted pod
    behind: str | None  # what the caches lack for this to be final (catchup.behind)


def _hold_to_assignment(verdict: Admitted, result: FilterResult, view: ClusterView) -> None:
    """Beyond Kueue: the passed nodes outside the pod set's topology assignment are refused."""
    outside = outside_assignment(verdict.topology, result.passed, view.nodes, verdict.job_key, verdict.pod.uid,
                                 verdict.where)
    if outside:
        result.passed = [n for n in result.passed if n not in outside]
        result.unresolvable.update(outside)
        result.codes = None  # the choice of one node reads the scores again


def _nodes_for(verdict: Admitted, names: list[str], view: ClusterView,
               infos: dict[str, NodeInfo] | None = None) -> FilterResult:
    """The candidates' verdicts for an admitted pod: its flavor, the GPUs free, its topology assignment."""
    result = filter_nodes(pod_request(verdict), names, view.nodes, infos)
    if verdict.topology is not None:
        _hold_to_assignment(verdict, result, view)
    return result


def _judge_filter(req: _Request, view: ClusterView) -> _Judged:
    verdict, violation = judge_request(view, req.meta, _requested_reader(req.pod))
    result = _nodes_for(verdict, req.names, view, req.infos) if isinstance(verdict, Admitted) else None
    return _Judged(verdict, violation, result, behind(view, req.meta, verdict, result))


def _filter_known_version(body: bytes, view: ClusterView) -> bytes | None:
    """/filter's answer for the common case, read without decoding the pod: a nodeCacheCapable
    body whose pod the cache holds at the very version the body names (same uid, namespace,
    name and resourceVersion: the same object, so its owner and spec are the cache's too), of
    an admitted Workload, with no policy violation, whose nodes' verdicts are final (no
    candidate the node cache lacks stands between it and a node). None otherwise: the general
    path reads the whole body and answers everything else (the pod's refusals, waits for the
    caches, errors), as it answers this case too."""
    parts = split_names_request(body)
    if parts is None:
        return None
    head = pod_head(parts[0])
    if head is None:
        return None
    name, namespace, uid, version = head
    pod = view.pod(uid)
    if pod is None or (pod.namespace, pod.name, pod.resource_version) != (namespace, name, version):
        return None
    verdict, violation = judge_pod(view, pod)
    if not isinstance(verdict, Admitted) or violation is not None:
        return None
    names = decode_names(parts[1])
    if names is None:
        return None
    result = _nodes_for(verdict, names, view)
    if nodes_behind(result) is not None:
        return None  # the general path waits for the node cache
    answer = _filter_answer(_Request(None, names, None, None, None, False), view, _Judged(verdict, None, result, None))
    return orjson.dumps(answer) if isinstance(answer, dict) else answer


def filter_verb(body: bytes, view: ClusterView, memo: PodMemo | None = None,
                wait: float = 0.0) -> dict | bytes | Awaitable[dict | bytes]:
    """/filter's answer. With ``wait`` > 0, a verdict that may only say the caches are behind
    the request (``catchup.behind``) is not answered yet: an awaitable comes back instead,
    which judges again at each change of the caches and answers once the verdict is final or
    ``wait`` seconds have passed."""
    try:
        known = _filter_known_version(body, view)
        if known is not None:
            return known
        req = _read_request(body, memo)
        judged = _judge_filter(req, view)
    except BadRequest as exc:
        log.warning("filter: %s", str(exc))
        return filter_error(str(exc))
    if judged.behind is not None and wait > 0:
        return _filter_when_caught_up(req, view, judged, wait)
    return _filter_answer(req, view, judged)


async def _filter_when_caught_up(req: _Request, view: ClusterView, judged: _Judged, wait: float) -> dict | bytes:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while judged.behind is not None:
        left = deadline - loop.time()
        if left <= 0 or not await view.changed(left):
            break
        try:
            judged = _judge_filter(req, view)
        except BadRequest as exc:
            return filter_error(str(exc))
    if judged.behind is not None:
        log.info("filter: pod %s/%s: the caches did not take in %s within %g s", req.meta.namespace,
                 req.meta.name, judged.behind, wait)
        if judged.behind == ADMISSION:
            view.workloads_went_quiet()  # no admission is on its way: the next refused pods answer at once
        if isinstance(judged.verdict, Retry):
            judged = judged._replace(verdict=Retry(f"{judged.verdict.message} (waited {wait:g} s for it)"))
    return _filter_answer(req, view, judged)


def _filter_answer(req: _Request, view: ClusterView, judged: _Judged) -> dict | bytes:
    verdict, result, names = judged.verdict, judged.result, req.names
    if judged.violation is not None:
        view.report(judged.violation)  # once per scheduling attempt
    if isinstance(verdict, Unmanaged):
        passed, failed, unresolvable = list(names), {}, {}
    elif isinstance(verdict, NotAdmitted):
        passed, failed, unresolvable = [], {}, {n: verdict.message for n in names}
    elif isinstance(verdict, Retry):
        return filter_error(verdict.message)
    else:
        passed, failed, unresolvable = result.passed, result.failed, result.unresolvable
        if passed:
            # One node passed: kube-scheduler then binds there without scoring (both 1.24 and
            # current), so where the pod goes is known here, not guessed from scores that
            # kube-scheduler adds its own to and breaks ties of at random.
            r = pod_request(verdict)
            if len(passed) > 1:
                known = (result.codes, result.epoch) if result.codes is not None else None
                passed = [choose(r, passed, view.nodes, known)]  # the others: neither passed nor refused
            view.nodes.reserve(r.uid, passed[0], r.gpus, r.requests, r.job_key)
    if req.raws is not None:
        return filter_result(node_items=[req.raws[n] for n in passed], failed=failed, unresolvable=unresolvable)
    if req.fast:
        pod = req.pod
        answered = orjson.dumps(passed)
        pod.answered, pod.answered_names = answered, passed
        return encode_filter_result(answered, failed, unresolvable)
    return filter_result(node_names=passed, failed=failed, unresolvable=unresolvable)


def prioritize_verb(body: bytes, view: ClusterView, memo: PodMemo | None = None) -> bytes | list[dict] | dict:
    try:
        pod, names, _, _, meta, fast = _read_request(body, memo)
        verdict = judge(view, meta, _requested_reader(pod))
        if not isinstance(verdict, Admitted):
            return encode_host_priorities(names, [0] * len(names))  # neutral: kube-scheduler decides
        req = pod_request(verdict)
        answered = fast and names is pod.answered_names  # the names this pod's /filter answered
    except BadRequest as exc:
        # HostPriorityList has no Error field; kube-scheduler ignores a prioritize it cannot
        # decode, which is what we want, and the body still says why.
        log.warning("prioritize: %s", str(exc))
        return {"Error": str(exc)}
    scores = extender_scores(req, names, view.nodes)
    if verdict.topology is not None:  # the assigned nodes only; kube-scheduler's own scores decide among them
        outside = outside_assignment(verdict.topology, names, view.nodes, verdict.job_key, verdict.pod.uid,
                                     verdict.where)
        scores = [0 if n in outside else s for n, s in zip(names, scores)]
    # orjson escapes with a backslash whatever JSON needs escaped: none in /filter's answer, none here
    answer = encode_host_priorities(names, scores, plain=answered and pod.answered.isascii() and b"\\" not in pod.answered)
    if answered:  # one /prioritize per /filter: let the names go now, while their memory is warm
        pod.answered = pod.answered_names = None
    return answer


def preempt_verb(body: bytes, view: ClusterView) -> dict:
    """Victims are named by UID and judged as the cache knows them: whatever else a body says
    about a victim pod is not read."""
    try:
        args: ExtenderPreemptionArgs = decode(body, ExtenderPreemptionArgs)
        if args.NodeNameToVictims is None and args.NodeNameToMetaVictims is None:
            raise BadRequest("ExtenderPreemptionArgs has neither NodeNameToVictims nor NodeNameToMetaVictims")
        verdict = judge(view, args.Pod.metadata, partial(body_requested, args.Pod))
    except BadRequest as exc:
        log.warning("preempt: %s", str(exc))
        return preemption_result({}, str(exc))  # no victims: nothing is evicted
    if isinstance(verdict, (NotAdmitted, Retry)):
        return preemption_result({})  # a pod without quota, or not vouched for, may not evict anyone
    proposed: dict[str, NodeVictims[str]] = {}
    if args.NodeNameToVictims is not None:
        for node, v in args.NodeNameToVictims.items():
            proposed[node] = NodeVictims(tuple(p.metadata.uid or "" for p in v.Pods or ()), v.NumPDBViolations)
    elif args.NodeNameToMetaVictims is not None:
        for node, v in args.NodeNameToMetaVictims.items():
            proposed[node] = NodeVictims(tuple(p.UID for p in v.Pods or ()), v.NumPDBViolations)

    def allowed(uid: str) -> bool:
        pod = view.pod(uid) if uid else None
        if pod is None:
            return False  # unknown to the cache: cannot prove it is not an admitted Workload's
        member = membership(view, pod)
        return view.may_evict(pod) if member is not None and member.workload.holds_quota else True

    kept = veto(proposed, allowed)
    return preemption_result({n: (list(v.pods), v.num_pdb_violations) for n, v in kept.items()})
