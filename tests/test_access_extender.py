"""The extender's Kubernetes API calls, as the API server stand-in saw them while the controller ran
its end-to-end scenarios (the scenarios of tests/test_controller_*.py, run again here against a
recording stand-in), compared with gpuqueue/access.py both ways: every call made is declared, and
every verb declared for the extender is made in at least one scenario. Likewise `gpuqueue explain`.

The controller's requests are told apart from the test's own (creating quota objects, submitting
and deleting Jobs) by their User-Agent. One recorded run serves every assertion.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict

import pytest
from kubernetes_asyncio import client

from gpuqueue.extender.controller.controller import Controller
from gpuqueue.extender.controller.options import Options
from gpuqueue.extender.controller.explain.explain import explain_job
from gpuqueue.extender.controller.kinds.managed_kinds import kind_of
from gpuqueue.jobframework.registry import BY_KIND, IntegrationsConfig
from gpuqueue import access
from tests.standin import ApiServer
from tests.standin import resources as R
from gpuqueue.jobframework.registry import INTEGRATIONS
from tests import (controller_support, test_controller_behaviour, test_controller_flame, test_controller_flame_kinds,
                   test_controller_hostile, test_controller_kinds, test_controller_lws, test_controller_pods)
from tests.controller_support import FAST, Harness, eventually, job_key, scenario
from tests.webhook_support import api_calls, assert_calls_match_access_table

EXTENDER_AGENT = "gpuqueue-extender/recorded"
EXPLAIN_AGENT = "gpuqueue-explain/recorded"
HARNESS_AGENT = "test-harness"
NS = access.INSTALL_NAMESPACE

Call = tuple[str, str, str, "str | None", "str | None"]  # group, resource[/subresource], verb, namespace, name


class Recording:
    """Requests per User-Agent, and the permissions the API server checks beyond the request's own
    verb: creating an object whose ownerReference sets blockOwnerDeletion needs `update` on the
    owner's `finalizers` subresource (admission plugin OwnerReferencesPermissionEnforcement)."""

    def __init__(self) -> None:
        self.requests: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.implied: dict[str, set[Call]] = defaultdict(set)
        self.unattributed: list[tuple[str, str, str]] = []

    def calls(self, agent: str) -> set[Call]:
        return api_calls(self.requests[agent]) | self.implied[agent]


_PLURAL = {**{(r.group, r.kind): r.plural for r in R.ALL}, **{(i.group, i.kind): i.plural for i in INTEGRATIONS}}


class RecordingApiServer(ApiServer):
    def __init__(self, recording: Recording, **kw) -> None:
        super().__init__(**kw)
        self.recording = recording

    async def _handle(self, request):
        agent = request.headers.get("User-Agent", "")
        if agent in (EXTENDER_AGENT, EXPLAIN_AGENT):
            self.recording.requests[agent].append((request.method, request.path_qs))
            if request.method == "POST":
                await self._owner_checks(agent, request)
        elif agent != HARNESS_AGENT:
            self.recording.unattributed.append((agent, request.method, request.path_qs))
        return await super()._handle(request)

    async def _owner_checks(self, agent: str, request) -> None:
        try:
            body = await request.json()  # aiohttp keeps the bytes: the stand-in reads them again
        except ValueError:
            return
        parts = [p for p in request.path.split("/") if p]
        namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else None
        for ref in (body.get("metadata") or {}).get("ownerReferences") or ():
            if ref.get("blockOwnerDeletion"):
                group = ref["apiVersion"].rpartition("/")[0]
                plural = _PLURAL[(group, ref["kind"])]
                self.recording.implied[agent].add((group, f"{plural}/finalizers", "update", namespace, ref["name"]))


def _client(api: ApiServer, agent: str) -> client.ApiClient:
    c = client.ApiClient(api.client_configuration())
    c.user_agent = agent
    return c


class RecordingHarness(Harness):
    recording: Recording  # set while the recorded run lasts

    def __init__(self, **server_kw) -> None:
        server_kw.setdefault("job_controller", True)
        super().__init__(**server_kw)
        self.api = RecordingApiServer(self.recording, **server_kw)

    async def __aenter__(self) -> "RecordingHarness":
        await super().__aenter__()
        self.client.user_agent = HARNESS_AGENT
        return self

    async def controller(self, options: Options = FAST, identity: str = "test") -> Controller:
        await self.namespace("gpuqueue-system")
        ctl = Controller(_client(self.api, EXTENDER_AGENT), options, identity=identity)
        self.controllers.append(ctl)
        await ctl.start()
        return ctl


# -- scenarios written for this test: what the reused ones do not reach ----------------------------------

