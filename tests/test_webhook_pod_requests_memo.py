"""Both pod webhooks read every pod's requests through a memo keyed by the exact JSON of the spec
fields requests are made of (containers, init containers, overhead: gpuqueue/jsonmemo.py), so
the pods of a Job are checked and summed once. A pod is still judged on what it asks, and still
refused for a field it gets wrong: a tenant whose pod shares its containers with an earlier one
gains nothing by breaking another part, or by asking for a GPU in a field the key leaves out.
Over real TLS on the real webhook app (tests/admission_support.py's chain)."""

from __future__ import annotations

import pytest

from gpuqueue.jsonmemo import JsonMemo
from gpuqueue.webhook import pod_admission
from tests.admission_support import GPU, AdmissionChain, pod, pod_create
from tests.test_webhook_enforcement import COVERED
from tests.webhook_support import make_cert_dir, running_webhook


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    return make_cert_dir(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def chain(cert_dir):
    pod_admission._REQUESTED = JsonMemo()  # what earlier tests' pods asked is not this test's
    async with running_webhook(cert_dir, covered=COVERED) as hook:
        yield AdmissionChain(hook)


def test_a_value_is_remembered_by_its_inputs_json_and_errors_and_other_inputs_are_computed_again():
    memo: JsonMemo[int] = JsonMemo(size=2)
    calls = []

    def compute(v: int):
        return lambda: calls.append(v) or v

    assert memo({"a": [1]}, compute(1)) == 1
    assert memo({"a": [1]}, compute(2)) == 1  # the same JSON: remembered
    assert memo({"a": [1], "b": None}, compute(3)) == 3  # a null field is not a missing one

    def broken():
        calls.append("x")
        raise ValueError("no")

    for _ in range(2):
        with pytest.raises(ValueError):
            memo({"c": 1}, broken)
    assert memo({"d": 1}, compute(4)) == 4  # bounded: the oldest goes
    assert memo({"a": [1]}, compute(5)) == 5
    assert memo(object(), compute(6)) == 6  # not JSON: computed each time
    assert calls == [1, 3, "x", "x", 4, 5, 6]


async def test_a_pod_sharing_an_earlier_pods_containers_is_still_refused_for_a_broken_field(chain):
    first = pod("team-a", gpus=1)
    assert (await chain.admit(pod_create(first))).allowed
    broken = pod("team-a", gpus=1)
    broken["spec"]["tolerations"] = "all of them"
    out = await chain.admit(pod_create(broken))
    assert not out.allowed
    assert out.message.startswith("cannot check this pod: object.spec.tolerations"), out.message
    nameless = pod("team-a", gpus=1)
    nameless["metadata"]["labels"] = ["not", "a", "map"]
    out = await chain.admit(pod_create(nameless))
    assert not out.allowed and out.message.startswith("cannot check this pod: object.metadata.labels"), out.message


async def test_containers_null_after_a_pod_without_containers_is_still_refused(chain):
    empty = pod("team-a", gpus=0)
    del empty["spec"]["containers"]
    assert (await chain.admit(pod_create(empty))).allowed
    null = pod("team-a", gpus=0)
    null["spec"]["containers"] = None
    out = await chain.admit(pod_create(null))
    assert not out.allowed and out.message.startswith("cannot check this pod: object.spec.containers"), out.message


async def test_each_pod_is_judged_on_its_own_requests_whatever_came_before(chain):
    """A GPU asked in an init container or as pod overhead, after pods alike in all else but
    asking none, is still a GPU request: it may not name its node."""
    for gpus in (0, 0):
        assert (await chain.admit(pod_create(pod("team-a", gpus=gpus, node_name="gh200-node-1")))).allowed
    in_init = pod("team-a", gpus=0, node_name="gh200-node-1", init_gpus=2)
    out = await chain.admit(pod_create(in_init))
    assert not out.allowed and out.message.startswith(f"spec.nodeName: Forbidden: a pod that requests {GPU}")
    overhead = pod("team-a", gpus=0, node_name="gh200-node-1")
    overhead["spec"]["overhead"] = {GPU: "1"}
    out = await chain.admit(pod_create(overhead))
    assert not out.allowed and out.message.startswith(f"spec.nodeName: Forbidden: a pod that requests {GPU}")
    assert (await chain.admit(pod_create(pod("team-a", gpus=0, node_name="gh200-node-1")))).allowed
