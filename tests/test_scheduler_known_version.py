"""/filter reads a nodeCacheCapable body's pod off the start of its JSON (name, namespace, uid,
resourceVersion, as Go's encoder lays them out) and, when the pod cache holds that very version
of an admitted Workload's pod and a node takes it, answers without decoding the pod
(verbs._filter_known_version). Every answer must be the general path's: the same node, the
same reasons, the same reservation; and every other case (another version, another name for
the uid, a refusal, a wait, a layout it does not know) goes the general way."""

from __future__ import annotations

import copy

import orjson
import pytest

import gpuqueue.extender.scheduler.verbs as verbs
from gpuqueue.extender.scheduler.memo import PodMemo
from gpuqueue.extender.scheduler.view import EVICTED
from gpuqueue.extender.scheduler.wire import pod_head
from tests.test_scheduler_extender import FILTER_NCT, GH, fixture, job_pod, mixed_cluster, names_request

NAMES = ["h100-node-3", "gh200-node-2", "nope", "gh200-node-1"]


def body(names: list[str] = NAMES, **kw) -> dict:
    return names_request(job_pod(fixture(FILTER_NCT), **kw), list(names))


def cluster(pod: dict, *, rv: str | None = None, full: tuple[str, ...] = (), state: str | None = None,
            count: int = 4):
    view = mixed_cluster()
    view.admit("team-b/train", GH, count=count)
    if state is not None:
        view.set_state("team-b/train", state, "preempted")
    cached = copy.deepcopy(pod)
    if rv is not None:
        cached["metadata"]["resourceVersion"] = rv
    view.add_pod(cached)
    for i, node in enumerate(full):
        view.nodes.bind(f"other-pod-{i}", node, 4, {}, "other/job")
    return view


# case: (what the sent pod differs in, how the cluster differs), the cache holding team-b's pod
CASES = {
    "at the cache's version": ({}, {}),
    "a node full": ({}, {"full": ("gh200-node-2",)}),
    "every node of its flavor full, a candidate unknown": ({}, {"full": ("gh200-node-2", "gh200-node-1")}),
    "every node of its flavor full": ({"names": [n for n in NAMES if n != "nope"]},
                                      {"full": ("gh200-node-2", "gh200-node-1")}),
    "the cache holds an older version": ({}, {"rv": "1"}),
    "the cache holds a newer version": ({}, {"rv": "99999"}),
    "its Workload is being evicted": ({}, {"state": EVICTED}),
    "its pod set is full": ({}, {"count": 0}),
    "another namespace for the uid": ({"namespace": "team-x"}, {}),
}


def answers(case: str, monkeypatch) -> tuple[object, object, list[str]]:
    """(the answer, the general path's answer on an identical cluster, the verb's reads of the pod)"""
    pod_kw, view_kw = CASES[case]
    sent = body(**pod_kw)
    views = [cluster(body()["Pod"], **view_kw) for _ in range(2)]
    raw = orjson.dumps(sent) + b"\n"
    decoded: list[str] = []
    real_decode = verbs.decode_pod
    with monkeypatch.context() as m:
        m.setattr(verbs, "decode_pod", lambda b: decoded.append("pod") or real_decode(b))
        got = verbs.filter_verb(raw, views[0], PodMemo())
    with monkeypatch.context() as m:
        m.setattr(verbs, "_filter_known_version", lambda body, view: None)
        general = verbs.filter_verb(raw, views[1], PodMemo())
    got, general = (orjson.loads(a) if isinstance(a, bytes) else a for a in (got, general))
    uid = sent["Pod"]["metadata"]["uid"]
    assert views[0].nodes.own_reservation(uid) == views[1].nodes.own_reservation(uid)  # the same one, or none
    return got, general, decoded


@pytest.mark.parametrize("case", list(CASES))
def test_the_answer_is_the_general_paths(case, monkeypatch):
    got, general, decoded = answers(case, monkeypatch)
    assert got == general
    taken = case in ("at the cache's version", "a node full", "every node of its flavor full")
    assert decoded == ([] if taken else ["pod"]), (case, got)
    if taken and case != "every node of its flavor full":
        assert len(got["NodeNames"]) == 1 and got["NodeNames"][0].startswith("gh200-node-")


def test_the_head_is_read_only_in_go_encoders_layout():
    pod = fixture(FILTER_NCT)["Pod"]
    raw = orjson.dumps(pod)
    meta = pod["metadata"]
    assert pod_head(raw) == (meta["name"], meta["namespace"], meta["uid"], meta["resourceVersion"])
    for other in (
        raw.replace(b'"namespace"', b'"namespace" ', 1),  # not compact
        raw.replace(b'"uid":"', b'"uid":"\\u0061', 1),  # an escape
        b'{"metadata":{"namespace":"team-b","name":"x","uid":"u","resourceVersion":"1"}}',  # another order
        b'{"metadata":{"name":"x","namespace":"team-b","uid":"u","resourceVersion":1}}',  # a number
        b'{"spec":{},"metadata":{"name":"x","namespace":"team-b","uid":"u","resourceVersion":"1"}}',
    ):
        assert pod_head(other) is None, other