async def leader_election_in_the_install_namespace() -> None:
    """Two replicas as deployed (Lease in gpuqueue-system): one creates the Lease, the other takes
    it over when the leader dies silently, and releases it on a clean shutdown."""
    objects, jobs, _ = scenario("together-quota.yaml")
    opts = dataclasses.replace(FAST, leader_elect=True, lease_namespace=NS, lease_name=access.LEADER_ELECTION_LEASE,
                               lease_duration=1.0, renew_deadline=0.6, retry_period=0.05)
    async with RecordingHarness() as h:
        await h.namespace(NS)
        for obj in objects:
            await h.apply(obj)
        one = await h.controller(opts, identity="one")
        two = await h.controller(opts, identity="two")
        await eventually(lambda: one.leader != two.leader, what="one leader")
        leader, follower = (one, two) if one.leader else (two, one)
        leader.elector.leading = False  # dies without releasing the Lease
        await h.kill(leader)
        await eventually(lambda: follower.leader and follower.recovered, timeout=4, what="follower leads")
        await h.submit(jobs[0])
        await eventually(lambda: h.running(*job_key(jobs[0])), what="admitted by the new leader")
        await h.kill(follower)  # clean stop: the Lease is released
        lease = h.api.cluster.store.get("leases.coordination.k8s.io", (NS, access.LEADER_ELECTION_LEASE))
        assert lease["spec"]["holderIdentity"] == "" and lease["spec"]["leaseTransitions"] >= 1


async def queue_status_conflicts_and_explain() -> None:
    """Status writes of ClusterQueue and LocalQueue that meet a conflict re-read the queue; then
    `gpuqueue explain` on an admitted, a pending and a missing Job."""
    objects, jobs, later = scenario("together-quota.yaml")
    async with RecordingHarness() as h:
        for obj in objects:
            await h.apply(obj)
        conflicts = [h.api.faults.add(r"/clusterqueues/[^/]+/status$", method="PATCH", status=409, times=1),
                     h.api.faults.add(r"/localqueues/[^/]+/status$", method="PATCH", status=409, times=1)]
        await h.controller()
        await h.submit(jobs[0])
        await h.submit(later[0])
        await eventually(lambda: h.running("default", "gpu-job-a") and "more needed" in str(
            (h.workload_of("default", "gpu-job-b") or {}).get("status")), what="a admitted, b pending")
        await eventually(lambda: all(f.times == 0 for f in conflicts), what="both conflicts met")
        await eventually(lambda: (h.cluster_queue("gpu-cluster-queue").get("status") or {}).get(
            "reservingWorkloads") == 1, what="status written after the conflict")
        user = _client(h.api, EXPLAIN_AGENT)
        try:
            assert (await explain_job(user, "default/gpu-job-b"))[1] == 1
            assert (await explain_job(user, "default/gpu-job-a"))[1] == 0
            assert (await explain_job(user, "default/nope"))[1] == 2
        finally:
            await user.close()


async def metrics_behind_delegated_auth() -> None:
    """/metrics scraped with a token: a TokenReview, a SubjectAccessReview, and at start the
    front-proxy settings of kube-aggregator (kube-system/extension-apiserver-authentication)."""
    from gpuqueue.extender.controller.serving.delegated_auth import DelegatedAuth
    from gpuqueue.extender.controller.client.kubeapi import KubeApi
    from gpuqueue.extender.controller.serving.ops import start_ops
    from tests.metrics_support import scrape

    async with RecordingHarness() as h:
        h.api.enable_aggregation()
        ctl = await h.controller()
        reviews = _client(h.api, EXTENDER_AGENT)
        auth = DelegatedAuth(KubeApi(reviews))
        assert await auth.load_requestheader() is not None
        ops = await start_ops(ctl, "127.0.0.1", 0, metrics_auth=auth)
        try:
            token = h.api.authn.service_account_token("monitoring", "prometheus")
            assert (await scrape(f"http://127.0.0.1:{ops.addresses[0][1]}/metrics", token))[0] == 403
        finally:
            await ops.cleanup()
            await reviews.close()


# The controller scenarios of tests/test_controller_*.py, run as they are (with their own
# assertions) on the recording stand-in. Left out: the watch-expiry one and the random kills
# (lists and watches again, nothing new), and the one on Lease `kube-system` (see above).
REUSED = [
    test_controller_behaviour.test_together_guide_walkthrough,  # events, Job deletion, queue status
    test_controller_behaviour.test_missing_flavor_makes_the_cluster_queue_inactive_and_says_so,
    test_controller_behaviour.test_preempted_job_gets_its_template_back_where_kubernetes_allows_it,
    test_controller_behaviour.test_on_1_24_a_preempted_job_waits_for_the_flavor_its_template_keeps,
    test_controller_behaviour.test_on_1_24_a_job_its_owner_started_cannot_take_a_flavor_and_says_why,
    test_controller_behaviour.test_conflicts_are_retried_from_a_fresh_read,
    test_controller_behaviour.test_workload_deleted_by_hand_is_recreated_and_the_job_requeued,
    test_controller_behaviour.test_hold_and_drain_evicts_and_requeues,
    test_controller_flame.test_flame_borrow_reclaim_resume,  # borrowing, reclaim, Job completion
    test_controller_hostile.test_queue_label_changed_on_a_pending_job_moves_it,  # a pending Workload updated
    test_controller_hostile.test_restart_counts_a_reservation_whose_job_is_gone_until_its_pods_are,
    test_controller_flame_kinds.test_flame_with_pytorchjob_borrowers_and_jobset_reclaimers,
    test_controller_pods.test_a_plain_pods_whole_life_through_the_controller,  # pods ungated, deleted, finalizers
    test_controller_lws.test_a_leaderworkersets_group_through_the_controller,  # LWS watched, owns its Workloads
]


