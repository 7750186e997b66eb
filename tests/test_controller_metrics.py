"""Kueue's metric families on /metrics, read over HTTP after the FLAME walkthrough, with the values a
Kueue operator's dashboards and alerts expect: Kueue's names, labels (the cohort), units (cpu in
cores, memory in bytes), buckets, pending workloads split active/inadmissible, evictions by reason
and preemptions by Kueue's preemption reason."""

from __future__ import annotations

import asyncio

import aiohttp

from gpuqueue.extender.controller.serving.metrics import KUEUE_WAIT_BUCKETS
from gpuqueue.extender.controller.serving.ops import start_ops
from gpuqueue.extender.controller.client.kinds import Kind
from tests.controller_support import Harness, eventually
from tests.metrics_support import INF, Scrape, flame_reclaimed, scrape


K_CLUSTER_ROLES = Kind("clusterroles", "rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole")
K_CLUSTER_ROLE_BINDINGS = Kind("clusterrolebindings", "rbac.authorization.k8s.io", "v1", "clusterrolebindings", False,
                               "ClusterRoleBinding")


async def _read(url: str) -> Scrape:
    status, text = await scrape(url)
    assert status == 200, text
    return Scrape(text)


async def test_kueue_families_after_the_flame_reclaim():
    async with Harness(pod_deletion_delay=0.05) as h:
        ctl, a_keys, c_keys = await flame_reclaimed(h)
        ops = await start_ops(ctl, "127.0.0.1", 0, metrics_auth=None)
        url = f"http://127.0.0.1:{ops.addresses[0][1]}/metrics"
        try:
            latest: list[Scrape] = []

            async def settled() -> bool:
                m = await _read(url)
                latest[:] = [m]
                return (m.value("kueue_pending_workloads", cluster_queue="group-c", status="inadmissible") == 2
                        and m.value("kueue_evicted_workloads_total", cluster_queue="group-c", reason="Preempted", underlying_cause="") == 2
                        and m.value("kueue_reserving_active_workloads", cluster_queue="group-c") == 2)

            for _ in range(300):
                if await settled():
                    break
                await asyncio.sleep(0.02)
            m = latest[0]
            assert await settled(), m.text

            # pending: C's two victims failed their admission attempt (nothing to borrow): inadmissible
            assert m.value("kueue_pending_workloads", cluster_queue="group-c", status="active") == 0
            for cq in ("group-a", "group-b", "cpu-queue"):
                assert m.value("kueue_pending_workloads", cluster_queue=cq, status="active") == 0
                assert m.value("kueue_pending_workloads", cluster_queue=cq, status="inadmissible") == 0
            # the inactive ClusterQueue (its flavor is missing): Kueue's "pending" status, its job inadmissible
            assert m.value("kueue_pending_workloads", cluster_queue="group-x", status="inadmissible") == 1
            for cq, status in (("group-a", "active"), ("group-c", "active"), ("cpu-queue", "active"),
                               ("group-x", "pending")):
                for s in ("pending", "active", "terminating"):
                    assert m.value("kueue_cluster_queue_status", cluster_queue=cq, status=s) == (s == status), (cq, s)

            # admissions: counted once each, with Kueue's wait histogram and buckets
            for cq, n in (("group-a", 4), ("group-b", 2), ("group-c", 4), ("cpu-queue", 1)):
                assert m.value("kueue_admitted_workloads_total", cluster_queue=cq) == n, cq
                assert m.value("kueue_quota_reserved_workloads_total", cluster_queue=cq) == n, cq
                assert m.value("kueue_admission_wait_time_seconds_count", cluster_queue=cq) == n, cq
                assert m.value("kueue_quota_reserved_wait_time_seconds_count", cluster_queue=cq) == n, cq
            buckets = m.matching("kueue_admission_wait_time_seconds_bucket", cluster_queue="group-a")
            assert sorted(float(dict(lbls)["le"]) for lbls in buckets) == sorted(KUEUE_WAIT_BUCKETS + (INF,))
            assert KUEUE_WAIT_BUCKETS == (1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240)
            assert m.value("kueue_admission_wait_time_seconds_bucket", cluster_queue="group-a", le="+Inf") == 4
            assert m.value("kueue_admission_attempts_total", result="success") >= 1

            # evictions by Kueue's reason, preemptions by Kueue's preemption reason
            assert m.matching("kueue_evicted_workloads_total") == {
                (("cluster_queue", "group-c"), ("reason", "Preempted"), ("underlying_cause", "")): 2}
            # Kueue's exporter: client_golang's default buckets, and no *_created series
            attempt = m.matching("kueue_admission_attempt_duration_seconds_bucket", result="success")
            assert sorted(float(dict(lbls)["le"]) for lbls in attempt) == [
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, INF]
            assert "_created" not in m.text
            assert m.matching("kueue_preempted_workloads_total") == {
                (("preempting_cluster_queue", "group-a"), ("reason", "InCohortReclamation")): 2}

            # quota and usage, with the cohort label, in Kueue's units
            gpu = {"flavor": "gh200", "resource": "nvidia.com/gpu"}
            for cq, nominal, used in (("group-a", 4, 4), ("group-b", 2, 2), ("group-c", 0, 2)):
                labels = {"cohort": "flame", "cluster_queue": cq, **gpu}
                assert m.value("kueue_cluster_queue_nominal_quota", **labels) == nominal
                assert m.value("kueue_cluster_queue_resource_usage", **labels) == used
                assert m.value("kueue_cluster_queue_resource_reservation", **labels) == used
                assert m.value("kueue_cluster_queue_borrowing_limit", **labels) == INF
                assert m.value("kueue_cluster_queue_lending_limit", **labels) == INF
                assert m.value("kueue_reserving_active_workloads", cluster_queue=cq) == used
                assert m.value("kueue_admitted_active_workloads", cluster_queue=cq) == used
            cpu = {"cohort": "", "cluster_queue": "cpu-queue", "flavor": "default-flavor"}
            assert m.value("kueue_cluster_queue_resource_usage", **cpu, resource="cpu") == 0.5  # cores
            assert m.value("kueue_cluster_queue_nominal_quota", **cpu, resource="cpu") == 1.5
            assert m.value("kueue_cluster_queue_borrowing_limit", **cpu, resource="cpu") == 0
            assert m.value("kueue_cluster_queue_resource_usage", **cpu, resource="memory") == 512 * 2**20  # bytes
            assert m.value("kueue_cluster_queue_nominal_quota", **cpu, resource="memory") == 2 * 2**30
            assert m.value("gpuqueue_cluster_queue_borrowed", cluster_queue="group-c", **gpu) == 2

            # the LocalQueue families (Kueue's LocalQueueMetrics feature)
            lq_c = {"name": "default", "namespace": "team-c"}
            assert m.value("kueue_local_queue_pending_workloads", **lq_c, status="inadmissible") == 2
            assert m.value("kueue_local_queue_pending_workloads", **lq_c, status="active") == 0
            assert m.value("kueue_local_queue_admitted_workloads_total", **lq_c) == 4
            assert m.value("kueue_local_queue_quota_reserved_workloads_total", **lq_c) == 4
            assert m.value("kueue_local_queue_admission_wait_time_seconds_count", **lq_c) == 4
            assert m.value("kueue_local_queue_evicted_workloads_total", **lq_c, reason="Preempted", underlying_cause="") == 2
            assert m.value("kueue_local_queue_reserving_active_workloads", **lq_c) == 2
            assert m.value("kueue_local_queue_admitted_active_workloads", **lq_c) == 2
            assert m.value("kueue_local_queue_resource_usage", **lq_c, **gpu) == 2
            assert m.value("kueue_local_queue_resource_reservation", **lq_c, **gpu) == 2
            assert m.value("kueue_local_queue_resource_usage", name="default", namespace="team-d",
                           flavor="default-flavor", resource="cpu") == 0.5
            for ns, active in (("team-a", "True"), ("team-x", "False")):
                for s in ("True", "False", "Unknown"):
                    assert m.value("kueue_local_queue_status", name="default", namespace=ns, active=s) == (s == active)
            # nothing left under gpuqueue_'s old names for what Kueue names
            assert not {n for n in m.names if n.startswith(("gpuqueue_pending", "gpuqueue_preemptions",
                                                            "gpuqueue_reserving", "gpuqueue_admitted"))}
        finally:
            await ops.cleanup()


