"""Kueue's pod integration, the webhook's side, over real TLS and routed by the manifests' webhook
configurations (tests/admission_support.py): pods gated on CREATE, pod groups checked with
Kueue's messages, the gate lifted by the controller alone, Deployments', StatefulSets' and
LeaderWorkerSets' pod templates marked so that their pods are queued (LeaderWorkerSet against its
published CRD on the API stand-in), and what happens on a server without scheduling gates (1.24).

Before the pod integration was served, no pod was gated, every pod-group metadata was accepted,
the gate could be removed by anyone and no template was marked."""

from __future__ import annotations

import asyncio
import copy
import logging

import pytest
from kubernetes_asyncio import client

from gpuqueue.api.kueue import QUEUE_NAME_LABEL
from gpuqueue.jobframework import registry
from gpuqueue.jobframework.managed import StaticQueueView
from gpuqueue.jobframework.names import role_hash
from gpuqueue.jobframework.registry import IntegrationsConfig
from gpuqueue.webhook.app import WebhookSettings
from gpuqueue.webhook.job_validation import DEFAULT_CONTROLLER_USERNAMES
from tests.admission_support import AdmissionChain, admission_review, pod, pod_create
from tests.standin import ApiServer
from tests.standin import resources as R
from tests.test_jobframework_kinds import Objects
from tests.test_webhook_kinds import cert_dir  # noqa: F401 (fixture)
from tests.webhook_support import make_cert_dir, running_webhook
from tests.workload_kinds import DEPLOYMENT, LWS, STATEFULSET

CONTROLLER = DEFAULT_CONTROLLER_USERNAMES[0]
GATE = {"name": "kueue.x-k8s.io/admission"}
MANAGED, GROUP, COUNT = "kueue.x-k8s.io/managed", "kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/pod-group-total-count"
PARENT, ROLE = "kueue.x-k8s.io/pod-suspending-parent", "kueue.x-k8s.io/role-hash"
WITH_PODS = IntegrationsConfig(("batch/job", "pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"))
QUEUES = StaticQueueView(local_queues={("team-a", "gpu-queue")})
QUEUED = {QUEUE_NAME_LABEL: "gpu-queue"}
BOTH = f"both the '{COUNT}' annotation and the '{GROUP}' label should be set"


@pytest.fixture
async def chain(cert_dir):
    async with running_webhook(cert_dir, QUEUES, settings=WebhookSettings(integrations=WITH_PODS)) as hook:
        yield AdmissionChain(hook)


def pod_update(new: dict, old: dict, user: str = "alice") -> dict:
    meta = new["metadata"]
    return admission_review("UPDATE", ("", "v1", "Pod"), ("", "v1", "pods"), namespace=meta["namespace"],
                            name=meta["name"], username=user, obj=new, old=old)


def gates(p: dict) -> list:
    return p["spec"].get("schedulingGates") or []


# -- CREATE: gated --------------------------------------------------------------------------------------

async def test_a_pod_with_the_queue_label_is_gated_labelled_managed_and_kept_by_a_finalizer(chain):
    out = await chain.admit(pod_create(pod(labels=QUEUED, scheduler_name="my-scheduler")))
    assert out.allowed, out.message
    stored = out.object
    assert gates(stored) == [GATE]
    assert stored["metadata"]["labels"][MANAGED] == "true"
    assert stored["metadata"]["finalizers"] == [MANAGED]
    assert ROLE not in (stored["metadata"].get("annotations") or {})  # not in a group
    # the enforcement step's patch applies along with it
    assert stored["spec"]["schedulerName"] == "default-scheduler"


async def test_a_pod_without_a_queue_is_left_alone_and_one_in_a_default_queue_namespace_is_queued(cert_dir, chain):
    plain = pod(gpus=0)
    out = await chain.admit(pod_create(plain))
    assert out.allowed and out.object == plain
    queues = StaticQueueView(local_queues={("team-a", "default")})
    async with running_webhook(cert_dir, queues, settings=WebhookSettings(integrations=WITH_PODS)) as hook:
        out = await AdmissionChain(hook).admit(pod_create(pod(gpus=0)))
    assert out.object["metadata"]["labels"] == {QUEUE_NAME_LABEL: "default", MANAGED: "true"}
    assert gates(out.object) == [GATE]


