"""A hostile tenant against the webhook: the ways round the scheduler extender and forged Workload
records. Each write goes through AdmissionChain (tests/admission_support.py): the webhooks of
manifests/webhook/webhookconfigurations.yaml, chosen by their rules and selectors as kube-apiserver
chooses them, called over real TLS on the real webhook app; a binding's pod is read from the API
server stand-in with the real client. Without the webhook's pod, binding and Workload endpoints
every refusal below was an admission."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from gpuqueue.jobframework.enforcement import EnforcementConfig
from gpuqueue.webhook.app import WebhookSettings
from gpuqueue.webhook.cluster import ApiPods
from tests.admission_support import (
    GPU, AdmissionChain, admit, binding_create, pod, pod_create, workload, workload_write,
)
from tests.standin import ApiServer
from tests.standin import resources as R
from tests.webhook_support import make_cert_dir, running_webhook

CONTROLLER = "system:serviceaccount:gpuqueue-system:gpuqueue-extender"
KUBE_SCHEDULER = "system:kube-scheduler"
COVERED = frozenset({GPU, "cpu", "memory"})


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    return make_cert_dir(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def api():
    async with ApiServer(namespaces=("default", "kube-system", "gpuqueue-system", "team-a")) as server:
        yield server
        assert not server.internal_errors


async def chain_for(cert_dir, api, settings: WebhookSettings | None = None, covered=COVERED):
    """The webhook (reading pods from ``api``) and the chain that routes writes to it."""
    ac = client.ApiClient(api.client_configuration())
    ctx = running_webhook(cert_dir, settings=settings, covered=covered, pods=ApiPods(ac))
    hook = await ctx.__aenter__()

    async def close() -> None:
        await ctx.__aexit__(None, None, None)
        await ac.close()

    return AdmissionChain(hook), close


@pytest.fixture
async def chain(cert_dir, api):
    c, close = await chain_for(cert_dir, api)
    yield c
    await close()


# -- spec.nodeName: a pod bound without any scheduler --------------------------------------------

async def test_gpu_pod_naming_its_node_in_a_tenant_namespace_is_refused(chain):
    out = await chain.admit(pod_create(pod("team-a", gpus=4, node_name="gh200-node-1")))
    assert not out.allowed
    assert out.message.startswith("spec.nodeName: Forbidden: a pod that requests nvidia.com/gpu in namespace team-a "
                                  "may not name its node: it must be placed by a scheduler that consults gpuqueue "
                                  "(default-scheduler)")
    assert out.called == ["pod.gpuqueue.io /mutate--v1-pod"]  # refused at the first webhook


@pytest.mark.parametrize("namespace", ["kube-system", "gpu-operator"])
async def test_the_same_pod_in_an_exempt_namespace_is_allowed(chain, namespace):
    out = await chain.admit(pod_create(pod(namespace, gpus=4, node_name="gh200-node-1")))
    assert out.allowed and out.called == []  # never even sent to gpuqueue
    # and the webhook itself agrees, were it asked
    for path in ("/mutate--v1-pod", "/validate--v1-pod"):
        answer = await chain.hook.review(path, pod_create(pod(namespace, gpus=4, node_name="gh200-node-1")))
        assert answer == {"uid": answer["uid"], "allowed": True}


async def test_gpus_asked_only_by_an_init_container_or_as_limits_count(chain):
    for p in (pod(gpus=0, init_gpus=2, node_name="n1"), pod(gpus=1, limits_only=True, node_name="n1")):
        out = await chain.admit(pod_create(p))
        assert not out.allowed and out.message.startswith("spec.nodeName: Forbidden"), p["spec"]


async def test_pods_needing_no_admission_may_name_their_node(chain):
    out = await chain.admit(pod_create(pod(gpus=0, node_name="cpu-node-1")))
    assert out.allowed and out.object["spec"]["nodeName"] == "cpu-node-1"
    fpga = pod(gpus=0, node_name="n1")
    fpga["spec"]["containers"][0]["resources"]["limits"]["example.com/fpga"] = "1"
    assert (await chain.admit(pod_create(fpga))).allowed  # no ClusterQueue covers it


async def test_without_the_clusterqueues_every_extended_resource_counts(cert_dir, api):
    chain, close = await chain_for(cert_dir, api, covered=None)
    try:
        fpga = pod(gpus=0, node_name="n1")
        fpga["spec"]["containers"][0]["resources"]["limits"]["example.com/fpga"] = "1"
        out = await chain.admit(pod_create(fpga))
        assert not out.allowed and "requests example.com/fpga" in out.message
        assert (await chain.admit(pod_create(pod(gpus=0, node_name="n1")))).allowed
    finally:
        await close()


async def test_a_mirror_pod_is_left_to_its_kubelet_but_its_annotation_is_no_pass(chain):
    mirror = {"kubernetes.io/config.mirror": "0d4f1e", "kubernetes.io/config.source": "file"}
    assert (await chain.admit(pod_create(pod(gpus=1, node_name="n1", annotations=mirror),
                                         username="system:node:n1"))).allowed
    out = await chain.admit(pod_create(pod(gpus=1, node_name="n1", annotations=mirror), username="alice"))
    assert not out.allowed and out.message.startswith("spec.nodeName: Forbidden")


# -- spec.schedulerName: a scheduler without the extender -----------------------------------------

@pytest.mark.parametrize("scheduler", ["my-scheduler", None])
async def test_gpu_pod_naming_another_scheduler_is_given_one_that_consults_the_extender(chain, scheduler):
    p = pod(gpus=2, scheduler_name=scheduler)
    out = await chain.admit(pod_create(p))
    assert out.allowed, out.message
    assert out.object["spec"]["schedulerName"] == "default-scheduler"
    assert out.called == ["pod.gpuqueue.io /mutate--v1-pod", "pod.gpuqueue.io /validate--v1-pod"]
    if scheduler is not None:
        assert out.warnings[0] == ("spec.schedulerName: set to 'default-scheduler' (was 'my-scheduler'): a pod that "
                                   "requests nvidia.com/gpu in namespace team-a is placed by a scheduler that consults "
                                   "gpuqueue")
    # and, being a bare pod nothing queues (no pod integration), it is told so
    assert out.warnings[-1].startswith(f"Pod team-a/{p['metadata']['name']} requests nvidia.com/gpu but gpuqueue "
                                       "does not queue Pods here")


async def test_a_pod_left_naming_another_scheduler_after_the_mutating_webhooks_is_refused(chain):
    """Another webhook (a GPU-sharing one, say) set its own scheduler after gpuqueue's mutation."""
    answer = await chain.hook.review("/validate--v1-pod", pod_create(pod(gpus=1, scheduler_name="hami-scheduler")))
    assert not answer["allowed"]
    assert answer["status"]["message"].startswith("spec.schedulerName: Forbidden: a pod that requests nvidia.com/gpu "
                                                  "in namespace team-a must be scheduled by a scheduler that consults "
                                                  "gpuqueue (default-scheduler), not 'hami-scheduler'")


