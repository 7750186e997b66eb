"""Every kind with a suspend flag (JobSet, PyTorchJob, MPIJob, TrainJob, RayJob, RayCluster) through
the webhook over real TLS, routed as kube-apiserver routes it by the manifests' webhook
configurations (tests/admission_support.py): suspended on CREATE, its queue defaulted, held
until the controller unsuspends it, against a hostile tenant's edits. What the webhook lets
through is then created on the API stand-in serving the kind's published CRD (shared/fixtures/crds),
which validates it as kube-apiserver would.

Before the webhook served these kinds every CREATE below went through unsuspended, and every
hostile UPDATE was allowed."""

from __future__ import annotations

import copy

import pytest
from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuqueue.jobframework import registry
from gpuqueue.jobframework.integration import dotted, set_path
from gpuqueue.jobframework.managed import ManagedJobsConfig, StaticQueueView
from gpuqueue.jobframework.registry import IntegrationsConfig
from gpuqueue.webhook.app import WebhookSettings
from gpuqueue.webhook.job_validation import DEFAULT_CONTROLLER_USERNAMES
from tests.admission_support import AdmissionChain, admission_review
from tests.test_jobframework_kinds import Objects, objects  # noqa: F401 (objects: the stand-in fixture)
from tests.webhook_support import make_cert_dir, running_webhook
from tests.workload_kinds import SUSPENDABLE, Sample

