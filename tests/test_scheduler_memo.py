"""The pod remembered between /filter and /prioritize of one scheduling attempt, and the quick
reading of kube-scheduler's nodeCacheCapable bodies: answers are exactly those of the general
path, a remembered pod is never used for another pod or a changed body, and nothing about the
cluster is remembered (a node filled between two calls is seen as full)."""

from __future__ import annotations

import copy

import orjson
import pytest

import gpuqueue.extender.scheduler.verbs as verbs
from gpuqueue.jobframework.unqueued import how_to_queue
from gpuqueue.jsonmemo import JsonMemo
from gpuqueue.extender.scheduler.memo import PodMemo
from gpuqueue.extender.scheduler.verbs import filter_verb, prioritize_verb
from gpuqueue.extender.scheduler.wire import encode_filter_result, filter_result, split_names_request
from tests.extender_support import chosen
from tests.test_scheduler_extender import (FILTER_NCT, GH, Clock, ext, fixture, job_pod,  # noqa: F401
                                           mixed_cluster, names_request, pki)


def wire(body: dict) -> bytes:
    return orjson.dumps(body) + b"\n"  # compact, one newline: as kube-scheduler sends it


def answer(result) -> object:
    return orjson.loads(result) if isinstance(result, bytes) else result


def both_ways(verb, body: bytes) -> tuple[object, object]:
    """(answer through a memo, answer of the general path), each on a fresh cluster that knows
    the admitted pod of the recorded body."""
    fast_view, slow_view = mixed_cluster(), mixed_cluster()
    for view in (fast_view, slow_view):
        view.admit("team-b/train", GH)
        view.add_pod(admitted_body()["Pod"])
    return answer(verb(body, fast_view, PodMemo())), answer(verb(body, slow_view))


def admitted_body(**kw) -> dict:
    return job_pod(fixture(FILTER_NCT), **kw)


def known(view, body: dict) -> bytes:
    """The body's pod put in the view's pod cache (as the informer would have it), and the body."""
    view.add_pod(body["Pod"])
    return wire(body)


ODD_BODIES = {
    "recorded": wire(admitted_body()),
    "no trailing newline": orjson.dumps(admitted_body()),
    "pod carries the separator in a label": wire(job_pod(fixture(FILTER_NCT)) | {}).replace(
        b'"labels":{', b'"labels":{",\\"Nodes\\":null,\\"NodeNames\\":[":"x",', 1),
    "pod carries the separator as keys": orjson.dumps(admitted_body()).replace(
        b'"labels":{', b'"labels":{"Nodes":null,"NodeNames":"y",', 1),
    "unmanaged pod": wire(fixture(FILTER_NCT)),
    "escaped name": wire(names_request(admitted_body(), ["gh200-node-1", "gh200\\u002dnode-2"])).replace(
        b"\\\\u002d", b"\\u002d"),
    "number among names": wire(names_request(admitted_body(), ["gh200-node-1", 7])),
    "null names": wire(names_request(admitted_body(), None)),
    "empty names": wire(names_request(admitted_body(), [])),
    "bad quantity": wire(admitted_body(gpus="four")),
    "spec not an object": orjson.dumps(admitted_body()).replace(b'"spec":{', b'"spec":[{', 1),
    "trailing garbage": wire(admitted_body()) + b"x",
    "truncated": wire(admitted_body())[:-40],
    "pod not an object": b'{"Pod":[],"Nodes":null,"NodeNames":["gh200-node-1"]}',
    "duplicate and unknown names": wire(names_request(admitted_body(), [
        "gh200-node-1", "nope", "h100-node-3", "gh200-node-1", "nope", "h100-node-3", "", "gh200-node-2"])),
    "whitespace in the names array": wire(names_request(admitted_body(), ["h100-node-3", "gh200-node-2"])).replace(
        b'"NodeNames":["h100-node-3","gh200-node-2"]', b'"NodeNames": [ "h100-node-3" ,\n "gh200-node-2" ]'),
    "huge list": wire(names_request(admitted_body(), [f"node-{i}" for i in range(5000)] + ["gh200-node-1", "h100-node-3"])),
    "two pods": b'{"Pod":{},"Pod":' + orjson.dumps(admitted_body()["Pod"]) + b',"Nodes":null,"NodeNames":["gh200-node-1"]}',
}


@pytest.mark.parametrize("case", list(ODD_BODIES))
@pytest.mark.parametrize("verb", [filter_verb, prioritize_verb], ids=["filter", "prioritize"])
def test_answers_are_those_of_the_general_path(verb, case):
    fast, slow = both_ways(verb, ODD_BODIES[case])
    assert fast == slow