async def test_the_first_configured_scheduler_is_the_one_set(cert_dir, api):
    settings = WebhookSettings(enforcement=EnforcementConfig(scheduler_names=("gpuqueue-scheduler", "default-scheduler")))
    chain, close = await chain_for(cert_dir, api, settings)
    try:
        assert (await chain.admit(pod_create(pod(scheduler_name="default-scheduler")))).object["spec"][
            "schedulerName"] == "default-scheduler"  # it consults the extender too: left alone
        assert (await chain.admit(pod_create(pod(scheduler_name="volcano")))).object["spec"][
            "schedulerName"] == "gpuqueue-scheduler"
    finally:
        await close()


async def test_cpu_pods_keep_their_scheduler(chain):
    out = await chain.admit(pod_create(pod(gpus=0, scheduler_name="my-scheduler")))
    assert out.allowed and out.object["spec"]["schedulerName"] == "my-scheduler" and out.warnings == []


async def test_audit_mode_warns_and_changes_nothing(cert_dir, api):
    chain, close = await chain_for(cert_dir, api, WebhookSettings(enforcement=EnforcementConfig(mode="Audit")))
    try:
        out = await chain.admit(pod_create(pod(gpus=1, node_name="n1", scheduler_name="my-scheduler")))
        assert out.allowed and out.object["spec"]["schedulerName"] == "my-scheduler"
        assert out.warnings and all("Audit mode; this would be refused: spec.nodeName: Forbidden" in w
                                    for w in out.warnings)
    finally:
        await close()


# -- pods/binding: binding a pod by hand -----------------------------------------------------------

