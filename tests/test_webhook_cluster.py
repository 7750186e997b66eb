"""The queue view fed by watch events, and starting without a cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path

from tests.webhook_support import client_context, load_review, make_cert_dir, wire
from webhook.cluster import ClusterView
from webhook.command import serve
from webhook.mutation import DEFAULT_PRIORITY_CLASS_ANNOTATION, ManagedJobsConfig, mutate_job

WATCH_FIXTURE = Path(__file__).parent / "fixtures" / "k8s-1.24" / "api" / "clusterqueues.watch.bookmarks.stream.jsonl"


def test_view_follows_events_and_relists():
    view = ClusterView()
    view.replace_all("localqueues", [{"metadata": {"namespace": "team-a", "name": "default"}}])
    view.replace_all("namespaces", [{"metadata": {"name": "team-a", "labels": {"gpu": "yes"}}}])
    view.replace_all("workloadpriorityclasses", [
        {"metadata": {"name": "normal", "annotations": {DEFAULT_PRIORITY_CLASS_ANNOTATION: "true"}}, "value": 100},
        {"metadata": {"name": "high"}, "value": 1000},
    ])
    view.replace_all("cohorts", [{"metadata": {"name": "team"}, "spec": {"parentName": "org"}}])
    assert view.ready()
    job = load_review("mutating-review-request.job-create.no-labels.json")["request"]["object"]
    res = mutate_job(job, view, ManagedJobsConfig())
    assert res.queue_name == "default"
    assert res.job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "normal"
    assert view.namespace_labels("team-a") == {"gpu": "yes"} and view.cohort_parent("team") == "org"

    view.apply_event("localqueues", "DELETED", {"metadata": {"namespace": "team-a", "name": "default"}})
    assert not mutate_job(job, view, ManagedJobsConfig()).managed
    view.apply_event("workloadpriorityclasses", "MODIFIED", {"metadata": {"name": "normal"}, "value": 100})
    assert view.default_priority_class() is None
    view.replace_all("localqueues", [])
    assert not view.local_queue_exists("team-a", "default")


def test_bookmarks_and_recorded_watch_lines_are_harmless():
    view = ClusterView()
    for line in WATCH_FIXTURE.read_text().splitlines():
        event = json.loads(line)
        view.apply_event("cohorts", event["type"], event["object"])  # BOOKMARKs carry no name-bearing change
    assert view.cohort_parents == {}


async def test_starts_without_cluster_and_warns_once(tmp_path, monkeypatch, caplog):
    cert_dir = make_cert_dir(tmp_path / "tls")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = argparse.Namespace(cert_dir=cert_dir, host="127.0.0.1", port=0, config=None,
                              controller_username="ctrl", max_body_bytes=1 << 20, cert_check_seconds=60)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO)
    task = asyncio.create_task(serve(args, stop))
    for _ in range(100):
        if "webhook serving on" in caplog.text:
            break
        await asyncio.sleep(0.02)
    port = int(caplog.text.split("webhook serving on https://127.0.0.1:")[1].split()[0])
    import aiohttp
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(cert_dir))) as s:
        async with s.get(f"https://127.0.0.1:{port}/readyz") as r:
            assert r.status == 200
        body = wire(load_review("mutating-review-request.job-create.suspend-false.json"))
        async with s.post(f"https://127.0.0.1:{port}/mutate-batch-v1-job", data=body) as r:
            assert (await r.json())["response"]["patchType"] == "JSONPatch"
    stop.set()
    await task
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "no cluster found" in warnings[0].getMessage()
