"""Hostile objects of every kind at every kind's endpoint, every integration enabled: an object
whose fields have the wrong types, mutated from a valid sample of each kind (and pods of a group,
as created and as updated), never makes the webhook answer an internal error or a 5xx."""

from __future__ import annotations

import json
import random

from gpuqueue.jobframework import registry
from gpuqueue.jobframework.registry import IntegrationsConfig
from gpuqueue.webhook.app import PARENT_KINDS, QUEUED_KINDS, VALIDATED_KINDS, WebhookSettings, kind_path
from tests.admission_support import admission_review, pod, pod_create
from tests.strategies.hostile import mutated
from tests.webhook_support import make_cert_dir, running_webhook, wire
from tests.workload_kinds import ALL

PATHS = sorted({kind_path("mutate", i) for i in QUEUED_KINDS} | {kind_path("validate", i) for i in VALIDATED_KINDS}
               | {kind_path("validate", i) for i in PARENT_KINDS} | {"/mutate--v1-pod", "/validate--v1-pod"})


def own_path(body: bytes) -> str | None:
    """The path kube-apiserver would send a review of this kind to (None: the kind is unreadable)."""
    try:
        request = json.loads(body)["request"]
        kind, operation = request["kind"]["kind"], request["operation"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    integ = registry.BY_KIND.get(kind) if isinstance(kind, str) else None
    if integ is None:
        return None
    if kind == "Pod":
        return "/mutate--v1-pod" if operation == "CREATE" else "/validate--v1-pod"
    return kind_path("mutate" if operation == "CREATE" else "validate", integ)


def seeds() -> list[bytes]:
    out = []
    for sample in ALL:
        obj = sample.fresh()
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = registry.integration_for(obj).plural
        for operation, old in (("CREATE", None), ("UPDATE", sample.fresh())):
            out.append(wire(admission_review(operation, (group, version, obj["kind"]), (group, version, plural),
                                             namespace="team-a", name=obj["metadata"]["name"], username="alice",
                                             obj=obj, old=old)))
    member = pod(labels={"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/pod-group-name": "g",
                         "kueue.x-k8s.io/managed": "true"},
                 annotations={"kueue.x-k8s.io/pod-group-total-count": "2"})
    review = pod_create(member)
    out.append(wire(review))
    review["request"].update(operation="UPDATE", oldObject=member)
    out.append(wire(review))
    return out


async def test_hostile_objects_of_every_kind_get_an_answer_never_an_internal_error(tmp_path):
    bodies = mutated(random.Random(15), seeds(), 1500, root=lambda doc: doc["request"]["object"])
    settings = WebhookSettings(integrations=IntegrationsConfig(tuple(registry.supported_frameworks())))
    decided = 0
    async with running_webhook(make_cert_dir(tmp_path), settings=settings) as hook:
        for i, body in enumerate(bodies):
            for path in (own_path(body), PATHS[i % len(PATHS)]):
                if path is None:
                    continue
                status, answer = await hook.post(path, body)
                assert status < 500, answer
                if status == 200:
                    response = answer["response"]
                    assert (response.get("status") or {}).get("code") != 500, (path, response, body[:2000])
                    decided += path == own_path(body) and (not response["allowed"] or "patch" in response)
        assert decided > 300  # the bodies reach the decisions: many are refused or patched
        # a sample of each seed at its own kind's path, unmutated, still answered
        for body in seeds():
            doc = json.loads(body)
            kind = doc["request"]["kind"]
            integ = registry.BY_KIND[kind["kind"]]
            verb = "mutate" if doc["request"]["operation"] == "CREATE" else "validate"
            status, answer = await hook.post(kind_path(verb, integ) if kind["kind"] != "Pod" else f"/{verb}--v1-pod", body)
            assert status == 200 and (answer["response"].get("status") or {}).get("code") != 500, answer