async def every_kind_with_a_conflict() -> None:
    """Each kind it queues besides Jobs, whole life, its first write meeting a 409 Conflict (the
    fresh read after it is a `get`); a kind whose CRD is not installed is skipped after one list."""
    for sample in test_controller_kinds.LIVES:
        plural = kind_of(BY_KIND[sample.kind]).plural
        with pytest.MonkeyPatch.context() as mp:
            faults = []

            class Conflicting(RecordingHarness):
                async def __aenter__(self):
                    out = await super().__aenter__()
                    faults.append(self.api.faults.add(rf"/{plural}/[^/]+$", method="PATCH", status=409, times=1))
                    return out

            mp.setattr(test_controller_kinds, "Harness", Conflicting)
            await test_controller_kinds.test_a_whole_life_through_the_controller(sample)
            assert faults[0].times == 0, f"no conflict met on {plural}"
    async with RecordingHarness() as h:  # no CRDs installed: each kind is skipped
        frameworks = ("batch/job", *(BY_KIND[s.kind].framework for s in test_controller_kinds.LIVES))
        ctl = await h.controller(dataclasses.replace(FAST, integrations=IntegrationsConfig(frameworks)))
        await eventually(lambda: ctl.recovered, what="leading without the kinds")
        assert [k.kind.kind for k in ctl.kinds] == ["Job"]


OWN = [leader_election_in_the_install_namespace, queue_status_conflicts_and_explain, metrics_behind_delegated_auth,
       every_kind_with_a_conflict]


@pytest.fixture(scope="module")
def recorded() -> Recording:
    recording = Recording()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RecordingHarness, "recording", recording, raising=False)
        for module in (test_controller_behaviour, test_controller_flame, test_controller_hostile, controller_support,
                       test_controller_kinds, test_controller_flame_kinds, test_controller_pods, test_controller_lws):
            mp.setattr(module, "Harness", RecordingHarness)

        async def run_all() -> None:
            for scenario_fn in REUSED + OWN:
                await scenario_fn()

        asyncio.run(run_all())
    return recording


def test_every_request_is_attributed(recorded):
    assert recorded.unattributed == []
    assert len(recorded.requests[EXTENDER_AGENT]) > 100 and recorded.requests[EXPLAIN_AGENT]


def test_extender_calls_are_exactly_those_declared(recorded):
    assert_calls_match_access_table("extender", recorded.calls(EXTENDER_AGENT))


def test_explain_calls_are_exactly_those_declared(recorded):
    assert_calls_match_access_table("explain", recorded.calls(EXPLAIN_AGENT))


def test_recorded_calls_in_rbac_terms(recorded):
    """What the recording says, spelled out: a reader sees here which verbs the extender uses."""
    used = defaultdict(set)
    for group, resource, verb, namespace, _name in recorded.calls(EXTENDER_AGENT):
        used[(group, resource, namespace is not None and resource == "leases")].add(verb)
    assert used[("kueue.x-k8s.io", "workloads", False)] == {"list", "watch", "get", "create", "patch", "delete"}
    assert used[("kueue.x-k8s.io", "workloads/status", False)] == {"patch"}
    assert used[("batch", "jobs", False)] == {"list", "watch", "get", "patch"}
    assert used[("batch", "jobs/finalizers", False)] == {"update"}
    assert used[("", "events", False)] == {"create"}
    assert used[("coordination.k8s.io", "leases", True)] == {"get", "create", "update"}
    assert used[("", "nodes", False)] == {"list", "watch"}
    # and the label that sends unlabelled Jobs to the webhook where a LocalQueue "default" is
    assert used[("", "namespaces", False)] == {"list", "watch", "patch"}
    assert used[("", "pods", False)] == {"list", "watch", "get", "patch", "delete"}  # the pod integration's writes
    assert used[("", "pods/finalizers", False)] == {"update"}
    lease_namespaces = {ns for _g, r, _v, ns, _n in recorded.calls(EXTENDER_AGENT) if r == "leases"}
    assert lease_namespaces == {NS}


def test_the_comparison_would_catch_an_undeclared_call_and_an_unused_grant(recorded, monkeypatch):
    calls = recorded.calls(EXTENDER_AGENT)
    with pytest.raises(AssertionError, match="does not declare"):
        assert_calls_match_access_table("extender", calls | {("", "nodes", "delete", None, "n")})
    extra = access.ApiAccess("extender", "", "nodes", frozenset({"get"}), "test")
    monkeypatch.setattr(access, "API_ACCESS", access.API_ACCESS + (extra,))
    with pytest.raises(AssertionError, match="never makes"):
        assert_calls_match_access_table("extender", calls)