async def test_a_pod_of_a_queued_kind_is_not_queued_on_its_own(chain):
    """Kueue's rule: a Job's pods are the Job's (its Workload counts them), even with the label."""
    p = pod(labels=QUEUED)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1",
                                         "controller": True}]
    out = await chain.admit(pod_create(p))
    assert out.allowed and gates(out.object) == [] and MANAGED not in out.object["metadata"]["labels"]


async def test_a_pod_its_parent_marked_is_queued_whatever_owns_it(chain):
    p = pod(annotations={PARENT: "deployment"})
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer-5d9c",
                                         "uid": "u2", "controller": True}]
    out = await chain.admit(pod_create(p))
    assert out.allowed and gates(out.object) == [GATE]


async def test_a_pod_group_member_gets_its_role_hash(chain):
    out = await chain.admit(pod_create(pod(labels={**QUEUED, GROUP: "ddp"}, annotations={COUNT: "4"})))
    assert out.allowed, out.message
    annotations = out.object["metadata"]["annotations"]
    assert annotations[ROLE] == role_hash(out.object["spec"])  # what the controller groups the pods by
    other = await chain.admit(pod_create(pod(labels={**QUEUED, GROUP: "ddp"}, annotations={COUNT: "4"}, gpus=2)))
    assert other.object["metadata"]["annotations"][ROLE] != annotations[ROLE]  # another role


@pytest.mark.parametrize("labels, annotations, message", [
    ({GROUP: "ddp"}, {}, f"metadata.annotations[{COUNT}]: Required value: {BOTH}"),
    ({}, {COUNT: "2"}, f"metadata.labels[{GROUP}]: Required value: {BOTH}"),
    ({GROUP: "ddp"}, {COUNT: "two"}, f'metadata.annotations[{COUNT}]: Invalid value: "two": strconv.Atoi: parsing "two": '
                                     "invalid syntax"),
    ({GROUP: "ddp"}, {COUNT: "0"}, f'metadata.annotations[{COUNT}]: Invalid value: "0": incorrect annotation value '
                                   f"'{COUNT}=0': group total count should be greater than zero"),
    ({GROUP: "DDP_1"}, {COUNT: "2"}, f'metadata.labels[{GROUP}]: Invalid value: "DDP_1": a lowercase RFC 1123 subdomain'),
])
async def test_pod_group_metadata_is_checked_with_kueues_messages(chain, labels, annotations, message):
    out = await chain.admit(pod_create(pod(labels={**QUEUED, **labels}, annotations=annotations)))
    assert not out.allowed
    assert out.message.startswith(message), out.message


async def test_a_managed_label_other_than_true_is_refused(chain):
    """On a pod that is not queued (a queued one gets "true" from the mutation)."""
    out = await chain.admit(pod_create(pod(labels={MANAGED: "yes"})))
    assert not out.allowed
    assert out.message == f"metadata.labels[{MANAGED}]: Forbidden: managed label value can only be 'true'"


# -- UPDATE: only the controller lifts the gate -----------------------------------------------------------

async def gated_pod(chain, **kw) -> dict:
    out = await chain.admit(pod_create(pod(**kw)))
    assert out.allowed and gates(out.object) == [GATE], out.message
    return out.object


async def test_only_the_controller_removes_the_gate(chain):
    stored = await gated_pod(chain, labels=QUEUED)
    ungated = copy.deepcopy(stored)
    ungated["spec"].pop("schedulingGates")
    out = await chain.admit(pod_update(ungated, stored))
    assert not out.allowed
    assert out.message.startswith(f"spec.schedulingGates: Forbidden: only the gpuqueue controller ({CONTROLLER}) may "
                                  "remove the scheduling gate kueue.x-k8s.io/admission from a Pod managed by gpuqueue; "
                                  "user 'alice' may not")
    assert "pod-update.gpuqueue.io /validate--v1-pod" in out.called
    assert (await chain.admit(pod_update(ungated, stored, user=CONTROLLER))).allowed


