"""The webhook over real HTTPS, fed the AdmissionReviews kube-apiserver 1.24 actually sent."""

from __future__ import annotations

import asyncio
import copy
import ssl

import aiohttp
import pytest

from tests.webhook_support import (
    apply_json_patch,
    client_context,
    decode_patch,
    load_review,
    make_cert_dir,
    running_webhook,
    wire,
)
from gpuqueue.webhook.job_validation import DEFAULT_CONTROLLER_USERNAMES
from gpuqueue.api.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuqueue.jobframework.managed import ManagedJobsConfig, StaticQueueView
from gpuqueue.webhook.app import WebhookSettings

MUTATE, VALIDATE_JOB, VALIDATE_KUEUE = "/mutate-batch-v1-job", "/validate-batch-v1-job", "/validate-kueue"


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    return make_cert_dir(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def hook(cert_dir):
    queues = StaticQueueView(local_queues={("team-a", "default"), ("team-a", "gpu-queue")})
    async with running_webhook(cert_dir, queues) as w:
        yield w


# -- mutating ------------------------------------------------------------------------

async def test_labelled_job_asking_suspend_false_is_suspended(hook):
    doc = load_review("mutating-review-request.job-create.suspend-false.json")
    resp = await hook.review(MUTATE, doc)
    assert resp["allowed"] is True
    patch = decode_patch(resp)
    assert patch == [{"op": "add", "path": "/spec/suspend", "value": True}]
    stored = apply_json_patch(doc["request"]["object"], patch)
    assert stored["spec"]["suspend"] is True
    assert stored["metadata"]["labels"][QUEUE_NAME_LABEL] == "gpu-queue"


async def test_labelled_suspended_job_gets_an_answer_without_patch(hook):
    resp = await hook.review(MUTATE, load_review("mutating-review-request.job-create.with-queue-name-label.json"))
    assert resp == {"uid": "85f10976-b76c-48aa-896f-8d14da9bcb25", "allowed": True}


async def test_job_without_labels_defaulted_to_default_local_queue(hook):
    doc = load_review("mutating-review-request.job-create.no-labels.json")
    resp = await hook.review(MUTATE, doc)
    patch = decode_patch(resp)
    # The recorded API server accepts a whole-map add, and refuses a per-key add here.
    assert {"op": "add", "path": "/metadata/labels", "value": {QUEUE_NAME_LABEL: "default"}} in patch
    stored = apply_json_patch(doc["request"]["object"], patch)
    assert stored["metadata"]["labels"] == {QUEUE_NAME_LABEL: "default"}
    assert stored["spec"]["suspend"] is True


async def test_unmanaged_job_untouched(cert_dir):
    async with running_webhook(cert_dir, StaticQueueView()) as w:
        resp = await w.review(MUTATE, load_review("mutating-review-request.job-create.no-labels.json"))
    assert resp == {"uid": "64265db2-e7e0-4584-b7fc-7e133be267ca", "allowed": True}


async def test_manage_jobs_without_queue_name_suspends_unlabelled_job(cert_dir):
    settings = WebhookSettings(config=ManagedJobsConfig(manage_jobs_without_queue_name=True))
    async with running_webhook(cert_dir, StaticQueueView(), settings=settings) as w:
        doc = load_review("mutating-review-request.job-create.no-labels.json")
        resp = await w.review(MUTATE, doc)
    assert decode_patch(resp) == [{"op": "add", "path": "/spec/suspend", "value": True}]


async def test_dry_run_gets_the_same_answer(hook):
    doc = load_review("mutating-review-request.job-create.dry-run-server.json")
    assert doc["request"]["dryRun"] is True
    resp = await hook.review(MUTATE, doc)
    wet = copy.deepcopy(doc)
    wet["request"]["dryRun"] = False
    assert await hook.review(MUTATE, wet) == resp


async def test_non_create_and_non_job_reviews_are_allowed_untouched(hook):
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    assert await hook.review(MUTATE, doc) == {"uid": doc["request"]["uid"], "allowed": True}
    cq = load_review("validating-review-request.clusterqueue-create.json")
    assert await hook.review(MUTATE, cq) == {"uid": cq["request"]["uid"], "allowed": True}


async def test_job_without_spec_is_refused_naming_the_field(hook):
    doc = load_review("mutating-review-request.job-create.suspend-false.json")
    del doc["request"]["object"]["spec"]
    resp = await hook.review(MUTATE, doc)
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    assert "object.spec" in resp["status"]["message"]


# -- validating Jobs ---------------------------------------------------------------------

async def test_unsuspend_by_a_user_is_denied(hook):
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    resp = await hook.review(VALIDATE_JOB, doc)
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403 and resp["status"]["reason"] == "Forbidden"
    msg = resp["status"]["message"]
    assert msg.startswith("spec.suspend: Forbidden") and "'admin'" in msg and "LocalQueue gpu-queue" in msg


async def test_unsuspend_by_the_controller_is_allowed(hook):
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    doc["request"]["userInfo"]["username"] = DEFAULT_CONTROLLER_USERNAMES[0]
    assert (await hook.review(VALIDATE_JOB, doc))["allowed"] is True


async def test_controller_accounts_are_configurable(cert_dir):
    settings = WebhookSettings(controller_usernames=("system:serviceaccount:ops:queue-bot", "system:serviceaccount:ops:b"))
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    async with running_webhook(cert_dir, settings=settings) as w:
        doc["request"]["userInfo"]["username"] = DEFAULT_CONTROLLER_USERNAMES[0]
        assert (await w.review(VALIDATE_JOB, doc))["allowed"] is False
        for user in settings.controller_usernames:
            doc["request"]["userInfo"]["username"] = user
            assert (await w.review(VALIDATE_JOB, doc))["allowed"] is True


async def test_unsuspend_of_unmanaged_job_is_allowed(hook):
    doc = load_review("validating-review-request.job-update.unsuspend-via-put.json")
    assert QUEUE_NAME_LABEL not in doc["request"]["object"]["metadata"]["labels"]
    assert (await hook.review(VALIDATE_JOB, doc))["allowed"] is True


async def test_dropping_the_queue_label_to_unsuspend_is_denied(hook):
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    del doc["request"]["object"]["metadata"]["labels"][QUEUE_NAME_LABEL]
    assert (await hook.review(VALIDATE_JOB, doc))["allowed"] is False


async def test_dropping_the_queue_label_of_a_waiting_job_is_denied_so_it_cannot_be_unsuspended_next(hook):
    """Else the next update (no label on either side) would not even reach the webhook."""
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    req = doc["request"]
    req["object"]["spec"]["suspend"] = True
    del req["object"]["metadata"]["labels"][QUEUE_NAME_LABEL]
    resp = await hook.review(VALIDATE_JOB, doc)
    assert resp["allowed"] is False
    assert resp["status"]["message"].startswith(
        "metadata.labels[kueue.x-k8s.io/queue-name]: Forbidden: the queue-name label may not be removed from a Job "
        "managed by gpuqueue; user 'admin' may not take it out of its queue")
    req["userInfo"]["username"] = DEFAULT_CONTROLLER_USERNAMES[0]
    assert (await hook.review(VALIDATE_JOB, doc))["allowed"] is True


async def test_queue_label_immutable_while_admitted(hook):
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    req = doc["request"]
    req["oldObject"]["spec"]["suspend"] = False  # running: admitted
    req["object"]["spec"]["suspend"] = False
    req["object"]["metadata"]["labels"][QUEUE_NAME_LABEL] = "other-queue"
    resp = await hook.review(VALIDATE_JOB, doc)
    assert resp["allowed"] is False
    assert "metadata.labels[kueue.x-k8s.io/queue-name]" in resp["status"]["message"]
    assert "immutable" in resp["status"]["message"]


async def test_queue_label_may_change_while_suspended(hook):
    doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
    req = doc["request"]
    req["object"]["spec"]["suspend"] = True
    req["object"]["metadata"]["labels"][QUEUE_NAME_LABEL] = "other-queue"
    assert (await hook.review(VALIDATE_JOB, doc))["allowed"] is True


async def test_a_jobs_priority_class_is_not_removed_nor_added_while_it_runs(hook):
    """On a recorded 1.24 review of a running Job: Kueue's rule for the WorkloadPriorityClass label."""
    def running(old_class, new_class):
        doc = load_review("validating-review-request.job-update.unsuspend-via-kubectl-patch.json")
        for side, name in (("oldObject", old_class), ("object", new_class)):
            obj = doc["request"][side]
            obj["spec"]["suspend"] = False
            obj["metadata"]["labels"].pop(PRIORITY_CLASS_LABEL, None)
            if name:
                obj["metadata"]["labels"][PRIORITY_CLASS_LABEL] = name
        return doc

    assert (await hook.review(VALIDATE_JOB, running("low", "high")))["allowed"] is True
    for old, new, detail in ((None, "high", "cannot be added to a non-suspended workload"),
                             ("low", None, "cannot be removed from a workload")):
        resp = await hook.review(VALIDATE_JOB, running(old, new))
        assert resp["allowed"] is False
        assert resp["status"]["message"] == (f'metadata.labels[{PRIORITY_CLASS_LABEL}]: Invalid value: "{new or ""}": '
                                              f"WorkloadPriorityClass {detail}")


async def test_create_after_mutation_is_allowed(hook):
    doc = load_review("validating-review-request.job-create.after-mutation.json")
    assert (await hook.review(VALIDATE_JOB, doc))["allowed"] is True


# -- validating Kueue objects ------------------------------------------------------------

def cq_review(mutate=None, kind="ClusterQueue", resource="clusterqueues"):
    doc = load_review("validating-review-request.clusterqueue-create.json")
    req = doc["request"]
    for key in ("kind", "requestKind"):
        req[key]["kind"] = kind
    for key in ("resource", "requestResource"):
        req[key]["resource"] = resource
    req["object"]["kind"] = kind
    if mutate:
        mutate(req["object"])
    return doc


def flavor0(obj):
    return obj["spec"]["resourceGroups"][0]["flavors"][0]


async def deny_message(hook, doc):
    resp = await hook.review(VALIDATE_KUEUE, doc)
    assert resp["allowed"] is False, resp
    assert resp["status"]["code"] == 403
    return resp["status"]["message"]


async def test_recorded_cluster_queue_create_and_update_allowed(hook):
    assert (await hook.review(VALIDATE_KUEUE, cq_review()))["allowed"] is True
    update = load_review("validating-review-request.clusterqueue-update.json")
    assert (await hook.review(VALIDATE_KUEUE, update))["allowed"] is True


async def test_lending_limit_above_nominal_quota(hook):
    def change(o):
        o["spec"]["cohortName"] = "org"
        flavor0(o)["resources"][2]["lendingLimit"] = 9
    msg = await deny_message(hook, cq_review(change))
    assert msg == ('ClusterQueue.kueue.x-k8s.io "gpu-cluster-queue" is invalid: '
                   'spec.resourceGroups[0].flavors[0].resources[2].lendingLimit: Invalid value: "9": '
                   "must be less than or equal to the nominalQuota")


async def test_borrowing_limit_without_cohort(hook):
    msg = await deny_message(hook, cq_review(lambda o: flavor0(o)["resources"][0].update(borrowingLimit="4")))
    assert 'spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: Invalid value: "4": must be nil when cohort is empty' in msg


async def test_lending_limit_without_cohort(hook):
    msg = await deny_message(hook, cq_review(lambda o: flavor0(o)["resources"][2].update(lendingLimit=2)))
    assert "lendingLimit: Invalid value: \"2\": must be nil when cohort is empty" in msg


async def test_negative_and_malformed_quantities(hook):
    msg = await deny_message(hook, cq_review(lambda o: flavor0(o)["resources"][2].update(nominalQuota=-1)))
    assert 'spec.resourceGroups[0].flavors[0].resources[2].nominalQuota: Invalid value: "-1": must be greater than or equal to 0' in msg
    msg = await deny_message(hook, cq_review(lambda o: flavor0(o)["resources"][1].update(nominalQuota="12 GB")))
    assert "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: Invalid value" in msg


async def test_flavor_listed_twice(hook):
    def change(o):
        o["spec"]["resourceGroups"].append(copy.deepcopy(o["spec"]["resourceGroups"][0]))
        o["spec"]["resourceGroups"][1]["coveredResources"] = ["ephemeral-storage", "pods", "example.com/x"]
        for r, name in zip(o["spec"]["resourceGroups"][1]["flavors"][0]["resources"], ["ephemeral-storage", "pods", "example.com/x"]):
            r["name"] = name
    msg = await deny_message(hook, cq_review(change))
    assert msg.endswith('spec.resourceGroups[1].flavors[0].name: Duplicate value: "gpu-flavor"')


async def test_covered_resource_listed_twice(hook):
    def change(o):
        rg = o["spec"]["resourceGroups"][0]
        rg["coveredResources"][1] = "cpu"
        flavor0(o)["resources"][1]["name"] = "cpu"
    msg = await deny_message(hook, cq_review(change))
    assert 'spec.resourceGroups[0].coveredResources[1]: Duplicate value: "cpu"' in msg


async def test_flavor_resource_not_in_covered_resources(hook):
    msg = await deny_message(hook, cq_review(lambda o: flavor0(o)["resources"][2].update(name="amd.com/gpu")))
    assert 'spec.resourceGroups[0].flavors[0].resources[2].name: Invalid value: "amd.com/gpu": must match the name in coveredResources' in msg
    msg = await deny_message(hook, cq_review(lambda o: flavor0(o)["resources"].pop()))
    assert "flavors must have the same number of resources as the coveredResources" in msg


async def test_at_most_16_resource_groups(hook):
    def change(o):
        groups = []
        for i in range(17):
            groups.append({"coveredResources": [f"example.com/r{i}"],
                           "flavors": [{"name": f"f{i}", "resources": [{"name": f"example.com/r{i}", "nominalQuota": 1}]}]})
        o["spec"]["resourceGroups"] = groups
    msg = await deny_message(hook, cq_review(change))
    assert "spec.resourceGroups: Too many: 17: must have at most 16 items" in msg


async def test_flavor_count_limit_per_api_version(hook):
    def flavors(n, api):
        def change(o):
            o["apiVersion"] = f"kueue.x-k8s.io/{api}"
            rg = o["spec"]["resourceGroups"][0]
            rg["flavors"] = [dict(copy.deepcopy(rg["flavors"][0]), name=f"f{i}") for i in range(n)]
        return change
    assert "spec.resourceGroups[0].flavors: Too many: 17: must have at most 16 items" in await deny_message(hook, cq_review(flavors(17, "v1beta1")))
    assert (await hook.review(VALIDATE_KUEUE, cq_review(flavors(17, "v1beta2"))))["allowed"] is True
    assert "Too many: 65: must have at most 64 items" in await deny_message(hook, cq_review(flavors(65, "v1beta2")))


async def test_cluster_queue_enums_and_preemption_rule(hook):
    msg = await deny_message(hook, cq_review(lambda o: o["spec"].update(queueingStrategy="FIFO")))
    assert 'spec.queueingStrategy: Unsupported value: "FIFO"' in msg
    msg = await deny_message(hook, cq_review(lambda o: o["spec"].update(
        preemption={"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}})))
    assert "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never" in msg


async def test_cohort_validation_and_cycles(cert_dir):
    class Cohorts:
        parents = {"org": "division", "division": "team-x"}

        def cohort_parent(self, name):
            return self.parents.get(name)

    def cohort(name, parent, lend=None):
        def change(o):
            o["metadata"]["name"] = name
            o["spec"] = {"parentName": parent, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                         "flavors": [{"name": "gh200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]}
            if lend is not None:
                o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = lend
        doc = cq_review(change, "Cohort", "cohorts")
        doc["request"]["name"] = name
        return doc

    async with running_webhook(cert_dir, cohorts=Cohorts()) as w:
        msg = await deny_message(w, cohort("team-x", "org"))
        assert 'spec.parentName: Invalid value: "org": cohort cycle: team-x -> org -> division -> team-x' in msg
        msg = await deny_message(w, cohort("solo", "solo"))
        assert "cohort cycle: solo -> solo" in msg
        assert (await w.review(VALIDATE_KUEUE, cohort("team-y", "org")))["allowed"] is True
        # A Cohort's lendingLimit may exceed its own quota (Kueue skips that rule for Cohorts),
        # but it still needs a parent.
        assert (await w.review(VALIDATE_KUEUE, cohort("team-y", "org", lend=5)))["allowed"] is True
        assert "must be nil when parent is empty" in await deny_message(w, cohort("root", "", lend=1))


async def test_local_queue_validation(hook):
    def lq(spec, old_spec=None):
        doc = cq_review(lambda o: o.update(spec=spec), "LocalQueue", "localqueues")
        if old_spec is not None:
            doc["request"]["operation"] = "UPDATE"
            doc["request"]["oldObject"] = {"spec": old_spec}
        return doc
    assert (await hook.review(VALIDATE_KUEUE, lq({"clusterQueue": "gpu-cluster-queue"})))["allowed"] is True
    assert "spec.clusterQueue: Required value" in await deny_message(hook, lq({}))
    assert "spec.clusterQueue: Invalid value" in await deny_message(hook, lq({"clusterQueue": "GPU_Queue"}))
    msg = await deny_message(hook, lq({"clusterQueue": "b"}, old_spec={"clusterQueue": "a"}))
    assert 'spec.clusterQueue: Invalid value: "b": field is immutable' in msg


async def test_resource_flavor_validation(hook):
    def rf(spec):
        return cq_review(lambda o: o.update(spec=spec), "ResourceFlavor", "resourceflavors")
    ok = {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"},
          "nodeTaints": [{"key": "gpu", "value": "gh200", "effect": "NoSchedule"}],
          "tolerations": [{"key": "gpu", "operator": "Equal", "value": "gh200", "effect": "NoSchedule"}]}
    assert (await hook.review(VALIDATE_KUEUE, rf(ok)))["allowed"] is True
    assert 'spec.nodeTaints[0].effect: Unsupported value: "Sometimes"' in await deny_message(
        hook, rf({"nodeTaints": [{"key": "gpu", "effect": "Sometimes"}]}))
    assert "taints must be unique by key and effect pair" in await deny_message(
        hook, rf({"nodeTaints": [{"key": "gpu", "effect": "NoSchedule"}, {"key": "gpu", "value": "x", "effect": "NoSchedule"}]}))
    assert "spec.nodeLabels[a]: Invalid value" in await deny_message(hook, rf({"nodeLabels": {"a": "not valid!"}}))
    assert "spec.tolerations[0].effect" in await deny_message(
        hook, rf({"tolerations": [{"key": "a", "operator": "Exists", "tolerationSeconds": 5}]}))


async def test_workload_priority_class_validation(hook):
    def wpc(value):
        def change(o):
            o.pop("spec")
            if value is not None:
                o["value"] = value
        return cq_review(change, "WorkloadPriorityClass", "workloadpriorityclasses")
    assert (await hook.review(VALIDATE_KUEUE, wpc(1000)))["allowed"] is True
    assert "value: Required value" in await deny_message(hook, wpc(None))
    assert "value: Invalid value" in await deny_message(hook, wpc(2**31))
    assert "value: Invalid value" in await deny_message(hook, wpc("high"))


async def test_delete_is_allowed_and_foreign_kinds_refused(hook):
    doc = cq_review()
    doc["request"]["operation"] = "DELETE"
    assert (await hook.review(VALIDATE_KUEUE, doc))["allowed"] is True
    job = load_review("validating-review-request.job-create.after-mutation.json")
    resp = await hook.review(VALIDATE_KUEUE, job)
    assert resp["allowed"] is False and "is not validated here" in resp["status"]["message"]


# -- envelope, limits, TLS -------------------------------------------------------------------

async def test_malformed_bodies_get_a_well_formed_answer(hook):
    for body in (b"", b"not json", b"[]", b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}'):
        status, answer = await hook.post(MUTATE, body)
        assert status == 200
        assert answer["kind"] == "AdmissionReview" and answer["response"]["allowed"] is False
        assert answer["response"]["status"]["code"] == 400 and answer["response"]["status"]["message"]
    status, answer = await hook.post(MUTATE, b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1"}}')
    assert answer["response"]["uid"] == "u-1"
    assert "request.kind: Field required" in answer["response"]["status"]["message"]


async def test_oversized_body_refused_with_clear_message(cert_dir):
    async with running_webhook(cert_dir, settings=WebhookSettings(max_body=4096)) as w:
        doc = load_review("mutating-review-request.job-create.suspend-false.json")
        doc["request"]["object"]["metadata"]["annotations"] = {"big": "x" * 5000}
        status, answer = await w.post(MUTATE, wire(doc))
        assert status == 413
        assert "over the 4096 byte limit" in answer["response"]["status"]["message"]
        # chunked upload without Content-Length is cut at the same limit
        async def chunks():
            yield wire(doc)
        async with w.session.post(f"{w.base}{MUTATE}", data=chunks()) as resp:
            assert resp.status == 413
        # and the server is still fine afterwards
        assert (await w.review(MUTATE, load_review("mutating-review-request.job-create.suspend-false.json")))["allowed"]


async def test_health_endpoints(hook):
    for path in ("/healthz", "/readyz"):
        async with hook.session.get(hook.base + path) as resp:
            assert resp.status == 200


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_plain_http_and_old_tls_refused(hook):
    port = int(hook.base.rsplit(":", 1)[1])
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(aiohttp.ClientError):
            async with plain.post(f"http://127.0.0.1:{port}{MUTATE}", data=b"{}") as resp:
                await resp.read()
    old = client_context(hook.cert_dir)
    old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=old)
        writer.close()


async def test_tls12_offers_only_forward_secret_aead_ciphers(hook):
    port = int(hook.base.rsplit(":", 1)[1])
    cbc = client_context(hook.cert_dir)
    cbc.maximum_version = ssl.TLSVersion.TLSv1_2
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA:AES128-SHA")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=cbc)
        writer.close()
    tls12 = client_context(hook.cert_dir)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls12)
    cipher, version, _bits = writer.get_extra_info("cipher")
    writer.close()
    assert version == "TLSv1.2" and ("GCM" in cipher or "CHACHA20" in cipher) and cipher.startswith("ECDHE")


async def test_server_certificate_verifies_against_ca_only(hook, tmp_path):
    other = make_cert_dir(tmp_path / "other")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(other))) as s:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with s.get(hook.base + "/healthz"):
                pass


# -- a Topology (its checks: tests/test_webhook_topology.py) ---------------------------------

def topology_review(*labels: str) -> dict:
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "default"},
           "spec": {"levels": [{"nodeLabel": lv} for lv in labels]}}
    doc = cq_review(lambda o: (o.clear(), o.update(obj)), kind="Topology", resource="topologies")
    doc["request"]["name"] = "default"
    return doc


async def test_the_webhook_denies_a_topology_with_the_hostname_above_a_rack(hook):
    host, rack = "kubernetes.io/hostname", "cloud.provider.com/topology-rack"
    msg = await deny_message(hook, topology_review(host, rack))
    assert msg == ('Topology.kueue.x-k8s.io "default" is invalid: spec.levels: Invalid value: "array": the '
                   'kubernetes.io/hostname label can only be used at the lowest level of topology')
    assert (await hook.review(VALIDATE_KUEUE, topology_review(rack, host)))["allowed"] is True