CONTROLLER = DEFAULT_CONTROLLER_USERNAMES[0]
EVERY_KIND = IntegrationsConfig(tuple(registry.supported_frameworks()))
OPTED_IN = {"gpuqueue.io/managed": "true"}  # the namespace label that sends unlabelled objects to gpuqueue
QUEUES = StaticQueueView(local_queues={("team-a", "default"), ("team-a", "gpu-queue")})


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    return make_cert_dir(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def chain(cert_dir):
    async with running_webhook(cert_dir, QUEUES, settings=WebhookSettings(integrations=EVERY_KIND)) as hook:
        yield AdmissionChain(hook)


def kueue_path(verb: str, obj: dict) -> str:
    """Kueue's webhook path for the kind (controller-runtime's /<verb>-<group>-<version>-<kind>)."""
    group, version = obj["apiVersion"].split("/")
    return f"/{verb}-{group.replace('.', '-')}-{version}-{obj['kind'].lower()}"


def review(operation: str, obj: dict, old: dict | None = None, user: str = "alice") -> dict:
    integ = registry.integration_for(obj)
    group, version = obj["apiVersion"].split("/")
    return admission_review(operation, (group, version, obj["kind"]), (group, version, integ.plural),
                            namespace="team-a", name=obj["metadata"]["name"], username=user, obj=obj, old=old)


def with_suspend(sample: Sample, value: bool) -> dict:
    obj = sample.fresh()
    set_path(obj, registry.integration_for(obj).suspend_path, value)
    return obj


def scaled(obj: dict) -> dict:
    """More pods in one of its pod sets, as its owner would write it."""
    out = copy.deepcopy(obj)
    spec = out["spec"]
    if obj["kind"] == "JobSet":
        spec["replicatedJobs"][1]["replicas"] = 8
    elif obj["kind"] == "PyTorchJob":
        spec["pytorchReplicaSpecs"]["Worker"]["replicas"] = 16
    elif obj["kind"] == "MPIJob":
        spec["mpiReplicaSpecs"]["Worker"]["replicas"] = 16
    elif obj["kind"] == "TrainJob":
        spec["trainer"]["numNodes"] = 16
    else:
        groups = (spec.get("rayClusterSpec") or spec)["workerGroupSpecs"]
        groups[0].update(replicas=8, maxReplicas=8)
    return out


def relabelled(obj: dict, queue: str | None) -> dict:
    out = copy.deepcopy(obj)
    if queue is None:
        out["metadata"]["labels"].pop(QUEUE_NAME_LABEL)
    else:
        out["metadata"]["labels"][QUEUE_NAME_LABEL] = queue
    return out


async def created(objects: Objects, sample: Sample, obj: dict) -> dict:
    """``obj`` as the API server stores it (its CRD validates it)."""
    objects.api.install_crds(*sample.crds)
    for rel in sample.related:
        await objects.create(copy.deepcopy(rel))
    return await objects.create(obj)


async def waiting_and_running(objects: Objects, sample: Sample) -> tuple[dict, dict]:
    """The sample as stored (suspended, waiting), and as the controller runs it."""
    stored = await created(objects, sample, sample.fresh())
    running = copy.deepcopy(stored)
    set_path(running, registry.integration_for(stored).suspend_path, False)
    return stored, running


kinds = pytest.mark.parametrize("sample", SUSPENDABLE, ids=lambda s: s.kind)


# -- CREATE ------------------------------------------------------------------------------------------

@kinds
async def test_created_unsuspended_with_a_queue_it_is_suspended_at_kueues_path(chain, objects, sample):
    obj = with_suspend(sample, False)
    integ = registry.integration_for(obj)
    out = await chain.admit(review("CREATE", obj))
    assert out.allowed, out.message
    assert f"{obj['kind'].lower()}-with-queue.gpuqueue.io {kueue_path('mutate', obj)}" in out.called
    assert integ.is_suspended(out.object)
    assert out.object["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"
    stored = await created(objects, sample, out.object)
    assert integ.is_suspended(stored)


@kinds
async def test_the_flag_is_added_where_the_object_has_none(chain, objects, sample):
    obj = sample.fresh()
    integ = registry.integration_for(obj)
    path = integ.suspend_path
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    if obj["kind"] in ("PyTorchJob", "MPIJob"):
        del obj["spec"]["runPolicy"]  # the whole parent missing: the patch must add it
    out = await chain.admit(review("CREATE", obj))
    assert out.allowed and integ.is_suspended(out.object), out.message
    assert integ.is_suspended(await created(objects, sample, out.object))


@kinds
async def test_unlabelled_in_an_opted_in_namespace_gets_its_default_local_queue(chain, objects, sample):
    obj = relabelled(with_suspend(sample, False), None)
    out = await chain.admit(review("CREATE", obj), namespace_labels=OPTED_IN)
    assert out.allowed, out.message
    assert f"{obj['kind'].lower()}-default-queue.gpuqueue.io" in out.called[0]
    assert out.object["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"
    assert registry.integration_for(obj).is_suspended(await created(objects, sample, out.object))


@kinds
async def test_manage_jobs_without_queue_name_suspends_it_without_a_queue(cert_dir, sample):
    settings = WebhookSettings(config=ManagedJobsConfig(manage_jobs_without_queue_name=True), integrations=EVERY_KIND)
    obj = relabelled(with_suspend(sample, False), None)
    async with running_webhook(cert_dir, StaticQueueView(), settings=settings) as hook:
        out = await AdmissionChain(hook).admit(review("CREATE", obj), namespace_labels=OPTED_IN)
    assert out.allowed and registry.integration_for(obj).is_suspended(out.object)
    assert QUEUE_NAME_LABEL not in out.object["metadata"]["labels"]


@kinds
async def test_a_kind_whose_integration_is_not_enabled_is_let_through(cert_dir, sample):
    obj = with_suspend(sample, False)
    async with running_webhook(cert_dir, QUEUES) as hook:  # integrations.frameworks: batch/job alone
        out = await AdmissionChain(hook).admit(review("CREATE", obj))
    assert out.allowed and out.object == obj


async def test_a_raycluster_its_rayjob_made_is_queued_through_the_rayjob(chain):
    """Kueue's rule: an object controlled by an enabled kind is not queued on its own."""
    obj = with_suspend(next(s for s in SUSPENDABLE if s.kind == "RayCluster"), False)
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "tune",
                                           "uid": "9b1d", "controller": True}]
    out = await chain.admit(review("CREATE", obj))
    assert out.allowed and out.object == obj


# -- who may unsuspend ----------------------------------------------------------------------------------

@kinds
async def test_only_the_controller_unsuspends(chain, objects, sample):
    stored, running = await waiting_and_running(objects, sample)
    integ = registry.integration_for(stored)
    out = await chain.admit(review("UPDATE", running, stored))
    assert not out.allowed
    assert out.message.startswith(f"{dotted(integ.suspend_path)}: Forbidden: only the gpuqueue controller ({CONTROLLER}) "
                                  f"may set suspend to false on a {sample.kind} managed by gpuqueue; user 'alice' may not")
    assert f"{sample.kind.lower()}.gpuqueue.io {kueue_path('validate', stored)}" in out.called
    assert (await chain.admit(review("UPDATE", running, stored, user=CONTROLLER))).allowed


@kinds
async def test_removing_the_queue_label_then_unsuspending_is_refused_at_the_first_step(chain, objects, sample):
    stored = await created(objects, sample, sample.fresh())
    integ = registry.integration_for(stored)
    unlabelled = relabelled(stored, None)
    out = await chain.admit(review("UPDATE", unlabelled, stored))
    assert not out.allowed
    assert out.message.startswith(f"metadata.labels[{QUEUE_NAME_LABEL}]: Forbidden: the queue-name label may not be "
                                  f"removed from a {sample.kind} managed by gpuqueue")
    # in one update: refused too
    both = copy.deepcopy(unlabelled)
    set_path(both, integ.suspend_path, False)
    assert not (await chain.admit(review("UPDATE", both, stored))).allowed
    # moving it to another LocalQueue is still allowed while it waits
    assert (await chain.admit(review("UPDATE", relabelled(stored, "gpu-queue"), stored))).allowed


@kinds
async def test_claiming_a_queued_owner_to_leave_the_queue_is_refused(chain, objects, sample):
    stored = await created(objects, sample, sample.fresh())
    owned = copy.deepcopy(stored)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                             "name": "decoy", "uid": "4f7e", "controller": True}]
    if sample.kind == "JobSet":
        owned["metadata"]["ownerReferences"][0].update(apiVersion="ray.io/v1", kind="RayJob")
    out = await chain.admit(review("UPDATE", owned, stored))
    assert not out.allowed
    assert out.message.startswith(f"metadata.ownerReferences: Forbidden: a {sample.kind} managed by gpuqueue may not be "
                                  "given a controller of a queued kind")


