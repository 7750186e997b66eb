"""gpuqueue.kube.config: the one kubeconfig / in-cluster loader the commands share."""

from __future__ import annotations

import pytest
import yaml

from gpuqueue.cli import main
from gpuqueue.kube.config import ClusterConfigError, load_config


def _kubeconfig(path, server="http://127.0.0.1:1"):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


@pytest.fixture(autouse=True)
def outside_a_cluster(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


async def test_a_named_kubeconfig_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "not-this-one"))
    cfg = await load_config(str(_kubeconfig(tmp_path / "kc", "http://127.0.0.1:7")))
    assert cfg.host == "http://127.0.0.1:7"


async def test_kubeconfig_from_the_environment_read_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kc", "http://127.0.0.1:8")))
    assert (await load_config()).host == "http://127.0.0.1:8"


async def test_missing_and_unreadable_kubeconfigs_are_one_error_of_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ClusterConfigError, match=r"^no in-cluster service account, no kubeconfig at .*missing$"):
        await load_config()
    with pytest.raises(ClusterConfigError, match=r"^kubeconfig /nonexistent: no such file$"):
        await load_config("/nonexistent")
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n  - {name: c\n")
    with pytest.raises(ClusterConfigError, match=r"^kubeconfig .*broken: ") as err:
        await load_config(str(broken))
    assert "\n" not in str(err.value)


def test_commands_print_the_problem(tmp_path, capsys):
    # 3: the cluster could not be asked (1 is "pending", see `gpuqueue explain --help`)
    assert main(["explain", "default/job", "--kubeconfig", str(tmp_path / "missing")]) == 3
    assert capsys.readouterr().err.strip() == f"gpuqueue explain: no cluster (kubeconfig {tmp_path / 'missing'}: no such file)"