def test_the_split_finds_the_names_after_the_pod_whatever_the_pod_holds():
    body = ODD_BODIES["pod carries the separator as keys"]
    pod, names = split_names_request(body)
    assert orjson.loads(names) == ["gh200-node-2", "h100-node-3", "gh200-node-1"]
    assert orjson.loads(pod)["metadata"]["labels"]["NodeNames"] == "y"
    assert split_names_request(b'{"Nodes":null,"NodeNames":[],"Pod":{}}') is None


def test_the_filter_answer_encoder_matches_the_dict_answer():
    failed = {"a": "node has 0 GPUs free, pod needs 1", "b\"q": "x\\y"}
    unresolvable = {"c": "node is cordoned"}
    names = ["n1", "n2"]
    assert encode_filter_result(orjson.dumps(names), failed, unresolvable) == orjson.dumps(
        filter_result(node_names=names, failed=failed, unresolvable=unresolvable))


def test_a_remembered_pod_is_never_used_for_another_pod_or_a_changed_body():
    view, memo = mixed_cluster(), PodMemo()
    view.admit("team-b/train", GH)
    names = ["gh200-node-2", "gh200-node-1"]
    four = known(view, names_request(admitted_body(gpus=4, uid="a"), names))
    assert chosen(answer(filter_verb(four, view, memo)), names)
    view.nodes.bind("other", "gh200-node-1", 2, job_key="x/y")
    # the same pod's body claiming 2 GPUs: judged on the cache's 4, not on the body nor the memo
    two = wire(names_request(admitted_body(gpus=2, uid="a"), names))
    assert answer(filter_verb(two, view, memo))["FailedNodes"] == {
        "gh200-node-1": "node has 2 GPUs free, pod needs 4"}
    assert view.nodes.own_reservation("a")[:2] == ("gh200-node-2", 4)  # the only fit is reserved, for 4
    # another pod whose body differs only in its uid is another pod: a's reservation counts
    other = known(view, names_request(admitted_body(gpus=4, uid="b"), names))
    assert answer(filter_verb(other, view, memo))["FailedNodes"] == {
        "gh200-node-2": "node has 0 GPUs free, pod needs 4", "gh200-node-1": "node has 2 GPUs free, pod needs 4"}
    assert answer(filter_verb(four, view, memo))["NodeNames"] == ["gh200-node-2"]  # a's own does not
    # a Job the pod no longer belongs to: the verdict is read again, not remembered
    view.forget("team-b/train")
    assert set(answer(filter_verb(four, view, memo))["FailedAndUnresolvableNodes"].values()) == {
        f"gpuqueue: pod team-b/nct-low-1 requests nvidia.com/gpu but belongs to no admitted workload; "
        f"{how_to_queue('team-b')}"}


def test_a_node_filled_between_filter_and_the_next_call_is_seen_full():
    clock = Clock()
    view, memo = mixed_cluster(clock), PodMemo()
    view.admit("team-b/train", GH)
    names = ["gh200-node-2", "gh200-node-1"]
    body = known(view, names_request(admitted_body(gpus=4, uid="p"), names))
    assert chosen(answer(filter_verb(body, view, memo)), names)
    prio = wire(names_request(admitted_body(gpus=4, uid="p"), names))  # /filter's answer, same bytes
    first = answer(prioritize_verb(prio, view, memo))
    assert {h["Host"]: h["Score"] for h in first} == {"gh200-node-2": 7, "gh200-node-1": 7}
    # another pod takes all of gh200-node-1 and 2 GPUs of gh200-node-2 before the retry
    view.nodes.bind("big", "gh200-node-1", 4, job_key="x/big")
    view.nodes.bind("half", "gh200-node-2", 2, job_key="x/half")
    view.nodes.release("p")
    again = answer(filter_verb(body, view, memo))  # same bytes: the memo's entry, the cache's state
    assert again["NodeNames"] == []
    assert again["FailedNodes"] == {"gh200-node-2": "node has 2 GPUs free, pod needs 4",
                                    "gh200-node-1": "node has 0 GPUs free, pod needs 4"}
    # prioritize with the names of the first answer (kube-scheduler's view was older): scores now
    scores = {h["Host"]: h["Score"] for h in answer(prioritize_verb(prio, view, memo))}
    assert scores == {"gh200-node-2": 7, "gh200-node-1": 7}  # full after the pod: 7 x min(1, after/4)