async def test_dropping_the_labels_to_lift_the_gate_is_refused(chain):
    stored = await gated_pod(chain, labels=QUEUED)
    stripped = copy.deepcopy(stored)
    stripped["metadata"]["labels"] = {}
    out = await chain.admit(pod_update(stripped, stored))  # still sent: the old pod carries the managed label
    assert not out.allowed and out.message.startswith(
        f"metadata.labels[{MANAGED}]: Forbidden: only the gpuqueue controller may remove it from a pod queued by gpuqueue")
    stripped["spec"].pop("schedulingGates")
    assert not (await chain.admit(pod_update(stripped, stored))).allowed
    # the queue label alone: the pod stays queued, managed by its label
    unqueued = copy.deepcopy(stored)
    del unqueued["metadata"]["labels"][QUEUE_NAME_LABEL]
    out = await chain.admit(pod_update(unqueued, stored))
    assert not out.allowed and "may not take it out of its queue" in out.message


async def test_a_pod_labelled_managed_by_its_author_is_not_refused(chain):
    """Not queued (no queue label): the label alone is not gpuqueue's mark (Kueue lets it be)."""
    assert (await chain.admit(pod_create(pod(labels={MANAGED: "true"})))).allowed


async def test_pod_group_name_is_immutable(chain):
    stored = await gated_pod(chain, labels={**QUEUED, GROUP: "ddp"}, annotations={COUNT: "2"})
    moved = copy.deepcopy(stored)
    moved["metadata"]["labels"][GROUP] = "other"
    out = await chain.admit(pod_update(moved, stored))
    assert not out.allowed
    assert out.message == f'metadata.labels[{GROUP}]: Invalid value: "other": field is immutable'


# -- parents: their pod templates marked -------------------------------------------------------------------

def parent_create(obj: dict) -> dict:
    integ = registry.integration_for(obj)
    group, _, version = obj["apiVersion"].rpartition("/")
    return admission_review("CREATE", (group, version, obj["kind"]), (group, version, integ.plural),
                            namespace="team-a", name=obj["metadata"]["name"], username="alice", obj=obj)


async def test_a_deployment_marks_its_pod_template_and_its_pods_are_gated(chain):
    out = await chain.admit(parent_create(DEPLOYMENT.fresh()))
    assert out.allowed, out.message
    assert "deployment-with-queue.gpuqueue.io /mutate-apps-v1-deployment" in out.called
    template = out.object["spec"]["template"]["metadata"]
    assert template["annotations"][PARENT] == "deployment"
    assert template["labels"][QUEUE_NAME_LABEL] == "default"
    assert template["labels"]["app"] == "infer"
    # a pod made from it, owned by its ReplicaSet, is gated
    p = pod(labels=template["labels"], annotations=template["annotations"])
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer-7c5d",
                                         "uid": "u3", "controller": True}]
    assert gates((await chain.admit(pod_create(p))).object) == [GATE]


async def test_a_statefulset_makes_one_pod_group_of_its_replicas(chain):
    out = await chain.admit(parent_create(STATEFULSET.fresh()))
    assert out.allowed, out.message
    meta = out.object["spec"]["template"]["metadata"]
    assert meta["labels"][GROUP].startswith("statefulset-shard-")
    assert meta["annotations"][COUNT] == "2"
    member = await chain.admit(pod_create(pod(labels=meta["labels"], annotations=meta["annotations"])))
    assert member.allowed and gates(member.object) == [GATE] and ROLE in member.object["metadata"]["annotations"]


async def test_a_leaderworkerset_is_marked_and_its_crd_accepts_it(chain):
    out = await chain.admit(parent_create(LWS.fresh()))
    assert out.allowed, out.message
    lwt = out.object["spec"]["leaderWorkerTemplate"]
    for template in (lwt["leaderTemplate"], lwt["workerTemplate"]):
        assert template["metadata"]["annotations"][PARENT] == "leaderworkerset.x-k8s.io/leaderworkerset"
    async with ApiServer() as api:
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a"}})
        api.install_crds(*LWS.crds)
        async with client.ApiClient(api.client_configuration()) as ac:
            stored = await Objects(client.CustomObjectsApi(ac), api).create(out.object)
    assert stored["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"][PARENT]


async def test_without_the_pod_integration_nothing_is_gated_or_marked(cert_dir):
    async with running_webhook(cert_dir, QUEUES) as hook:  # integrations.frameworks: batch/job alone
        chain = AdmissionChain(hook)
        deployment = DEPLOYMENT.fresh()
        assert (await chain.admit(parent_create(deployment))).object == deployment
        out = await chain.admit(pod_create(pod(labels=QUEUED)))
    assert out.allowed and gates(out.object) == []