async def test_a_tenants_binding_of_a_gpu_pod_is_refused(chain, api):
    api.cluster.create(R.PODS, "team-a", pod("team-a", gpus=4, name="train-0", scheduler_name="default-scheduler"))
    for legacy in (False, True):
        out = await chain.admit(binding_create("team-a", "train-0", "gh200-node-1", "alice", legacy=legacy))
        assert not out.allowed
        assert out.message.startswith("target: Forbidden: only the schedulers that consult gpuqueue "
                                      "(system:kube-scheduler, system:serviceaccount:gpuqueue-system:gpuqueue-scheduler) "
                                      "may bind a pod that requests nvidia.com/gpu in namespace team-a; user 'alice' "
                                      "may not")
        assert out.called == ["binding.gpuqueue.io /validate--v1-binding"]
    assert (await chain.admit(binding_create("team-a", "train-0", "gh200-node-1", KUBE_SCHEDULER))).allowed


async def test_bindings_of_cpu_pods_and_of_missing_pods_are_left_to_kubernetes(chain, api):
    api.cluster.create(R.PODS, "team-a", pod("team-a", gpus=0, name="web-0"))
    assert (await chain.admit(binding_create("team-a", "web-0", "cpu-node-1", "other-scheduler"))).allowed
    assert (await chain.admit(binding_create("team-a", "nobody", "cpu-node-1", "alice"))).allowed  # 404 follows


async def test_a_binding_whose_pod_cannot_be_read_is_refused(chain, api):
    api.faults.add(r"/pods/train-1$", method="GET", status=500)
    out = await chain.admit(binding_create("team-a", "train-1", "gh200-node-1", "alice"))
    assert not out.allowed
    assert out.message.startswith("target: Forbidden: cannot check whether pod team-a/train-1 needs an admission "
                                  "before binding it (reading the pod failed: HTTP 500")


# -- Workload records ------------------------------------------------------------------------------

async def test_a_forged_workload_status_is_refused(chain):
    pending = workload()
    for status_subresource in (True, False):
        out = await chain.admit(workload_write("UPDATE", admit(pending), pending, "alice", status=status_subresource))
        assert not out.allowed
        assert out.message == (
            'Workload.kueue.x-k8s.io "job-train-1a2b3" is invalid: [status.admission: Forbidden: only the gpuqueue '
            f"controller ({CONTROLLER}) may change a Workload's status; user 'alice' may not, status.conditions: "
            f"Forbidden: only the gpuqueue controller ({CONTROLLER}) may change a Workload's status; user 'alice' "
            "may not]")
    assert (await chain.admit(workload_write("UPDATE", admit(pending), pending, CONTROLLER, status=True))).allowed


async def test_a_tenant_may_stop_and_resume_its_workload_as_kueuectl_does(chain):
    admitted = workload(admitted=True)
    stopped = {**admitted, "spec": {**admitted["spec"], "active": False}}
    assert (await chain.admit(workload_write("UPDATE", stopped, admitted, "alice"))).allowed
    assert (await chain.admit(workload_write("UPDATE", admitted, stopped, "alice"))).allowed
    labelled = {**admitted, "metadata": {**admitted["metadata"], "labels": {"team": "vision"},
                                         "annotations": {"note": "x"}}}
    assert (await chain.admit(workload_write("UPDATE", labelled, admitted, "alice"))).allowed


async def test_a_tenant_cannot_shrink_or_reprioritize_its_workload(chain):
    admitted = workload(count=8, admitted=True)
    edited = {**admitted, "spec": {**admitted["spec"], "priority": 1000000, "podSets": [
        {**admitted["spec"]["podSets"][0], "count": 1}]}}
    out = await chain.admit(workload_write("UPDATE", edited, admitted, "alice"))
    assert not out.allowed
    assert "spec.podSets: Forbidden: only the gpuqueue controller" in out.message
    assert "spec.priority: Forbidden" in out.message and "may only change spec.active" in out.message
    assert (await chain.admit(workload_write("UPDATE", edited, admitted, CONTROLLER))).allowed


async def test_only_the_controller_creates_workloads(chain):
    out = await chain.admit(workload_write("CREATE", workload(), None, "alice"))
    assert not out.allowed
    assert out.message.startswith(f'Workload.kueue.x-k8s.io "job-train-1a2b3" is forbidden: only the gpuqueue '
                                  f"controller ({CONTROLLER}) creates Workloads")
    assert (await chain.admit(workload_write("CREATE", workload(), None, CONTROLLER))).allowed
