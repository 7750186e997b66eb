"""json_patch: the JSONPatch the webhook answers with, applied as the API server applies it (the
parent of every path must exist in the object as it serialised it, where Go's omitempty drops empty
and null maps)."""

from __future__ import annotations

import pytest

from gpuqueue.jobframework.patch import json_patch
from tests.webhook_support import apply_json_patch


def as_serialised(obj):
    """What the API server patches: empty and null maps left out."""
    if isinstance(obj, dict):
        return {k: as_serialised(v) for k, v in obj.items() if not (v is None or v == {})}
    return obj


@pytest.mark.parametrize("before, after", [
    ({"metadata": {"labels": {}}, "spec": {}}, {"metadata": {"labels": {"a/b": "x"}}, "spec": {"suspend": True}}),
    ({"metadata": {"labels": None}, "spec": {}}, {"metadata": {"labels": {"q": "x"}}, "spec": {}}),
    ({"spec": {"pytorchReplicaSpecs": {}}}, {"spec": {"pytorchReplicaSpecs": {}, "runPolicy": {"suspend": True}}}),
    ({"spec": {"runPolicy": {"cleanPodPolicy": "None"}}}, {"spec": {"runPolicy": {"cleanPodPolicy": "None", "suspend": True}}}),
    ({"spec": {"schedulingGates": [{"name": "other"}]}},
     {"spec": {"schedulingGates": [{"name": "other"}, {"name": "kueue.x-k8s.io/admission"}]}}),
    ({"metadata": {"annotations": {"a~b": "1"}}}, {"metadata": {"annotations": {"a~b": "2", "c/d": "3"}}}),
])
def test_the_patch_applies_where_the_api_server_applies_it(before, after):
    patch = json_patch(before, after)
    assert as_serialised(apply_json_patch(as_serialised(before), patch)) == as_serialised(after)


def test_no_change_no_patch_and_keys_are_escaped():
    obj = {"metadata": {"labels": {"a": "b"}}}
    assert json_patch(obj, obj) == []
    assert json_patch(obj, {"metadata": {"labels": {"a": "b", "x/y~z": "1"}}}) == [
        {"op": "add", "path": "/metadata/labels/x~1y~0z", "value": "1"}]