@kinds
async def test_queue_label_is_immutable_while_admitted(chain, objects, sample):
    _, running = await waiting_and_running(objects, sample)
    out = await chain.admit(review("UPDATE", relabelled(running, "gpu-queue"), running, user="alice"))
    assert not out.allowed
    assert out.message == (f"metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: 'gpu-queue': field is immutable while "
                           f"the {sample.kind} is admitted (not suspended)")


@kinds
async def test_a_queue_name_that_cannot_name_a_local_queue_is_refused_as_kueue_does(chain, objects, sample):
    stored = await created(objects, sample, sample.fresh())
    out = await chain.admit(review("UPDATE", relabelled(stored, "GPU_Queue"), stored))
    assert not out.allowed
    assert out.message.startswith(f'metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "GPU_Queue": a lowercase '
                                  "RFC 1123 subdomain")


@kinds
async def test_replica_counts_of_a_waiting_object_may_change_but_not_with_an_unsuspend(chain, objects, sample):
    """A waiting object's pod sets are the user's to change (its Workload follows them, as in
    Kueue); what the webhook holds is the suspend flag, so more pods cannot start with it."""
    stored = await created(objects, sample, sample.fresh())
    integ = registry.integration_for(stored)
    lookup = objects.lookup
    bigger = scaled(stored)
    assert sum(p.count for p in integ.pod_sets(bigger, lookup)) > sum(p.count for p in integ.pod_sets(stored, lookup))
    out = await chain.admit(review("UPDATE", bigger, stored))
    assert out.allowed, out.message
    await objects.replace(out.object)  # the CRD takes the edit
    running = copy.deepcopy(bigger)
    set_path(running, integ.suspend_path, False)
    out = await chain.admit(review("UPDATE", running, stored))
    assert not out.allowed and out.message.startswith(f"{dotted(integ.suspend_path)}: Forbidden")
    # on a running object, as on a running Job, a new count is the controller's to answer (evicted and
    # requeued with the new pod sets); meanwhile the extender admits no pod past its pod set's count
    admitted = copy.deepcopy(stored)
    set_path(admitted, integ.suspend_path, False)
    assert (await chain.admit(review("UPDATE", scaled(admitted), admitted))).allowed


# -- what Kueue refuses in a managed object of a kind ----------------------------------------------------

RAY = {s.kind: s for s in SUSPENDABLE if s.kind in ("RayJob", "RayCluster")}


def cluster_spec(obj: dict) -> dict:
    return obj["spec"].get("rayClusterSpec") or obj["spec"]


