"""mutate_job: the pure Job mutation shared by the webhook and the simulator."""

from __future__ import annotations

import copy

import pytest

from tests.webhook_support import PatchError, apply_json_patch, load_review
from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuqueue.jobframework.managed import ManagedJobsConfig, StaticQueueView, is_managed
from gpuqueue.jobframework.mutation import mutate_job

CFG = ManagedJobsConfig()


def job_from(fixture: str) -> dict:
    return load_review(fixture)["request"]["object"]


def test_labelled_job_already_suspended_needs_no_patch():
    job = job_from("mutating-review-request.job-create.with-queue-name-label.json")
    assert job["spec"]["suspend"] is True
    res = mutate_job(job, StaticQueueView(), CFG)
    assert res.managed and res.queue_name == "gpu-queue"
    assert res.patch == []
    assert not res.changed


def test_labelled_job_asking_suspend_false_is_suspended():
    job = job_from("mutating-review-request.job-create.suspend-false.json")
    before = copy.deepcopy(job)
    res = mutate_job(job, StaticQueueView(), CFG)
    assert res.patch == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert res.job["spec"]["suspend"] is True
    assert job == before, "the input must not be modified"
    assert apply_json_patch(job, res.patch) == res.job


def test_job_without_labels_defaults_to_default_local_queue_with_whole_label_map():
    job = job_from("mutating-review-request.job-create.no-labels.json")
    assert "labels" not in job["metadata"]
    queues = StaticQueueView(local_queues={("team-a", "default")})
    res = mutate_job(job, queues, CFG)
    assert res.managed and res.queue_name == "default"
    # The whole map: a per-key add on a Job without labels is refused by the API server.
    assert {"op": "add", "path": "/metadata/labels", "value": {QUEUE_NAME_LABEL: "default"}} in res.patch
    assert {"op": "add", "path": "/spec/suspend", "value": True} in res.patch
    patched = apply_json_patch(job, res.patch)
    assert patched == res.job
    assert patched["metadata"]["labels"] == {QUEUE_NAME_LABEL: "default"}


def test_per_key_label_add_on_a_job_without_labels_is_what_the_api_server_rejects():
    # Guards the helper itself: the bad patch from the recorded failure must fail here too.
    job = job_from("mutating-review-request.job-create.no-labels.json")
    with pytest.raises(PatchError, match="doc is missing path"):
        apply_json_patch(job, [{"op": "add", "path": "/metadata/labels/a~1b", "value": "x"}])


def test_default_local_queue_in_another_namespace_does_not_count():
    job = job_from("mutating-review-request.job-create.no-labels.json")
    res = mutate_job(job, StaticQueueView(local_queues={("team-b", "default")}), CFG)
    assert not res.managed and res.patch == [] and res.queue_name is None
    assert res.job == job


def test_unmanaged_job_untouched():
    job = job_from("mutating-review-request.job-create.no-labels.json")
    res = mutate_job(job, StaticQueueView(), CFG)
    assert (res.managed, res.patch) == (False, [])


def test_empty_queue_label_counts_as_no_label_and_is_replaced_per_key():
    job = job_from("mutating-review-request.job-create.with-queue-name-label.json")
    job["metadata"]["labels"][QUEUE_NAME_LABEL] = ""
    res = mutate_job(job, StaticQueueView(local_queues={("team-a", "default")}), CFG)
    assert res.patch == [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "default"}]
    assert apply_json_patch(job, res.patch)["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"


def test_manage_jobs_without_queue_name_suspends_in_selected_namespaces_only():
    job = job_from("mutating-review-request.job-create.no-labels.json")
    cfg = ManagedJobsConfig.from_kueue_configuration(
        {"manageJobsWithoutQueueName": True, "managedJobsNamespaceSelector": {"matchLabels": {"gpu": "yes"}}}
    )
    selected = StaticQueueView(namespaces={"team-a": {"gpu": "yes"}})
    res = mutate_job(job, selected, cfg)
    assert res.managed and res.queue_name is None
    assert res.patch == [{"op": "add", "path": "/spec/suspend", "value": True}]
    other = StaticQueueView(namespaces={"team-a": {"gpu": "no"}})
    assert mutate_job(job, other, cfg).patch == []


def test_manage_jobs_without_queue_name_default_selector_spares_kube_system():
    job = job_from("mutating-review-request.job-create.no-labels.json")
    cfg = ManagedJobsConfig(manage_jobs_without_queue_name=True)
    # Namespace labels unknown (no cluster): the namespace-name label is still known.
    assert mutate_job(job, StaticQueueView(), cfg).managed
    assert not mutate_job(job, StaticQueueView(), cfg, namespace="kube-system").managed


def test_default_priority_class_label_added_to_managed_jobs_only():
    queues = StaticQueueView(default_priority_class_name="normal")
    job = job_from("mutating-review-request.job-create.with-queue-name-label.json")
    res = mutate_job(job, queues, CFG)
    assert res.patch == [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1priority-class", "value": "normal"}]
    assert res.job["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "normal"
    job["metadata"]["labels"][PRIORITY_CLASS_LABEL] = "high"
    assert mutate_job(job, queues, CFG).patch == []
    plain = job_from("mutating-review-request.job-create.no-labels.json")
    assert mutate_job(plain, queues, CFG).patch == []


def test_malformed_jobs_raise_value_error_naming_the_field():
    with pytest.raises(ValueError, match="object.spec"):
        mutate_job({"metadata": {"namespace": "a"}}, StaticQueueView(), CFG)
    with pytest.raises(ValueError, match="labels"):
        mutate_job({"metadata": {"namespace": "a", "labels": []}, "spec": {}}, StaticQueueView(), CFG)
    with pytest.raises(ValueError, match="namespace"):
        mutate_job({"metadata": {}, "spec": {}}, StaticQueueView(), CFG)


def test_bad_configuration_is_refused_with_the_field():
    with pytest.raises(ValueError, match="manageJobsWithoutQueueName"):
        ManagedJobsConfig.from_kueue_configuration({"manageJobsWithoutQueueName": "yes"})
    with pytest.raises(ValueError, match=r"managedJobsNamespaceSelector.matchExpressions\[0\].operator"):
        ManagedJobsConfig.from_kueue_configuration(
            {"managedJobsNamespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}
        )


def test_is_managed_after_mutation():
    job = job_from("mutating-review-request.job-create.no-labels.json")
    res = mutate_job(job, StaticQueueView(local_queues={("team-a", "default")}), CFG)
    assert is_managed(res.job, "team-a", StaticQueueView(), CFG)
    assert not is_managed(job, "team-a", StaticQueueView(), CFG)