async def test_a_replica_that_stops_leading_stops_showing_queue_numbers():
    """Only the leader's engine knows the queues: a replica that lost the Lease would otherwise keep
    serving its last values, and a dashboard summing over replicas would count them twice."""
    async with Harness(pod_deletion_delay=0.05) as h:
        ctl, _, _ = await flame_reclaimed(h)
        await eventually(lambda: ctl.metrics.showing_queues, what="gauges shown while leading")
        await ctl.lose_leadership()
        await eventually(lambda: not ctl.metrics.showing_queues, what="gauges dropped")
        from prometheus_client import generate_latest

        text = generate_latest(ctl.metrics.registry).decode()
        assert "kueue_pending_workloads{" not in text and "kueue_cluster_queue_nominal_quota{" not in text
        assert "kueue_admitted_workloads_total{" in text  # counters of what this replica did stay


async def test_metrics_answer_only_callers_the_api_server_authorises(tmp_path):
    """As Kueue's: HTTPS, a bearer token checked by TokenReview, then a SubjectAccessReview for `get`
    on /metrics. Prometheus bound to the shipped gpuqueue-metrics-reader reads it; another
    ServiceAccount, no token, a made-up token and a forged X-Remote-User header do not; the probes
    stay open; answers are cached; a flood of made-up tokens is refused once over its own budget."""
    from kubernetes_asyncio import client

    from gpuqueue.extender.controller.serving.delegated_auth import DelegatedAuth
    from gpuqueue.extender.controller.client.kubeapi import KubeApi
    from gpuqueue.tls import ReloadingTLS
    from tests.metrics_support import apply_manifest_objects, serving_certs

    certs, trust = serving_certs(tmp_path)
    async with Harness(pod_deletion_delay=0.05) as h:
        ctl, _, _ = await flame_reclaimed(h)
        for obj in apply_manifest_objects({"gpuqueue-metrics-reader"}):
            await h.kube.create(K_CLUSTER_ROLES, None, obj)
        await h.kube.create(K_CLUSTER_ROLE_BINDINGS, None, {
            "metadata": {"name": "prometheus"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuqueue-metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]})
        prometheus = h.api.authn.service_account_token("monitoring", "prometheus")
        stranger = h.api.authn.service_account_token("team-c", "default")
        reviews_client = client.ApiClient(h.api.client_configuration())
        auth = DelegatedAuth(KubeApi(reviews_client), qps=1, burst=8)
        ops = await start_ops(ctl, "127.0.0.1", 0, metrics_auth=auth, ssl_context=ReloadingTLS(certs).context)
        base = f"https://127.0.0.1:{ops.addresses[0][1]}"
        try:
            status, text = await scrape(base + "/metrics", prometheus, ssl=trust)
            assert status == 200 and "kueue_pending_workloads{" in text
            assert (await scrape(base + "/metrics", stranger, ssl=trust))[0] == 403
            status, text = await scrape(base + "/metrics", None, ssl=trust)
            assert status == 401 and "bearer token" in text
            assert (await scrape(base + "/metrics", "made-up", ssl=trust))[0] == 401
            async with aiohttp.ClientSession() as http:
                async with http.get(base + "/metrics", ssl=trust, headers={"X-Remote-User": "system:admin",
                                                                           "X-Remote-Group": "system:masters"}) as r:
                    assert r.status == 401  # no front-proxy certificate: the headers count for nothing
                async with http.get(base + "/healthz", ssl=trust) as r:
                    assert r.status == 200
            reviews = auth.reviews
            assert (await scrape(base + "/metrics", prometheus, ssl=trust))[0] == 200
            assert auth.reviews == reviews  # cached: no new TokenReview or SubjectAccessReview
            codes = [(await scrape(base + "/metrics", f"flood-{i}", ssl=trust))[0] for i in range(12)]
            assert set(codes) == {401, 429} and codes[-1] == 429
            assert auth.reviews <= reviews + 3  # the budget (1/s, burst 8) held, whatever the flood
            plain = await start_ops(ctl, "127.0.0.1", 0, metrics_auth=None)  # --metrics-insecure
            try:
                status, _ = await scrape(f"http://127.0.0.1:{plain.addresses[0][1]}/metrics")
                assert status == 200
            finally:
                await plain.cleanup()
        finally:
            await ops.cleanup()
            await reviews_client.close()