@pytest.mark.parametrize("kind", ["RayJob", "RayCluster"])
@pytest.mark.parametrize("edit, message", [
    (lambda o: cluster_spec(o).update(enableInTreeAutoscaling=True),
     "{root}.enableInTreeAutoscaling: Invalid value: true: a kueue managed job should not use autoscaling"),
    (lambda o: cluster_spec(o)["workerGroupSpecs"][0].update(groupName="head"),
     '{root}.workerGroupSpecs[0].groupName: Forbidden: "head" is reserved for the head group'),
    (lambda o: cluster_spec(o).update(workerGroupSpecs=[dict(cluster_spec(o)["workerGroupSpecs"][0], groupName=f"g{i}")
                                                        for i in range(8)]),
     "{root}.workerGroupSpecs: Too many: 8: must have at most 7 items"),
], ids=["autoscaling", "head-group", "eight-groups"])
async def test_a_ray_autoscaler_or_worker_groups_kueue_cannot_admit_are_refused(chain, kind, edit, message):
    obj = RAY[kind].fresh()
    edit(obj)
    out = await chain.admit(review("CREATE", obj))
    assert not out.allowed
    root = "spec.rayClusterSpec" if kind == "RayJob" else "spec"
    assert out.message == message.format(root=root)


async def test_a_rayjob_must_delete_its_cluster_when_it_finishes(chain):
    obj = RAY["RayJob"].fresh()
    obj["spec"]["shutdownAfterJobFinishes"] = False
    out = await chain.admit(review("CREATE", obj))
    assert not out.allowed
    assert out.message == ("spec.shutdownAfterJobFinishes: Invalid value: false: a kueue managed job should delete the "
                           "cluster after finishing")


async def test_a_rayjob_on_an_existing_cluster_is_not_queued_and_cannot_be_turned_into_one(chain, objects):
    obj = RAY["RayJob"].fresh()
    del obj["spec"]["rayClusterSpec"]
    obj["spec"].update(clusterSelector={"ray.io/cluster": "shared"}, suspend=False)
    out = await chain.admit(review("CREATE", obj))
    assert out.allowed and out.object == obj  # the cluster it runs on is queued, not this RayJob
    both = RAY["RayJob"].fresh()
    both["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    out = await chain.admit(review("CREATE", both))
    assert not out.allowed and out.message.startswith(
        'spec.clusterSelector: Invalid value: {"ray.io/cluster": "shared"}: a kueue managed job should not use an '
        "existing cluster")
    stored = await created(objects, RAY["RayJob"], RAY["RayJob"].fresh())
    out = await chain.admit(review("UPDATE", obj, stored))
    assert not out.allowed and out.message.startswith("spec: Forbidden: a RayJob managed by gpuqueue may not be changed")


async def test_a_job_created_with_a_queue_name_that_cannot_name_a_local_queue_is_refused(chain):
    """batch/v1 Jobs are validated on CREATE too (the manifests route CREATE to the Job's
    validating webhook, as for the other kinds); before, only UPDATE reached it and this Job was
    created."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "team-a", "labels": {QUEUE_NAME_LABEL: "GPU_Queue"}},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "main", "image": "train:1"}]}}}}
    out = await chain.admit(review("CREATE", job))
    assert not out.allowed
    assert out.message.startswith(f'metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "GPU_Queue": a lowercase '
                                  "RFC 1123 subdomain")


def with_class(obj: dict, name: str | None) -> dict:
    """Its WorkloadPriorityClass label set to `name` (None: removed)."""
    out = copy.deepcopy(obj)
    out["metadata"]["labels"].pop(PRIORITY_CLASS_LABEL, None)
    if name is not None:
        out["metadata"]["labels"][PRIORITY_CLASS_LABEL] = name
    return out


@kinds
async def test_the_priority_class_may_change_but_is_not_removed_nor_added_to_a_running_object(chain, objects, sample):
    """Kueue's rule for the WorkloadPriorityClass label (the controller moves the Workload to the
    class named): another class at any time; added only while it waits; never removed."""
    waiting, running = await waiting_and_running(objects, sample)
    path = f"metadata.labels[{PRIORITY_CLASS_LABEL}]"
    waiting_low, running_low = with_class(waiting, "low"), with_class(running, "low")
    assert (await chain.admit(review("UPDATE", waiting_low, waiting))).allowed
    assert (await chain.admit(review("UPDATE", with_class(waiting_low, "high"), waiting_low))).allowed
    assert (await chain.admit(review("UPDATE", with_class(running_low, "high"), running_low))).allowed
    out = await chain.admit(review("UPDATE", with_class(running, "high"), running))
    assert not out.allowed
    assert out.message == f'{path}: Invalid value: "high": WorkloadPriorityClass cannot be added to a non-suspended workload'
    for stored in (waiting_low, running_low):
        out = await chain.admit(review("UPDATE", with_class(stored, None), stored))
        assert not out.allowed
        assert out.message == f'{path}: Invalid value: "": WorkloadPriorityClass cannot be removed from a workload'
