"""Does a Job still match its reservation (equivalence.py), and which LocalQueue is a Job in
(jobframework.managed): the pure rules behind following a Job's changes."""

from __future__ import annotations

from gpuqueue.extender.controller.core.equivalence import admission_mismatch, pod_sets_from_admission, same_pod_sets
from gpuqueue.extender.quota.model import Admission, PodSetSpec
from gpuqueue.jobframework.managed import ManagedJobsConfig, StaticQueueView, queue_name_of, stays_managed

GPU = "nvidia.com/gpu"


def admission(count: int, gpus_per_pod: int, cpu_per_pod: int | None = None) -> Admission:
    flavors = {GPU: "gh200", "pods": "gh200"}
    usage = {("gh200", GPU): count * gpus_per_pod, ("gh200", "pods"): count}
    if cpu_per_pod is not None:
        flavors["cpu"] = "gh200"
        usage[("gh200", "cpu")] = count * cpu_per_pod
    return Admission("group-c", {"main": flavors}, usage, {"main": count}, False)


def pod_set(count: int, **per_pod: int) -> tuple[PodSetSpec, ...]:
    return (PodSetSpec("main", count, {GPU if k == "gpu" else k: v for k, v in per_pod.items()}),)


def test_what_the_admission_reserved_matches():
    assert admission_mismatch(pod_set(2, gpu=1), admission(2, 1)) is None
    assert admission_mismatch(pod_set(2, gpu=1, cpu=500), admission(2, 1, cpu_per_pod=500)) is None


def test_count_and_per_pod_changes_are_named():
    assert admission_mismatch(pod_set(8, gpu=1), admission(1, 1)) == "pod set main count 1 -> 8"
    assert admission_mismatch(pod_set(1, gpu=4), admission(1, 1)) == "pod set main nvidia.com/gpu per pod 1 -> 4"
    assert admission_mismatch(pod_set(2, gpu=1, cpu=1500), admission(2, 1, cpu_per_pod=500)) == (
        "pod set main cpu per pod 500m -> 1500m")


def test_a_resource_the_admission_does_not_hold_is_a_change():
    assert admission_mismatch(pod_set(1, gpu=1, memory=2 ** 30), admission(1, 1)) == (
        "pod set main memory per pod 0 -> 1Gi")
    assert admission_mismatch(pod_set(1), admission(1, 1)) == "pod set main nvidia.com/gpu per pod 1 -> 0"


def test_the_pod_sets_of_a_reservation():
    (ps,) = pod_sets_from_admission(admission(4, 2))
    assert (ps.name, ps.count, ps.per_pod) == ("main", 4, {GPU: 2})
    assert admission_mismatch((ps,), admission(4, 2)) is None


def test_two_pod_sets_on_one_flavor_match_their_reservation():
    """Each pod set is held against its own share of the reservation, not the flavor's total."""
    a = Admission("cq", {"leader": {GPU: "gh200"}, "workers": {GPU: "gh200"}}, {("gh200", GPU): 9},
                  {"leader": 1, "workers": 4}, False, pod_set_usage={"leader": {GPU: 1}, "workers": {GPU: 8}})
    sets = (PodSetSpec("leader", 1, {GPU: 1}), PodSetSpec("workers", 4, {GPU: 2}))
    assert admission_mismatch(sets, a) is None
    assert admission_mismatch((sets[0], PodSetSpec("workers", 4, {GPU: 3})), a) == \
        "pod set workers nvidia.com/gpu per pod 2 -> 3"


def test_pending_pod_sets_compare_everything_a_flavor_is_chosen_by():
    a = PodSetSpec("main", 1, {GPU: 1}, node_selector=(("pool", "1"),))
    assert same_pod_sets((a,), (PodSetSpec("main", 1, {GPU: 1}, node_selector=(("pool", "1"),)),))
    assert not same_pod_sets((a,), (PodSetSpec("main", 1, {GPU: 1}),))


def test_a_removed_label_leaves_the_job_in_its_queue_and_a_new_one_moves_it():
    job = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "spare"}}}
    assert queue_name_of(job, "default") == "spare"
    assert queue_name_of({"metadata": {}}, "default") == "default"
    assert queue_name_of({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": ""}}}, "default") == "default"
    assert queue_name_of({"metadata": {}}, None) == ""


def test_a_job_with_an_open_workload_stays_managed_without_its_label():
    view, config = StaticQueueView(), ManagedJobsConfig()
    unlabelled = {"metadata": {"namespace": "team-c"}}
    assert not stays_managed(unlabelled, "team-c", view, config, has_open_workload=False)
    assert stays_managed(unlabelled, "team-c", view, config, has_open_workload=True)
