"""Kueue's LocalQueue defaulting without the namespace label, and no silent hang (issue 26): the
controller against the API stand-in keeps gpuqueue.io/default-local-queue on namespaces with a
LocalQueue named "default"; a Job created through the project's own webhook configurations
(AdmissionChain, over TLS, the webhook's queue view fed by watches) is queued there, and once the
LocalQueue is gone it is left alone and warned about, at creation and by an Event."""

from __future__ import annotations

import asyncio

import pytest

from gpuqueue.extender.controller.client import kinds as K
from gpuqueue.extender.controller.queues.default_queue_label import DEFAULT_LOCAL_QUEUE_LABEL
from gpuqueue.jobframework.managed import ManagedJobsConfig, StaticQueueView
from gpuqueue.jobframework.registry import DEFAULT_FRAMEWORKS, IntegrationsConfig
from gpuqueue.jobframework.unqueued import EVENT_REASON
from gpuqueue.webhook.app import WebhookSettings
from gpuqueue.webhook.cluster import WatchedQueueView, watch_cluster
from tests.admission_support import AdmissionChain, admission_review, pod, pod_create
from tests.controller_support import Harness, eventually
from tests.webhook_support import make_cert_dir, running_webhook

GPU = "nvidia.com/gpu"
COVERED = frozenset({"cpu", "memory", GPU})
QUOTA = [
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gh200"}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu"},
     "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": sorted(COVERED), "flavors": [
         {"name": "gh200", "resources": [{"name": r, "nominalQuota": "64"} for r in sorted(COVERED)]}]}]}},
]


def default_queue(ns: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"namespace": ns, "name": "default"}, "spec": {"clusterQueue": "gpu"}}