# -- a server without scheduling gates (before 1.27) -----------------------------------------------------

async def test_on_a_server_without_scheduling_gates_pods_are_not_gated_and_told_why(cert_dir):
    settings = WebhookSettings(integrations=WITH_PODS, scheduling_gates=False, server_version="v1.24.0+0")
    async with running_webhook(cert_dir, QUEUES, settings=settings) as hook:
        chain = AdmissionChain(hook)
        out = await chain.admit(pod_create(pod(labels=QUEUED)))
        assert out.allowed and gates(out.object) == [] and MANAGED not in out.object["metadata"]["labels"]
        assert any("v1.24.0+0" in w and "1.27" in w and "Pending" in w for w in out.warnings), out.warnings
        deployment = DEPLOYMENT.fresh()
        assert (await chain.admit(parent_create(deployment))).object == deployment  # Kueue: integration refused
        # a tenant's pod-group metadata is not the pod integration's business there
        assert (await chain.admit(pod_create(pod(labels={**QUEUED, GROUP: "ddp"})))).allowed


@pytest.mark.parametrize("minor, gated", [(24, False), (26, False), (27, True)])
async def test_the_webhook_process_reads_the_servers_version(tmp_path, monkeypatch, caplog, minor, gated):
    """`gpuqueue webhook` with "pod" enabled asks the API server its version (GET /version)."""
    import aiohttp

    from gpuqueue.webhook.command import serve
    from tests.test_webhook_cluster import eventually, use_standin
    from tests.webhook_support import client_context, decode_patch, webhook_args, wire

    config = tmp_path / "config.yaml"
    config.write_text("integrations:\n  frameworks: [batch/job, pod]\n")
    certs = make_cert_dir(tmp_path / "tls")
    caplog.set_level(logging.INFO)
    async with ApiServer(kubernetes_minor=minor, namespaces=("team-a",)) as api:
        use_standin(api, tmp_path, monkeypatch)
        stop = asyncio.Event()
        task = asyncio.create_task(serve(webhook_args(certs, f"--config={config}"), stop))
        try:
            await eventually(lambda: "webhook serving on" in caplog.text)
            port = int(caplog.text.split("webhook serving on https://127.0.0.1:")[1].split()[0])
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(certs))) as session:
                async with session.post(f"https://127.0.0.1:{port}/mutate--v1-pod",
                                        data=wire(pod_create(pod(labels=QUEUED, gpus=0)))) as resp:
                    answer = (await resp.json())["response"]
        finally:
            stop.set()
            await task
        assert ("GET", "/version/") in api.requests
    ops = decode_patch(answer) if "patch" in answer else []
    assert any(op["path"] == "/spec/schedulingGates" for op in ops) is gated
    assert ("warnings" in answer) is (not gated)
    assert ("pod integration only supported in Kubernetes 1.27 or newer" in caplog.text) is (not gated)


# -- parents: Kueue's update rules --------------------------------------------------------------------------

def parent_update(new: dict, old: dict) -> dict:
    review = parent_create(new)
    review["request"].update(operation="UPDATE", oldObject=old)
    return review


async def marked(chain, sample) -> dict:
    out = await chain.admit(parent_create(sample.fresh()))
    assert out.allowed, out.message
    return out.object


async def test_a_statefulset_keeps_its_size_but_for_zero_and_back(chain):
    stored = await marked(chain, STATEFULSET)
    bigger = copy.deepcopy(stored)
    bigger["spec"]["replicas"] = 5  # its pod group counts 2 (the template's total count)
    out = await chain.admit(parent_update(bigger, stored))
    assert not out.allowed and out.message == "spec.replicas: Invalid value: 5: field is immutable"
    zero = copy.deepcopy(stored)
    zero["spec"]["replicas"] = 0
    assert (await chain.admit(parent_update(zero, stored))).allowed
    back = copy.deepcopy(zero)
    back["spec"]["replicas"] = 2
    back["status"] = {"replicas": 1}  # a pod still going away
    out = await chain.admit(parent_update(back, dict(zero, status={"replicas": 1})))
    assert not out.allowed and out.message == "spec.replicas: Forbidden: scaling down is still in progress"


