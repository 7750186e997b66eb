"""What a person sees when something they can fix is wrong: one line on stderr naming it and an
exit code, never a traceback (missing kubeconfig, an unreachable API server, a port in use, a
picture that cannot be written, matplotlib not installed, a scenario too large or empty)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuqueue.cli import main

ROOT = Path(__file__).resolve().parent.parent
FLAME = ROOT / "extender" / "simulate" / "examples" / "flame.yaml"


def gpuqueue(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    return subprocess.run([sys.executable, "-m", "gpuqueue", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def busy_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def unreachable_kubeconfig(tmp_path) -> tuple[str, int]:
    port = free_port()  # nothing listens there
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return str(path), port


# -- no cluster ----------------------------------------------------------------------------------

def test_explain_without_any_kubeconfig(tmp_path):
    res = gpuqueue("explain", "ns/job", env={"HOME": str(tmp_path)})
    assert res.returncode == 3
    assert res.stderr.splitlines() == [
        f"gpuqueue explain: no cluster (no in-cluster service account, no kubeconfig at {tmp_path}/.kube/config)"]
    assert res.stdout == ""


def test_explain_with_a_missing_kubeconfig():
    res = gpuqueue("explain", "ns/job", "--kubeconfig", "/nonexistent")
    assert res.returncode == 3
    assert res.stderr.splitlines() == ["gpuqueue explain: no cluster (kubeconfig /nonexistent: no such file)"]


def test_extender_with_a_missing_kubeconfig():
    res = gpuqueue("extender", "--insecure-http", "--kubeconfig", "/nonexistent")
    assert res.returncode == 1
    assert res.stderr.splitlines() == ["gpuqueue extender: no cluster (kubeconfig /nonexistent: no such file)"]


def test_kueuectl_verbs_with_a_missing_kubeconfig():
    res = gpuqueue("list", "workloads", "--kubeconfig", "/nonexistent")
    assert res.returncode == 1
    assert res.stderr.splitlines() == ["gpuqueue list: no cluster (kubeconfig /nonexistent: no such file)"]


def test_explain_with_an_unreachable_api_server(unreachable_kubeconfig):
    path, port = unreachable_kubeconfig
    res = gpuqueue("explain", "ns/job", "--kubeconfig", path)
    assert res.returncode == 3
    assert res.stderr.splitlines() == [
        f"gpuqueue explain: Cannot connect to host 127.0.0.1:{port} ssl:default "
        f"[Connect call failed ('127.0.0.1', {port})]"]


# -- ports in use -----------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["--metrics-port", "--port"])
def test_extender_port_in_use(unreachable_kubeconfig, busy_port, which):
    path, _ = unreachable_kubeconfig
    other = "--port" if which == "--metrics-port" else "--metrics-port"
    res = gpuqueue("extender", "--insecure-http", "--kubeconfig", path, "--host", "127.0.0.1",
                   which, str(busy_port), other, str(free_port()))
    assert res.returncode == 1
    # the log records the servers started before it (JSON lines: warnings about --insecure-http)
    # are logs, not the error: the error is one line of its own, and no traceback
    said = [line for line in res.stderr.splitlines() if not line.startswith('{"time"')]
    assert said == [
        f"gpuqueue extender: error while attempting to bind on address ('127.0.0.1', {busy_port}): address already in use"]


def test_webhook_port_in_use(tmp_path, busy_port):
    certs = tmp_path / "certs"
    assert gpuqueue("certs", "generate", "--out", str(certs)).returncode == 0
    res = gpuqueue("webhook", "--cert-dir", str(certs), "--host", "127.0.0.1", "--port", str(busy_port),
                   env={"HOME": str(tmp_path)})
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    # before it: the log line saying it serves without a cluster (there is none here)
    assert res.stderr.splitlines()[-1] == (
        f"gpuqueue webhook: error while attempting to bind on address ('127.0.0.1', {busy_port}): address already in use")


# -- simulate: the picture -------------------------------------------------------------------------

def test_plot_into_a_missing_directory():
    res = gpuqueue("simulate", "--plot", "/nonexistent/x.png")
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.splitlines() == ["gpuqueue simulate: --plot /nonexistent/x.png: directory /nonexistent does not exist"]


def test_plot_without_matplotlib(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as in the image, which installs no extras
    code = main(["simulate", "--plot", str(tmp_path / "x.png")])
    out = capsys.readouterr()
    assert code == 2
    assert out.out == ""
    assert out.err.splitlines() == [
        f"gpuqueue simulate: --plot {tmp_path}/x.png: needs matplotlib, which is not installed "
        "(pip install 'gpuqueue[plot]')"]


def test_plot_that_cannot_be_written_after_the_run(tmp_path, capsys, monkeypatch):
    # the directory is checked first; here it goes away during the run
    folder = tmp_path / "gone"
    folder.mkdir()
    from gpuqueue.extender.simulate import output

    real = output.write_plot

    def remove_then_write(history, path, end, title=""):
        folder.rmdir()
        real(history, path, end, title)

    monkeypatch.setattr(output, "write_plot", remove_then_write)
    code = main(["simulate", "--output", "json", "--plot", str(folder / "x.png")])
    out = capsys.readouterr()
    assert code == 1
    assert out.err.splitlines() == [f"gpuqueue simulate: {folder}/x.png: No such file or directory"]


# -- simulate: guard rails -------------------------------------------------------------------------

LOAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: gpuqueue.io/v1alpha1
kind: Scenario
events:
- at: 0
  every: 1
  count: COUNT
  submit:
    apiVersion: batch/v1
    kind: Job
    metadata: {namespace: ns, name: j}
    spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}}
"""


def test_a_count_too_large_is_refused_at_once(tmp_path):
    (tmp_path / "big.yaml").write_text(LOAD.replace("COUNT", "100000000"))
    started = time.monotonic()
    res = gpuqueue("simulate", str(tmp_path / "big.yaml"), timeout=20)
    assert time.monotonic() - started < 15
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.splitlines() == [
        f"gpuqueue simulate: {tmp_path}/big.yaml: document 2 (Scenario): events[0].count: the events would occur "
        "100000000 times in all, more than the simulator's limit of 1000000"]


def test_a_count_within_the_limit_costs_nothing_until_the_run_reaches_it():
    from gpuqueue.extender.simulate.scenario import MAX_OCCURRENCES, load_scenario

    started = time.monotonic()
    scenario = load_scenario(LOAD.replace("COUNT", str(MAX_OCCURRENCES)))
    assert time.monotonic() - started < 2
    assert [e.count for e in scenario.events] == [MAX_OCCURRENCES]


@pytest.mark.parametrize("text", ["", "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n"],
                         ids=["empty-file", "no-jobs"])
def test_a_scenario_without_jobs_is_refused(tmp_path, text):
    (tmp_path / "empty.yaml").write_text(text)
    res = gpuqueue("simulate", str(tmp_path / "empty.yaml"))
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.splitlines() == [
        f"gpuqueue simulate: {tmp_path}/empty.yaml: no Jobs: the scenario submits none (a batch/v1 Job document, "
        "or a submit event), so there is nothing to simulate"]


def test_extender_with_a_bad_wait_for_pods_ready_names_the_field(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
                      "waitForPodsReady:\n  timeout: 10m\n  requeuingStrategy:\n    backoffLimitCount: -1\n")
    res = gpuqueue("extender", "--insecure-http", "--kubeconfig", "/nonexistent", "--config", str(config))
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"gpuqueue extender: --config {config}: waitForPodsReady.requeuingStrategy.backoffLimitCount: Invalid "
        "value: -1: must be greater than or equal to 0"]
