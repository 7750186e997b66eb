"""The controller's record of a pod group (extender/controller/kinds/pod_groups.py): the pods of one
group gathered from pod events, and the Workload Kueue makes of them - named after the group,
owned by every pod, a pod set per role, made only once the group is complete, with Kueue's
messages when it cannot be."""

from __future__ import annotations

from gpuqueue.extender.controller.kinds.pod_groups import PodGroups, group_key
from gpuqueue.jobframework.kinds import pods as P
from tests.workload_kinds import GPU, container


def member(name: str, gpus: int = 1, total: int = 3, phase: str | None = None, queue: str = "default",
           group: str = "sweep", created: str = "2026-01-01T00:00:00Z", **annotations: str) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "creationTimestamp": created,
                        "labels": {"kueue.x-k8s.io/queue-name": queue, P.GROUP_NAME_LABEL: group,
                                   P.MANAGED_LABEL: "true"},
                        "annotations": {P.GROUP_TOTAL_COUNT: str(total), **annotations}},
           "spec": {"containers": [container("main", gpus)]}}
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def fed(*pods: dict) -> PodGroups:
    groups = PodGroups()
    for pod in pods:
        groups.on_pod(pod)
    return groups


def test_a_group_is_queued_only_once_its_total_count_of_pods_exists():
    groups = PodGroups()
    assert groups.on_pod(member("w-0")) == {"team-a/sweep"}
    groups.on_pod(member("w-1"))
    group = groups.get("team-a/sweep")
    assert group.problem() == "'sweep' group has fewer runnable pods than expected"
    groups.on_pod(member("w-2", created="2026-01-01T00:00:05Z"))
    group = groups.get("team-a/sweep")
    assert group.problem() is None
    assert group.workload_name == "sweep"
    assert [(ps.name, ps.count, ps.engine_requests()) for ps in group.pod_sets()] == [
        (P.pod_role(member("w-0")), 3, {GPU: 1})]


def test_every_pod_owns_the_group_workload_and_none_controls_it():
    group = fed(member("w-0"), member("w-1"), member("w-2")).get("team-a/sweep")
    refs = group.owner_references()
    assert [r["name"] for r in refs] == ["w-0", "w-1", "w-2"]
    assert all(r["kind"] == "Pod" and r["apiVersion"] == "v1" and not r.get("controller") for r in refs)


def test_a_pod_set_per_role_each_with_its_own_count_and_requests():
    group = fed(member("leader", gpus=0, total=3), member("w-0", gpus=4, total=3),
                member("w-1", gpus=4, total=3)).get("team-a/sweep")
    assert group.problem() is None
    counted = sorted((ps.count, ps.engine_requests().get(GPU, 0)) for ps in group.pod_sets())
    assert counted == [(1, 0), (2, 4)]


def test_a_failed_pod_does_not_count_toward_the_group_and_a_deleted_one_leaves_it():
    groups = fed(member("w-0"), member("w-1"), member("w-2", phase="Failed"))
    assert groups.get("team-a/sweep").problem() == "'sweep' group has fewer runnable pods than expected"
    groups.on_pod_delete(member("w-2"))
    assert [p["metadata"]["name"] for p in groups.get("team-a/sweep").pods] == ["w-0", "w-1"]
    groups.on_pod_delete(member("w-0"))
    groups.on_pod_delete(member("w-1"))
    assert groups.get("team-a/sweep") is None


def test_pods_beyond_the_total_count_are_not_counted_newest_first_excess():
    group = fed(member("w-0"), member("w-1", created="2026-01-01T00:00:01Z"),
                member("w-9", created="2026-01-01T00:00:09Z"), member("w-2", created="2026-01-01T00:00:02Z"),
                ).get("team-a/sweep")
    assert [p["metadata"]["name"] for p in group.members()] == ["w-0", "w-1", "w-2"]
    assert [p["metadata"]["name"] for p in group.excess()] == ["w-9"]
    assert sum(ps.count for ps in group.pod_sets()) == 3


def test_pods_that_disagree_on_count_or_queue_are_named_as_kueue_names_them():
    assert fed(member("w-0"), member("w-1", total=2), member("w-2")).get("team-a/sweep").problem() == (
        "pods 'w-0' and 'w-1' has different 'kueue.x-k8s.io/pod-group-total-count' values: 3!=2")
    assert fed(member("w-0"), member("w-1", queue="other"), member("w-2")).get("team-a/sweep").problem() == (
        "pods 'w-0' and 'w-1' has different queue names: default!=other")


def test_fast_admission_queues_an_incomplete_group_for_its_whole_count():
    """Kueue's constructGroupPodSetsFast: one pod set, the first runnable pod's role, of the
    group's total count, queued before every pod exists (a StatefulSet's pods ask for it)."""
    group = fed(member("web-0", **{P.GROUP_FAST_ADMISSION: "true"})).get("team-a/sweep")
    assert group.problem() is None
    assert [(ps.name, ps.count) for ps in group.pod_sets()] == [(P.pod_role(member("web-0")), 3)]


def test_finished_when_as_many_pods_succeeded_as_it_counts():
    groups = fed(member("w-0", phase="Succeeded"), member("w-1", phase="Succeeded"), member("w-2"))
    assert groups.get("team-a/sweep").finished() is None
    groups.on_pod(member("w-2", phase="Succeeded"))
    assert groups.get("team-a/sweep").finished().succeeded


def test_only_the_webhook_gated_pods_of_a_group_are_gathered():
    unmanaged = member("w-0")
    del unmanaged["metadata"]["labels"][P.MANAGED_LABEL]
    assert group_key(unmanaged) is None
    assert fed(unmanaged).get("team-a/sweep") is None
    single = member("solo")
    del single["metadata"]["labels"][P.GROUP_NAME_LABEL]
    assert group_key(single) is None
    other_ns = member("w-0")
    other_ns["metadata"]["namespace"] = "team-b"
    groups = fed(member("w-0"), other_ns)
    assert len(groups.get("team-a/sweep").pods) == 1 and len(groups.get("team-b/sweep").pods) == 1
