"""kueuectl's everyday verbs (`gpuqueue list|stop|resume|create ...`, and `kubectl gpuqueue ...` as a
plugin) against the API server stand-in: the tables with kueuectl's columns and flags, and the
writes kueuectl makes (spec.stopPolicy of queues, spec.active of Workloads, a new LocalQueue).

The stand-in runs on its own event loop in a thread, so the command runs as a person runs it:
`main([...])`, which starts its own loop, parses the flags and prints."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuqueue.cli import main
from tests.standin import ApiServer
from tests.standin import resources as R
from tests.webhook_support import api_calls, assert_calls_match_access_table

ROOT = Path(__file__).resolve().parent.parent
MERGE = "application/merge-patch+json"


# Conditions changed 5 days ago: EXEC TIME reads "5d" for the next hour, whenever the test runs.
FIVE_DAYS_AGO = (datetime.now(timezone.utc) - timedelta(days=5)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(type_: str, status: str = "True") -> dict:
    return {"type": type_, "status": status, "reason": type_, "message": "", "lastTransitionTime": FIVE_DAYS_AGO}


def _workload(ns: str, name: str, job: dict, queue: str, priority: int = 0, labels: dict | None = None) -> dict:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
             "controller": True}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "ownerReferences": [owner]},
            "spec": {"queueName": queue, "priority": priority,
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]}}


class Cluster:
    """The stand-in on a loop of its own; `run(coro)` runs a coroutine there and waits for it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.api = ApiServer(namespaces=("default", "team-a", "team-b", "empty"))
        self.run(self.api.start())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.run(self.api.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def get(self, rt, ns, name) -> dict:
        async def go():
            return self.api.cluster.get(rt, ns, name)
        return self.run(go())

    def seed(self) -> None:
        c = self.api.cluster

        async def go():
            def put(rt, ns, body, status=None):
                created = c.create(rt, ns, body)
                if status is not None:
                    c.patch(rt, ns, body["metadata"]["name"], MERGE, {"status": status}, subresource="status")
                return created

            def job(ns, name):  # a Workload's owner: without it, the garbage collector takes the Workload
                return put(R.JOBS, ns, {"metadata": {"name": name}, "spec": {"suspend": True, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})

            put(R.CLUSTER_QUEUES, None, {"metadata": {"name": "cq-a"}, "spec": {"cohortName": "pool"}},
                {"pendingWorkloads": 2, "admittedWorkloads": 2, "conditions": [_cond("Active")]})
            put(R.CLUSTER_QUEUES, None, {"metadata": {"name": "cq-b"}, "spec": {}},
                {"pendingWorkloads": 1, "admittedWorkloads": 0, "conditions": [_cond("Active", "False")]})
            put(R.LOCAL_QUEUES, "team-a", {"metadata": {"name": "lq-a"}, "spec": {"clusterQueue": "cq-a"}},
                {"pendingWorkloads": 2, "admittedWorkloads": 2})
            put(R.LOCAL_QUEUES, "team-b", {"metadata": {"name": "lq-b"}, "spec": {"clusterQueue": "cq-b"}},
                {"pendingWorkloads": 1, "admittedWorkloads": 0})
            admitted = {"admission": {"clusterQueue": "cq-a", "podSetAssignments": []},
                        "conditions": [_cond("QuotaReserved"), _cond("Admitted")]}
            put(R.WORKLOADS, "team-a", _workload("team-a", "job-job-1-aaaaa", job("team-a", "job-1"), "lq-a"), admitted)
            put(R.WORKLOADS, "team-a", _workload("team-a", "job-job-2-bbbbb", job("team-a", "job-2"), "lq-a", labels={"team": "x"}))
            put(R.WORKLOADS, "team-a", _workload("team-a", "job-job-3-ccccc", job("team-a", "job-3"), "lq-a", priority=100))
            put(R.WORKLOADS, "team-a", _workload("team-a", "job-job-4-ddddd", job("team-a", "job-4"), "lq-a"),
                {**admitted, "conditions": admitted["conditions"] + [_cond("Finished")]})
            put(R.WORKLOADS, "team-b", _workload("team-b", "job-job-5-eeeee", job("team-b", "job-5"), "lq-b"))

        self.run(go())


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    c.seed()
    yield c
    c.close()


@pytest.fixture
def kubeconfig(cluster, tmp_path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: standin, cluster: {{server: "{cluster.api.url}"}}}}]
users: [{{name: me, user: {{token: t}}}}]
contexts: [{{name: team-a, context: {{cluster: standin, user: me, namespace: team-a}}}}]
current-context: team-a
""")
    return str(path)


@pytest.fixture
def gq(kubeconfig, capsys):
    """`gpuqueue ARGS --kubeconfig K`: (exit code, stdout, stderr)."""
    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--kubeconfig", kubeconfig])
        out = capsys.readouterr()
        return code, out.out, out.err
    return run


def table(text: str) -> list[list[str]]:
    """The cells of a kubectl-style table, cut where the header's columns start (a cell may be
    empty); the AGE column is checked and dropped."""
    lines = text.splitlines()
    headers = re.split(r" {2,}", lines[0].strip())
    starts, at = [], 0
    for h in headers:
        start = lines[0].index(h, at)
        starts.append(start)
        at = start + len(h)
    rows = [[line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])] for line in lines]
    assert rows[0][-1] == "AGE"
    for row in rows[1:]:
        assert re.fullmatch(r"\d+s", row[-1]), row
    return [row[:-1] for row in rows]


# -- list ------------------------------------------------------------------------------------------

def test_list_workloads_in_the_contexts_namespace(gq):
    code, out, err = gq("list", "workloads")
    # no visibility API on this cluster: the positions come from the Workloads, and it says so
    assert (code, err) == (0, "gpuqueue list: POSITION IN QUEUE from the Workloads' own order (the visibility API "
                              "answered 404: is manifests/visibility applied?)\n")
    assert table(out) == [
        ["NAME", "JOB TYPE", "JOB NAME", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS", "POSITION IN QUEUE", "EXEC TIME"],
        ["job-job-1-aaaaa", "job.batch", "job-1", "lq-a", "cq-a", "ADMITTED", "", "5d"],
        # pending: the higher priority is first in its LocalQueue (position 0); no EXEC TIME
        ["job-job-2-bbbbb", "job.batch", "job-2", "lq-a", "cq-a", "PENDING", "1", ""],
        ["job-job-3-ccccc", "job.batch", "job-3", "lq-a", "cq-a", "PENDING", "0", ""],
        # finished: EXEC TIME from admission to finish
        ["job-job-4-ddddd", "job.batch", "job-4", "lq-a", "cq-a", "FINISHED", "", "0s"],
    ]


def test_list_workloads_everywhere_and_filtered(gq):
    code, out, _ = gq("list", "wl", "-A")
    rows = table(out)
    assert rows[0][:2] == ["NAMESPACE", "NAME"]
    assert [r[:2] for r in rows[1:]] == [["team-a", "job-job-1-aaaaa"], ["team-a", "job-job-2-bbbbb"],
                                         ["team-a", "job-job-3-ccccc"], ["team-a", "job-job-4-ddddd"],
                                         ["team-b", "job-job-5-eeeee"]]
    assert rows[5][5:8] == ["cq-b", "PENDING", "0"]  # NAMESPACE first: CLUSTERQUEUE, STATUS, POSITION

    def names(*flags: str) -> list[str]:
        code, out, err = gq("list", "workloads", *flags)
        assert code == 0, err
        rows = table(out) if out else [[]]
        column = rows[0].index("NAME") if out else 0
        return [r[column] for r in rows[1:]]

    assert names("--status", "pending") == ["job-job-2-bbbbb", "job-job-3-ccccc"]
    assert names("--status", "admitted", "--status", "finished") == ["job-job-1-aaaaa", "job-job-4-ddddd"]
    assert names("-A", "-c", "cq-b") == ["job-job-5-eeeee"]  # pending: by its LocalQueue's ClusterQueue
    assert names("-n", "team-b", "-q", "lq-b") == ["job-job-5-eeeee"]
    assert names("--for", "job/job-3") == ["job-job-3-ccccc"]
    assert names("--for", "job.batch/job-1") == ["job-job-1-aaaaa"]
    assert names("-l", "team=x") == ["job-job-2-bbbbb"]
    assert names("--field-selector", "metadata.name=job-job-3-ccccc") == ["job-job-3-ccccc"]


def test_a_selector_does_not_move_a_workload_in_its_queue(gq):
    _, out, _ = gq("list", "workloads", "-l", "team=x")
    assert table(out)[1][6] == "1"  # job-3, of higher priority, is still ahead of it


def test_list_clusterqueues(gq):
    code, out, _ = gq("list", "clusterqueues")
    assert table(out) == [["NAME", "COHORT", "PENDING WORKLOADS", "ADMITTED WORKLOADS", "ACTIVE"],
                          ["cq-a", "pool", "2", "2", "true"],
                          ["cq-b", "", "1", "0", "false"]]
    _, out, _ = gq("list", "cq", "--active", "false")
    assert [r[0] for r in table(out)[1:]] == ["cq-b"]


def test_list_localqueues(gq):
    _, out, _ = gq("list", "localqueues")
    assert table(out) == [["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
                          ["lq-a", "cq-a", "2", "2"]]
    _, out, _ = gq("list", "lq", "-A", "-c", "cq-b")
    assert table(out) == [["NAMESPACE", "NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"],
                          ["team-b", "lq-b", "cq-b", "1", "0"]]


def test_nothing_found_is_said_on_stderr(gq):
    assert gq("list", "workloads", "-n", "empty") == (0, "", "No resources found in empty namespace.\n")
    assert gq("list", "localqueues", "-A", "-c", "nope") == (0, "", "No resources found\n")


def test_bad_flags_are_one_line(gq):
    code, out, err = gq("list", "workloads", "--for", "job")
    assert (code, out) == (2, "")
    assert err == "gpuqueue list: --for: must be TYPE[.GROUP]/NAME (e.g. job/my-job), got 'job'\n"


# -- stop, resume, create --------------------------------------------------------------------------

def test_stop_and_resume_a_clusterqueue(gq, cluster):
    assert gq("stop", "clusterqueue", "cq-b") == (0, "clusterqueue.kueue.x-k8s.io/cq-b stopped\n", "")
    assert cluster.get(R.CLUSTER_QUEUES, None, "cq-b")["spec"]["stopPolicy"] == "HoldAndDrain"
    assert gq("stop", "cq", "cq-b", "--keep-already-running")[0] == 0
    assert cluster.get(R.CLUSTER_QUEUES, None, "cq-b")["spec"]["stopPolicy"] == "Hold"
    assert gq("resume", "clusterqueue", "cq-b") == (0, "clusterqueue.kueue.x-k8s.io/cq-b resumed\n", "")
    assert cluster.get(R.CLUSTER_QUEUES, None, "cq-b")["spec"]["stopPolicy"] == "None"


def test_stop_and_resume_a_localqueue(gq, cluster):
    assert gq("stop", "localqueue", "lq-b", "-n", "team-b") == (0, "localqueue.kueue.x-k8s.io/lq-b stopped\n", "")
    assert cluster.get(R.LOCAL_QUEUES, "team-b", "lq-b")["spec"]["stopPolicy"] == "HoldAndDrain"
    assert gq("resume", "lq", "lq-b", "-n", "team-b")[0] == 0
    assert cluster.get(R.LOCAL_QUEUES, "team-b", "lq-b")["spec"]["stopPolicy"] == "None"


def test_stop_and_resume_a_workload(gq, cluster):
    name = "job-job-2-bbbbb"
    assert gq("stop", "workload", name, "--dry-run", "server") == (
        0, f"workload.kueue.x-k8s.io/{name} stopped (server dry run)\n", "")
    assert cluster.get(R.WORKLOADS, "team-a", name)["spec"]["active"] is True  # the CRD's default, unchanged
    assert gq("stop", "wl", name) == (0, f"workload.kueue.x-k8s.io/{name} stopped\n", "")
    assert cluster.get(R.WORKLOADS, "team-a", name)["spec"]["active"] is False
    assert gq("resume", "workload", name)[0] == 0
    assert cluster.get(R.WORKLOADS, "team-a", name)["spec"]["active"] is True


def test_stopping_what_does_not_exist(gq):
    code, out, err = gq("stop", "clusterqueue", "nope")
    assert (code, out) == (1, "")
    assert err == 'gpuqueue stop: the API server answered 404 Not Found: clusterqueues.kueue.x-k8s.io "nope" not found\n'


def test_create_a_localqueue(gq, cluster):
    assert gq("create", "localqueue", "lq-new", "-c", "cq-a", "-n", "team-b") == (
        0, "localqueue.kueue.x-k8s.io/lq-new created\n", "")
    assert cluster.get(R.LOCAL_QUEUES, "team-b", "lq-new")["spec"] == {"clusterQueue": "cq-a", "stopPolicy": "None"}
    code, out, err = gq("create", "lq", "lq-2", "-c", "missing")
    assert (code, out) == (1, "")
    assert err == 'gpuqueue create: the API server answered 404 Not Found: clusterqueues.kueue.x-k8s.io "missing" not found\n'
    assert gq("create", "lq", "lq-2", "-c", "missing", "-i")[0] == 0
    assert cluster.get(R.LOCAL_QUEUES, "team-a", "lq-2")["spec"] == {"clusterQueue": "missing", "stopPolicy": "None"}


# -- what it may call, and the plugin ----------------------------------------------------------------

def test_the_verbs_calls_are_exactly_those_declared(cluster, gq):
    cluster.api.requests.clear()
    for args in (("list", "workloads", "-A", "-l", "team=x"), ("list", "workloads"), ("list", "clusterqueues"),
                 ("list", "localqueues", "-A"), ("stop", "cq", "cq-a"), ("resume", "cq", "cq-a"),
                 ("stop", "lq", "lq-a"), ("resume", "lq", "lq-a"), ("stop", "wl", "job-job-3-ccccc"),
                 ("resume", "wl", "job-job-3-ccccc"), ("create", "lq", "lq-3", "-c", "cq-a")):
        assert gq(*args)[0] == 0, args
    assert_calls_match_access_table("kueuectl", api_calls(cluster.api.requests))


def test_kubectl_runs_it_as_a_plugin(kubeconfig, tmp_path):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-gpuqueue"] == "gpuqueue.cli:kubectl_plugin"
    plugin = tmp_path / "bin" / "kubectl-gpuqueue"  # what pip installs for that entry, for this interpreter
    plugin.parent.mkdir()
    plugin.write_text(f"#!{sys.executable}\nimport sys\nfrom gpuqueue.cli import kubectl_plugin\nsys.exit(kubectl_plugin())\n")
    plugin.chmod(0o755)
    env = {**os.environ, "PATH": f"{plugin.parent}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(["kubectl", "gpuqueue", "list", "cq", "--kubeconfig", kubeconfig], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("NAME ")
    assert "cq-a" in res.stdout
    res = subprocess.run(["kubectl", "gpuqueue", "list", "workloads", "--for", "x", "--kubeconfig", kubeconfig],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2
    assert res.stderr.splitlines()[0] == "kubectl gpuqueue list: --for: must be TYPE[.GROUP]/NAME (e.g. job/my-job), got 'x'"


def test_what_the_api_server_refuses_is_one_line(gq, cluster):
    async def forbid():
        cluster.api.faults.add(r"/clusterqueues$", method="GET", status=403)
    cluster.run(forbid())
    assert gq("list", "clusterqueues") == (1, "", "gpuqueue list: the API server answered 403 Forbidden: injected fault 403\n")