def test_the_memo_is_bounded():
    memo, view = PodMemo(size=4), mixed_cluster()
    view.admit("team-b/train", GH)
    for k in range(10):  # pods the cache does not hold (yet): the general path, which decodes them
        filter_verb(wire(admitted_body(uid=f"u{k}")), view, memo)
    assert len(memo) == 4


async def test_filter_then_prioritize_over_https_reads_the_pod_once_and_answers_the_same(ext):
    ext.view.admit("team-b/train", GH)
    body = admitted_body(gpus=1, uid="https-pod")
    got = await ext.post("filter", body)
    assert chosen(got, ["gh200-node-2", "gh200-node-1"])
    prio = await ext.post("prioritize", names_request(body, ["gh200-node-2", "gh200-node-1"]))
    assert {h["Host"]: h["Score"] for h in prio} == {"gh200-node-2": 2, "gh200-node-1": 2}
    reserved = ext.view.nodes.own_reservation("https-pod")[0]
    assert reserved == got["NodeNames"][0] == "gh200-node-1"  # by /filter, the one node passed (tie: the smallest name)
    changed = job_pod(body, uid="https-pod-2")
    prio = await ext.post("prioritize", names_request(changed, ["gh200-node-2", "gh200-node-1"]))
    # 7 x 2/4 rounded, plus 3 beside its sibling: the other pod is not mistaken for the first
    assert {h["Host"]: h["Score"] for h in prio} == {"gh200-node-2": 2, "gh200-node-1": 7}


def test_pods_the_cache_does_not_know_share_what_their_spec_asks_and_another_spec_is_read_again():
    """For a pod the cache has not seen, what its body's spec asks for decides whether it must
    wait (an enforced resource) or passes (nothing the quota covers); that is remembered per spec
    JSON across pods, another spec is its own entry, and a spec that cannot be read is refused
    for each pod with that pod's name (errors are not remembered)."""
    view = mixed_cluster()
    for uid, gpus, tolerations in (("a", 1, None), ("b", 1, None), ("c", 0, None), ("d", 1, [{"operator": "Exists"}]),
                                   ("e", 0, None)):
        body = wire(job_pod(admitted_body(), uid=uid, gpus=gpus, tolerations=tolerations))
        got = answer(filter_verb(body, view, PodMemo()))
        remembered = verbs._REQUESTED
        verbs._REQUESTED = JsonMemo()  # the reference reads the spec afresh
        try:
            assert got == answer(filter_verb(body, mixed_cluster())), uid
        finally:
            verbs._REQUESTED = remembered
        if gpus:
            assert got["Error"] == f"gpuqueue: pod team-b/nct-low-1 (uid {uid}) is not in gpuqueue's pod cache"
        else:
            assert got["NodeNames"] == ["gh200-node-2", "h100-node-3", "gh200-node-1"]
    for uid, name in (("x", "bad-1"), ("y", "bad-2")):
        bad = job_pod(admitted_body(), uid=uid)
        bad["Pod"]["metadata"]["name"] = name
        bad["Pod"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "lots"
        error = answer(filter_verb(wire(bad), view, PodMemo()))["Error"]
        assert f"Pod team-b/{name}: spec.containers[0].resources.requests.nvidia.com/gpu" in error, error


def test_pods_alike_in_length_and_start_are_told_apart_by_their_whole_bytes():
    """The memo finds an entry by the length and start of the pod's JSON and then compares all
    of it: a pod differing only near its end is another pod, never the remembered one."""
    memo = PodMemo()
    view = mixed_cluster()
    one = job_pod(admitted_body(), gpus=1)
    none = job_pod(admitted_body(), gpus=0)  # unknown to the cache: its body's spec decides
    # same length, same first 512 bytes: only the GPU count near the end differs
    one_bytes, none_bytes = wire(one), wire(none)
    assert len(one_bytes) == len(none_bytes) and one_bytes[:600] == none_bytes[:600] and one_bytes != none_bytes
    answers = []
    for body in (one_bytes, none_bytes, one_bytes):
        answers.append(answer(filter_verb(body, view, memo)))
        assert answers[-1] == answer(filter_verb(body, mixed_cluster()))
    assert answers[0]["Error"] and answers[1]["NodeNames"] == ["gh200-node-2", "h100-node-3", "gh200-node-1"]
    assert answers[2] == answers[0]
    assert len(memo) == 1  # they share a slot, each replacing the other
