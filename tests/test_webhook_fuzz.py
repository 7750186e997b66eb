"""Thousands of malformed, truncated and hostile bodies at every endpoint over TLS:
never a 5xx, always a well-formed answer, the server alive and its memory flat."""

from __future__ import annotations

import json
import random
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies.hostile import json_values, mutated
from tests.admission_support import admit, binding_create, pod, pod_create, workload, workload_write
from tests.webhook_support import load_review, make_cert_dir, running_webhook, wire

ENDPOINTS = ("/mutate-batch-v1-job", "/validate-batch-v1-job", "/validate-kueue", "/mutate--v1-pod",
             "/validate--v1-pod", "/validate--v1-binding", "/validate-kueue-x-k8s-io-v1beta2-workload")
SEEDS = [
    wire(load_review(name)) for name in (
        "mutating-review-request.job-create.suspend-false.json",
        "mutating-review-request.job-create.no-labels.json",
        "validating-review-request.job-update.unsuspend-via-kubectl-patch.json",
        "validating-review-request.clusterqueue-create.json",
        "validating-review-request.clusterqueue-update.json",
    )
] + [wire(doc) for doc in (
    pod_create(pod(gpus=2, node_name="n1", init_gpus=1)),
    binding_create("team-a", "train-0", "n1", "alice"),
    workload_write("UPDATE", admit(workload()), workload(), "alice", status=True),
)]

def hostile_bodies(rng: random.Random, n: int) -> list[bytes]:
    extra = [b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}',
             b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}']
    return extra + mutated(rng, SEEDS, n - len(extra), root=lambda doc: doc["request"])


def check_answer(status: int, answer) -> None:
    assert status < 500, answer
    if status == 200:
        assert answer["kind"] == "AdmissionReview" and answer["apiVersion"] == "admission.k8s.io/v1"
        assert isinstance(answer["response"]["uid"], str)
        assert isinstance(answer["response"]["allowed"], bool)


async def test_thousands_of_hostile_bodies(tmp_path):
    rng = random.Random(4)
    bodies = hostile_bodies(rng, 1000)
    async with running_webhook(make_cert_dir(tmp_path)) as hook:
        async def round_() -> None:
            for i, body in enumerate(bodies):
                status, answer = await hook.post(ENDPOINTS[i % len(ENDPOINTS)], body)
                check_answer(status, answer)

        await round_()  # warm up caches before measuring
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        await round_()
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert grown < 2_000_000, f"memory grew by {grown} bytes over {len(bodies)} requests"
        status, answer = await hook.post(ENDPOINTS[0], SEEDS[0])
        assert status == 200 and answer["response"]["allowed"] is True


async def test_generated_objects_never_break_any_endpoint(tmp_path):
    async with running_webhook(make_cert_dir(tmp_path)) as hook:
        base_docs = [json.loads(s) for s in SEEDS]

        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.integers(0, len(base_docs) - 1), st.sampled_from(["object", "oldObject", "kind", "userInfo", "namespace"]),
               json_values, st.sampled_from(ENDPOINTS))
        def collect(i, field, value, endpoint):
            doc = json.loads(json.dumps(base_docs[i]))
            doc["request"][field] = value
            bodies.append((endpoint, wire(doc), doc["request"]["uid"]))

        # hypothesis drives a sync function: generate the cases first, then send them.
        bodies: list = []
        collect()
        for endpoint, body, uid in bodies:
            status, answer = await hook.post(endpoint, body)
            check_answer(status, answer)
            assert status == 200 and answer["response"]["uid"] == uid
