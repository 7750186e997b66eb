"""`--help` a new user can work from: every option explained, its default shown, `--version`, and
the exit codes of the commands whose exit code means something (explain, simulate)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

import pytest

from gpuqueue.cli import build_parser


def parsers(parser: argparse.ArgumentParser, name: str = "gpuqueue"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from parsers(p, f"{name} {sub}")


def test_every_option_of_every_command_has_help_text():
    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}"
               for name, p in parsers(build_parser()) for a in p._actions
               if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert missing == []


def help_of(*command: str) -> str:
    res = subprocess.run([sys.executable, "-m", "gpuqueue", *command, "--help"], capture_output=True, text=True,
                         timeout=30, env={"COLUMNS": "200", "PATH": "/usr/bin"})
    assert res.returncode == 0, res.stderr
    return " ".join(res.stdout.split())


@pytest.mark.parametrize("command, shown", [
    (("extender",), ["--port PORT scheduler extender endpoints (HTTPS) (default: 8443)",
                     "--metrics-port METRICS_PORT /metrics, /healthz, /readyz (HTTPS with --cert-dir, else HTTP) (default: 8080)",
                     "--host HOST address the extender and metrics endpoints listen on (default: 0.0.0.0)",
                     "--burst BURST API writes allowed at once above --qps (default: 200)"]),
    (("webhook",), ["--port PORT HTTPS port for AdmissionReview requests (default: 9443)",
                    "(default: /tmp/k8s-webhook-server/serving-certs)"]),
    (("certs", "generate"), ["--days DAYS serving certificate validity (default: 365)",
                             "--namespace NAMESPACE namespace of the Service (and of the Secret) (default: gpuqueue-system)"]),
    (("certs", "ensure"), ["--secret SECRET name of the Secret holding the CA and the certificates (default: gpuqueue-certs)"]),
    (("simulate",), ["(default: text)", "exit status: 0 the run completed, 2 the scenario or an option is invalid"]),
    (("explain",), ["exit status: 0 the Job is admitted or finished, 1 it is pending, 2 no such Job or it is not "
                    "managed by gpuqueue, 3 the cluster could not be asked"]),
])
def test_help_shows_defaults_and_exit_codes(command, shown):
    text = help_of(*command)
    for needle in shown:
        assert needle in text, needle


def test_a_flag_shows_no_default():
    text = help_of("extender")
    assert "LocalQueueMetrics feature gate)" in text and "(default: True)" not in text


def test_version():
    res = subprocess.run([sys.executable, "-m", "gpuqueue", "--version"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0
    assert res.stdout == f"gpuqueue {version('gpuqueue')}\n"