async def test_a_statefulsets_queue_and_group_are_immutable(chain):
    stored = await marked(chain, STATEFULSET)
    moved = copy.deepcopy(stored)
    moved["metadata"]["labels"][QUEUE_NAME_LABEL] = "gpu-queue"
    moved["spec"]["template"]["metadata"]["labels"][QUEUE_NAME_LABEL] = "gpu-queue"
    out = await chain.admit(parent_update(moved, stored))
    assert not out.allowed
    assert out.message == (f'[metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "gpu-queue": field is immutable, '
                           f'spec.template.metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "gpu-queue": field is '
                           "immutable]")


async def test_a_deployments_queue_is_fixed_once_its_pods_run(chain):
    stored = await marked(chain, DEPLOYMENT)
    moved = copy.deepcopy(stored)
    moved["metadata"]["labels"][QUEUE_NAME_LABEL] = "gpu-queue"
    assert (await chain.admit(parent_update(moved, stored))).allowed  # nothing runs yet
    running = dict(stored, status={"readyReplicas": 1})
    out = await chain.admit(parent_update(dict(moved, status={"readyReplicas": 1}), running))
    assert not out.allowed
    assert out.message == f'metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "gpu-queue": field is immutable'
    dropped = copy.deepcopy(stored)
    del dropped["metadata"]["labels"][QUEUE_NAME_LABEL]
    out = await chain.admit(parent_update(dropped, stored))  # sent: the old one has the label
    assert not out.allowed and out.message == f'metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "": field is immutable'


async def test_a_template_that_is_not_an_object_is_named_not_crashed_on(chain):
    deployment = DEPLOYMENT.fresh()
    deployment["spec"]["template"] = "infer"
    out = await chain.admit(parent_create(deployment))
    assert not out.allowed and out.message == "cannot queue this Deployment: spec.template: must be an object"
    stored = await gated_pod(chain, labels=QUEUED)
    broken = dict(stored, spec="x")  # straight to the webhook: no API server would decode it
    answer = await chain.hook.review("/validate--v1-pod", pod_update(broken, stored))
    assert answer["allowed"] is False and answer["status"]["code"] == 400
    assert answer["status"]["message"].startswith("cannot check this pod: object.spec")


async def test_a_role_hash_its_author_wrote_is_replaced_and_a_queued_pods_role_and_group_are_fixed(chain):
    """Else a pod asking 8 GPUs could claim the role (the pod set) of its group's 1-GPU pods."""
    small = await gated_pod(chain, labels={**QUEUED, GROUP: "ddp"}, annotations={COUNT: "2"}, gpus=1)
    big = await chain.admit(pod_create(pod(labels={**QUEUED, GROUP: "ddp"}, gpus=8,
                                           annotations={COUNT: "2", ROLE: small["metadata"]["annotations"][ROLE]})))
    assert big.allowed and big.object["metadata"]["annotations"][ROLE] == role_hash(big.object["spec"])
    assert big.object["metadata"]["annotations"][ROLE] != small["metadata"]["annotations"][ROLE]
    claimed = copy.deepcopy(big.object)
    claimed["metadata"]["annotations"][ROLE] = small["metadata"]["annotations"][ROLE]
    out = await chain.admit(pod_update(claimed, big.object))
    assert not out.allowed and out.message.startswith(
        f"metadata.annotations[{ROLE}]: Forbidden: only the gpuqueue controller may change the role")
    single = await gated_pod(chain, labels=QUEUED)
    joined = copy.deepcopy(single)
    joined["metadata"]["labels"][GROUP] = "ddp"
    joined["metadata"]["annotations"] = {COUNT: "2"}
    out = await chain.admit(pod_update(joined, single))
    assert not out.allowed and out.message == f'metadata.labels[{GROUP}]: Invalid value: "ddp": field is immutable'


async def test_a_queued_pod_created_without_its_gate_is_refused(chain):
    """Another mutating webhook after gpuqueue's removed it: the validating step sees the pod as stored."""
    answer = await chain.hook.review("/validate--v1-pod", pod_create(pod(labels={**QUEUED, MANAGED: "true"})))
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith("spec.schedulingGates: Forbidden: only the gpuqueue controller")
