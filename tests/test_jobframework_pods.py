"""The kinds held by the pod integration's scheduling gate: plain Pods and pod groups, Deployments,
StatefulSets and LeaderWorkerSets. Every object the integrations write is checked against
Kubernetes' own schema (1.30: scheduling gates are GA from 1.30, beta from 1.27) or, for
LeaderWorkerSet, against its CRD in the stand-in."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from kubernetes_asyncio import client

from gpuqueue.jobframework import registry
from gpuqueue.jobframework.integration import PodFacts
from gpuqueue.jobframework.kinds import pods as P
from gpuqueue.jobframework.names import role_hash, workload_name
from gpuqueue.jobframework.podset import PodSetInfo
from tests.standin import ApiServer
from tests.standin import resources as R
from tests.workload_kinds import DEPLOYMENT, GPU, LWS, POD, STATEFULSET, container

K8S = "1.30"
FLAVOR = PodSetInfo("main", {"nvidia.com/gpu.product": "GH200"},
                    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},))


def valid(obj: dict) -> dict:
    kubernetes_validate.validate(obj, K8S, strict=True)
    return obj


def group_pod(name: str, gpus: int = 1, total: int = 3, phase: str | None = None) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "team-a",
                        "labels": {"kueue.x-k8s.io/queue-name": "default", P.GROUP_NAME_LABEL: "sweep"},
                        "annotations": {P.GROUP_TOTAL_COUNT: str(total)}},
           "spec": {"containers": [container("main", gpus)]}}
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def test_a_plain_pod_waits_gated_and_runs_ungated_with_its_flavor():
    pod = POD.fresh()
    integ = registry.integration_for(pod)
    gated = valid(P.gated(pod))
    assert gated["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert gated["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    assert gated["metadata"]["finalizers"] == ["kueue.x-k8s.io/managed"]
    assert P.gated(gated) is None and integ.is_suspended(gated)
    assert integ.workload_name(gated) == workload_name("Pod", "", "notebook", "")
    assert [(ps.name, ps.count, ps.engine_requests()) for ps in integ.pod_sets(gated)] == [("main", 1, {GPU: 1})]
    running = valid(P.ungated(gated, FLAVOR))
    assert "schedulingGates" not in running["spec"] and not integ.is_suspended(running)
    assert running["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "GH200"}
    assert P.ungated(running, FLAVOR) is None
    assert integ.finished(running) is None
    assert integ.finished({**running, "status": {"phase": "Succeeded"}}).succeeded
    assert integ.finished({**running, "status": {"phase": "Failed", "message": "OOMKilled"}}).message == "OOMKilled"
    assert integ.pod_set_of(PodFacts({}, {})) == "main"


def test_another_gate_is_kept():
    pod = POD.fresh()
    pod["spec"]["schedulingGates"] = [{"name": "example.com/quota-check"}]
    running = P.ungated(P.gated(pod), FLAVOR)
    assert running["spec"]["schedulingGates"] == [{"name": "example.com/quota-check"}]


def test_a_pod_group_is_one_workload_with_a_pod_set_per_role():
    pods = [group_pod("sweep-a"), group_pod("sweep-b"), group_pod("sweep-c", gpus=4)]
    gated = [valid(P.gated(p)) for p in pods]
    roles = [g["metadata"]["annotations"][P.ROLE_HASH] for g in gated]
    assert roles[0] == roles[1] != roles[2] and all(len(r) == 8 for r in roles)
    integ = registry.BY_KIND["Pod"]
    assert integ.workload_name(gated[0]) == "sweep"  # the group's name
    sets = P.group_pod_sets(gated)
    assert [(ps.name, ps.count, ps.engine_requests()) for ps in sets] == sorted(
        [(roles[0], 2, {GPU: 1}), (roles[2], 1, {GPU: 4})])
    # a failed pod does not count; the group finishes when as many pods succeeded as it counts
    assert sum(ps.count for ps in P.group_pod_sets(gated[:2] + [{**gated[2], "status": {"phase": "Failed"}}])) == 2
    assert P.group_finished(gated) is None
    done = [{**g, "status": {"phase": "Succeeded"}} for g in gated]
    assert P.group_finished(done).message == "Pods succeeded: 3/3."
    assert integ.pod_set_of(PodFacts(gated[2]["metadata"]["labels"], gated[2]["metadata"]["annotations"])) == roles[2]
    assert integ.pod_set_of(PodFacts(gated[2]["metadata"]["labels"], {})) is None  # a group pod with no role


def test_a_group_pod_with_a_bad_total_count_is_named():
    pod = group_pod("sweep-a")
    pod["metadata"]["annotations"][P.GROUP_TOTAL_COUNT] = "three"
    with pytest.raises(ValueError, match=r"^metadata\.annotations\[kueue\.x-k8s\.io/pod-group-total-count\]: must be a "
                                         r"whole number, got 'three'$"):
        P.group_total_count(pod)
    pod["metadata"]["annotations"][P.GROUP_TOTAL_COUNT] = "0"
    with pytest.raises(ValueError, match="should be greater than zero"):
        P.group_total_count(pod)


def test_role_hash_follows_what_admission_depends_on():
    spec = {"containers": [container("main", 1)], "tolerations": [{"key": "a", "operator": "Exists"}]}
    same = copy.deepcopy(spec)
    same["containers"][0]["image"] = "another"  # not part of the role
    same["containers"][0]["resources"]["limits"][GPU] = "1"
    assert role_hash(spec) == role_hash(same)
    assert role_hash(spec) != role_hash({**spec, "priority": 100})
    assert role_hash(spec) != role_hash({**spec, "nodeSelector": {"zone": "a"}})
    # quantities are compared as quantities, not as text
    a = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    b = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1000m"}}}]}
    assert role_hash(a) == role_hash(b)


def test_a_deployment_queues_each_of_its_pods():
    integ = registry.integration_for(DEPLOYMENT.obj)
    marked = valid(integ.marked(DEPLOYMENT.fresh(), "default"))
    meta = marked["spec"]["template"]["metadata"]
    assert meta["annotations"] == {P.SUSPENDING_PARENT: "deployment"}
    assert meta["labels"] == {"app": "infer", "kueue.x-k8s.io/queue-name": "default"}
    assert [(ps.name, ps.count, ps.engine_requests()) for ps in integ.pod_sets(marked)] == [("main", 1, {GPU: 1})]
    with pytest.raises(ValueError, match="each pod of a Deployment is a Workload of its own"):
        integ.workload_name(marked)
    assert integ.finished(marked) is None and not integ.is_suspended(marked)


def test_a_statefulset_is_one_pod_group():
    integ = registry.integration_for(STATEFULSET.obj)
    marked = valid(integ.marked(STATEFULSET.fresh(), "default"))
    meta = marked["spec"]["template"]["metadata"]
    group = workload_name("StatefulSet", "apps", "shard", "")
    assert group.startswith("statefulset-shard-") and meta["labels"][P.GROUP_NAME_LABEL] == group
    assert meta["annotations"] == {P.SUSPENDING_PARENT: "statefulset", P.GROUP_TOTAL_COUNT: "2",
                                   P.GROUP_FAST_ADMISSION: "true", P.GROUP_SERVING: "true",
                                   P.POD_INDEX_LABEL_ANNOTATION: "apps.kubernetes.io/pod-index"}
    (ps,) = integ.pod_sets(marked)
    assert (ps.count, ps.engine_requests()) == (2, {GPU: 2})
    assert integ.marked(STATEFULSET.fresh(), None)["spec"]["template"]["metadata"]["annotations"] == {
        P.SUSPENDING_PARENT: "statefulset"}  # without a queue it is marked, not grouped


async def test_a_leaderworkerset_is_a_workload_per_group():
    integ = registry.integration_for(LWS.obj)
    async with ApiServer() as api:
        api.cluster.create(R.NAMESPACES, None, {"metadata": {"name": "team-a"}})
        api.install_crds(*LWS.crds)
        async with client.ApiClient(api.client_configuration()) as ac:
            co = client.CustomObjectsApi(ac)
            args = ("leaderworkerset.x-k8s.io", "v1", "team-a", "leaderworkersets")
            stored = await co.create_namespaced_custom_object(*args, integ.marked(LWS.fresh(), "default"))
            for path in integ.template_paths:
                template = stored
                for p in path:
                    template = template[p]
                assert template["metadata"]["annotations"] == {P.SUSPENDING_PARENT: integ.framework}
                assert template["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "default"}
    assert {ps.name: (ps.count, ps.engine_requests()) for ps in integ.pod_sets(stored)} == LWS.pod_sets
    uid = stored["metadata"]["uid"]
    assert integ.workload_names(stored) == [workload_name("LeaderWorkerSet", "leaderworkerset.x-k8s.io", f"vllm-{i}", uid)
                                           for i in (0, 1)]
    no_leader = copy.deepcopy(stored)
    del no_leader["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert [(ps.name, ps.count) for ps in integ.pod_sets(no_leader)] == [("main", 4)]