def _dashboard_queries() -> list[str]:
    import json
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[1] / "charts" / "gpuqueue" / "files" / "gpuqueue-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


async def test_the_grafana_dashboard_reads_only_metrics_that_exist():
    """Every series the shipped dashboard queries (panels and variables) is on /metrics after the FLAME
    walkthrough, and every label it groups, joins or filters by is a label of that series."""
    import re

    exprs = _dashboard_queries()
    assert len(exprs) >= 15
    async with Harness(pod_deletion_delay=0.05) as h:
        ctl, _, _ = await flame_reclaimed(h)
        ops = await start_ops(ctl, "127.0.0.1", 0, metrics_auth=None)
        try:
            url = f"http://127.0.0.1:{ops.addresses[0][1]}/metrics"
            for _ in range(300):
                m = await _read(url)
                if m.value("kueue_evicted_workloads_total", cluster_queue="group-c", reason="Preempted", underlying_cause="") == 2:
                    break
                await asyncio.sleep(0.02)
        finally:
            await ops.cleanup()
    labels_of: dict[str, set[str]] = {}
    for name, lbls in m.samples:
        labels_of.setdefault(name, set()).update(k for k, _ in lbls)
    used = set()
    for expr in exprs:
        names = set(re.findall(r"\b((?:kueue|gpuqueue)_[a-z_]+)\b", expr))
        assert names, expr
        for name in names:
            assert name in m.names, f"{name} (in {expr!r}) is not on /metrics"
            used.add(name)
        grouped = {g.strip() for group in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr) for g in group.split(",")}
        selected = set(re.findall(r"([a-z_]+)\s*(?:=~|!=|=)\s*\"", expr))
        for label in (grouped | selected) - {"le"}:
            assert any(label in labels_of[n] for n in names), f"label {label} of {expr!r} is on none of {names}"
    # it covers the families a Kueue operator watches
    assert {"kueue_pending_workloads", "kueue_admitted_workloads_total", "kueue_evicted_workloads_total",
            "kueue_preempted_workloads_total", "kueue_admission_wait_time_seconds_bucket",
            "kueue_cluster_queue_resource_usage", "kueue_cluster_queue_nominal_quota",
            "kueue_cluster_queue_borrowing_limit", "kueue_cluster_queue_status",
            "kueue_local_queue_pending_workloads"} <= used
