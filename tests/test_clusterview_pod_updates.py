"""The extender's pod cache on a watch update (CacheView.upsert_pod with the version it held):
whatever changed, the pod it then judges by is the one a full read of the new version gives;
the full read is skipped only when nothing it reads changed (a binding, a status update)."""

from __future__ import annotations

import copy

import pytest

from gpuqueue.api.core import Pod
from gpuqueue.extender.scheduler.verbs import filter_verb
from gpuqueue.extender.scheduler.view import CachedPod
from tests.test_scheduler_cache_lag import _pod, _request, _view, _workload


def _bound(pod: dict, rv: str) -> dict:
    new = copy.deepcopy(pod)
    new["metadata"]["resourceVersion"] = rv
    new["spec"]["nodeName"] = "n-1"
    new["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    return new


def _edit(pod: dict, what: str) -> dict:
    new = _bound(pod, "31")
    meta, spec = new["metadata"], new["spec"]
    if what == "label":
        meta["labels"]["kueue.x-k8s.io/pod-group-name"] = "g"
    elif what == "annotation":
        meta["annotations"] = {"kueue.x-k8s.io/role-hash": "a1"}
    elif what == "owner dropped":
        meta["ownerReferences"] = []
    elif what == "toleration":
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    elif what == "resized":
        spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    elif what == "name":
        meta["name"] = "p-1"
    elif what == "deleted":
        meta.update(deletionTimestamp="2026-12-07T22:37:23Z", deletionGracePeriodSeconds=30, generation=2)
    elif what == "node selector":
        spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}
    return new


EDITS = ["binding", "deleted", "label", "annotation", "owner dropped", "toleration", "resized", "name", "node selector"]


@pytest.mark.parametrize("what", EDITS)
def test_after_an_update_the_pod_is_judged_as_a_full_read_of_the_new_version_gives(what):
    view = _view()
    old = _pod("30")
    view.upsert_pod(old)
    new = _edit(old, what)
    view.upsert_pod(new, old)
    held = view.pod("pod-uid")
    assert held == CachedPod.of(Pod.model_validate(new))
    assert held.resource_version == "31"
    assert view.nodes.pod_node("pod-uid") == ("n-1", True)


def test_only_a_binding_a_status_or_a_deletion_makes_the_same_cached_pod():
    old = _pod("30")
    alike = {what for what in EDITS if CachedPod.made_alike(_edit(old, what), old)}
    assert alike == {"binding", "deleted"}


# Every metadata field a pod of a real cluster carries that a CachedPod is not made of, changed.
UNREAD_METADATA = {"generation": 3, "deletionTimestamp": "2026-12-07T22:37:23Z", "deletionGracePeriodSeconds": 0,
                   "creationTimestamp": "2026-12-07T22:36:39Z", "generateName": "p-", "finalizers": ["a/b"],
                   "managedFields": [{"manager": "kubelet", "operation": "Update"}]}


@pytest.mark.parametrize("key", sorted(UNREAD_METADATA))
def test_what_made_alike_leaves_out_is_what_a_cached_pod_is_not_made_of(key):
    """If ``of`` ever reads one of these, made_alike (METADATA_READ) must learn it too."""
    assert key not in CachedPod.METADATA_READ
    old = _pod("30")
    new = copy.deepcopy(old)
    new["metadata"][key] = UNREAD_METADATA[key]
    assert CachedPod.made_alike(new, old)
    assert CachedPod.of(Pod.model_validate(new)) == CachedPod.of(Pod.model_validate(old))


def test_an_update_from_a_version_the_view_did_not_take_in_is_read_in_full():
    view = _view()
    view.upsert_pod(_pod("30"))
    skipped = _pod("31", **{"kueue.x-k8s.io/pod-group-name": "g"})  # the view never saw this one
    new = _bound(skipped, "32")
    view.upsert_pod(new, skipped)
    assert view.pod("pod-uid") == CachedPod.of(Pod.model_validate(new))


def test_a_pod_whose_owner_is_dropped_after_admission_is_refused_at_its_new_version():
    """A tenant edits the admitted Job's pod to belong to nothing: the next /filter, naming the
    new version, is refused on that version, not judged on the one before."""
    view = _view()
    view.upsert_workload(_workload("20", admitted=True))
    old = _pod("30")
    view.upsert_pod(old)
    assert filter_verb(_request(old), view)["NodeNames"] == ["n-1"]
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "31"
    new["metadata"]["ownerReferences"] = []
    view.upsert_pod(new, old)
    answer = filter_verb(_request(new), view)
    assert answer["NodeNames"] == [] and "belongs to no admitted workload" in answer["FailedAndUnresolvableNodes"]["n-1"]