def unlabelled_job(ns: str, name: str) -> dict:
    """As kube-apiserver has it at admission: no queue label, not suspended, one GPU."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": ns, "name": name},
            "spec": {"suspend": False, "parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "w", "image": "busybox",
                                "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}}}]}}}}


def job_create(job: dict) -> dict:
    return admission_review("CREATE", ("batch", "v1", "Job"), ("batch", "v1", "jobs"),
                            namespace=job["metadata"]["namespace"], name=job["metadata"]["name"], username="alice",
                            obj=job)


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    return make_cert_dir(tmp_path_factory.mktemp("tls"))


async def labels_of(h: Harness, ns: str) -> dict:
    return (await h.kube.get(K.NAMESPACES, None, ns))["metadata"].get("labels") or {}


async def test_a_default_local_queue_queues_unlabelled_jobs_without_the_managed_label(cert_dir):
    async with Harness() as h:
        for obj in QUOTA:
            await h.apply(obj)
        for ns in ("team-x", "kube-system", "gpu-operator"):
            await h.apply(default_queue(ns))
        await h.controller()
        view = WatchedQueueView()
        watching = asyncio.create_task(watch_cluster(view, h.api.client_configuration()))
        try:
            await eventually(view.ready, what="the webhook's queue view listed")
            async with running_webhook(cert_dir, queues=view, covered=COVERED) as hook:
                chain = AdmissionChain(hook)

                async def create(job: dict):
                    ns = job["metadata"]["namespace"]
                    out = await chain.admit(job_create(job), await labels_of(h, ns))
                    assert out.allowed, out.message
                    await h.kube.create(K.JOBS, ns, out.object)
                    return out

                # the controller labels team-x, never kube-system nor an exempt namespace
                await eventually(lambda: view.namespace_labels("team-x").get(DEFAULT_LOCAL_QUEUE_LABEL) == "true",
                                 what="team-x labelled")
                for ns in ("kube-system", "gpu-operator"):
                    assert DEFAULT_LOCAL_QUEUE_LABEL not in await labels_of(h, ns)

                queued = await create(unlabelled_job("team-x", "train"))
                assert queued.object["spec"]["suspend"] is True
                assert queued.object["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
                assert "job-default-local-queue.gpuqueue.io /mutate-batch-v1-job" in queued.called
                assert queued.warnings == []
                await eventually(lambda: (h.workload_of("team-x", "train") or {}).get("spec", {}).get("queueName")
                                 == "default", what="its Workload in LocalQueue default")
                await eventually(lambda: h.running("team-x", "train"), what="admitted and unsuspended")

                # untouched where kube-system's and the exempt namespace's LocalQueues are
                for ns in ("kube-system", "gpu-operator"):
                    out = await create(unlabelled_job(ns, "plugin"))
                    assert out.called == [] and out.object["spec"]["suspend"] is False and out.warnings == []

                # the LocalQueue goes: the label follows, the next Job is left alone and told why
                await h.kube.delete(K.LOCAL_QUEUES, "team-x", "default")
                await eventually(lambda: DEFAULT_LOCAL_QUEUE_LABEL not in (view.namespace_labels("team-x") or {})
                                 and not view.local_queue_exists("team-x", "default"), what="label removed")
                left = await create(unlabelled_job("team-x", "stray"))
                assert left.object["spec"]["suspend"] is False
                assert "kueue.x-k8s.io/queue-name" not in (left.object["metadata"].get("labels") or {})
                assert left.called == ["unqueued.gpuqueue.io /warn-unqueued"]
                (warning,) = left.warnings
                assert warning.startswith("Job team-x/stray requests nvidia.com/gpu but it names no LocalQueue "
                                          "(label kueue.x-k8s.io/queue-name) and namespace team-x has no LocalQueue "
                                          'named "default": its pods will wait for a node for ever')

                async def event_reasons() -> list:
                    events = (await h.kube.request("GET", "/api/v1/namespaces/team-x/events"))["items"]
                    return [(e["reason"], e["message"]) for e in events
                            if e["involvedObject"].get("name") == "stray"]

                for _ in range(200):
                    if await event_reasons():
                        break
                    await asyncio.sleep(0.02)
                assert await event_reasons() == [(EVENT_REASON, warning)]
                # the Job queued before is not touched
                assert h.running("team-x", "train") and h.job("team-x", "train")["metadata"]["labels"][
                    "kueue.x-k8s.io/queue-name"] == "default"
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)


async def test_a_bare_gpu_pod_nothing_will_admit_is_warned_about_at_creation(cert_dir):
    outside = ManagedJobsConfig(managed_jobs_namespace_selector={"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gpuqueue-system", "lab"]}]})
    queues = StaticQueueView(local_queues={("lab", "default")})
    async with running_webhook(cert_dir, queues=queues, covered=COVERED) as hook:
        out = await AdmissionChain(hook).admit(pod_create(pod("lab", gpus=1, name="notebook")))
        assert out.allowed
        assert out.warnings == [
            "Pod lab/notebook requests nvidia.com/gpu but gpuqueue does not queue Pods here (integration 'pod' is "
            "not in integrations.frameworks): its pods will wait for a node for ever (enforcement Strict); run it as "
            "a kind gpuqueue queues (a batch/v1 Job with the label kueue.x-k8s.io/queue-name), or ask the "
            "administrator to enable 'pod'"]
        cpu_only = await AdmissionChain(hook).admit(pod_create(pod("lab", gpus=0)))
        assert cpu_only.allowed and cpu_only.warnings == []
    settings = WebhookSettings(config=outside, integrations=IntegrationsConfig(frameworks=(*DEFAULT_FRAMEWORKS, "pod")))
    async with running_webhook(cert_dir, queues=queues, covered=COVERED, settings=settings) as hook:
        out = await AdmissionChain(hook).admit(pod_create(pod("lab", gpus=1, name="notebook")))
        assert out.allowed and "kueue.x-k8s.io/queue-name" not in (out.object["metadata"].get("labels") or {})
        assert out.warnings == [
            "Pod lab/notebook requests nvidia.com/gpu but namespace lab is outside managedJobsNamespaceSelector, so "
            "it is not queued: its pods will wait for a node for ever (enforcement Strict); run it in a namespace "
            "gpuqueue manages"]
        labelled = await AdmissionChain(hook).admit(pod_create(pod("lab", gpus=1, labels={
            "kueue.x-k8s.io/queue-name": "missing"})))
        assert labelled.allowed and labelled.warnings[-1].startswith(
            f"Pod lab/{labelled.object['metadata']['name']} requests nvidia.com/gpu but LocalQueue missing doesn't "
            "exist in namespace lab")


def test_which_namespaces_carry_the_label():
    from gpuqueue.extender.controller.queues.default_queue_label import wanted_labels

    namespaces = {"team-a": {"kubernetes.io/metadata.name": "team-a"},
                  "team-b": {"kubernetes.io/metadata.name": "team-b", DEFAULT_LOCAL_QUEUE_LABEL: "true"},
                  "kube-system": {"kubernetes.io/metadata.name": "kube-system"},
                  "gpu-operator": {"kubernetes.io/metadata.name": "gpu-operator", DEFAULT_LOCAL_QUEUE_LABEL: "true"},
                  "lab": {"kubernetes.io/metadata.name": "lab", "tier": "scratch"},
                  "ready": {"kubernetes.io/metadata.name": "ready", DEFAULT_LOCAL_QUEUE_LABEL: "true"}}
    queues = {("team-a", "default"), ("kube-system", "default"), ("gpu-operator", "default"), ("lab", "default"),
              ("ready", "default"), ("team-b", "other")}
    selector = ManagedJobsConfig(managed_jobs_namespace_selector={"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "gpuqueue-system"]},
        {"key": "tier", "operator": "NotIn", "values": ["scratch"]}]})
    # set where a default LocalQueue is, in a managed namespace; removed where it is gone or exempt
    assert wanted_labels(namespaces, queues, selector, {"gpu-operator"}) == {
        "team-a": True, "team-b": False, "gpu-operator": False}
    # a selector on the label itself cannot keep it alive
    on_label = ManagedJobsConfig(managed_jobs_namespace_selector={"matchLabels": {DEFAULT_LOCAL_QUEUE_LABEL: "true"}})
    assert wanted_labels({"ready": namespaces["ready"]}, queues, on_label, ()) == {"ready": False}


def test_explain_says_why_a_gpu_job_has_no_workload():
    from gpuqueue.extender.controller.explain.explain import NotQueuedContext, explain

    job = {**unlabelled_job("team-x", "stray"), "metadata": {"namespace": "team-x", "name": "stray", "uid": "u1"}}
    cqs = {"gpu": QUOTA[1]}
    text, code = explain(job, None, [], {}, cqs, unqueued=NotQueuedContext({"kubernetes.io/metadata.name": "team-x"}))
    assert code == 2 and text.startswith('team-x/stray: no Workload: Job team-x/stray requests nvidia.com/gpu but it '
                                         'names no LocalQueue (label kueue.x-k8s.io/queue-name) and namespace team-x '
                                         'has no LocalQueue named "default"')
    outside = NotQueuedContext({"kubernetes.io/metadata.name": "team-x"}, ManagedJobsConfig(
        managed_jobs_namespace_selector={"matchLabels": {"gpu": "yes"}}))
    assert "namespace team-x is outside managedJobsNamespaceSelector" in explain(job, None, [], {}, cqs,
                                                                                unqueued=outside)[0]
