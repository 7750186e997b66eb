"""docs/simulate.md's examples are real: every YAML block (its first line `# NAME.yaml` names it)
is written to a folder, every command of a console block is run there by bash, and its output
(stdout and stderr, as a terminal shows them) must be the lines that follow it in the page.
`$ echo $?` prints the exit status of the command before it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "simulate.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(DOC.read_text()) if lang == kind]


def scenario_files() -> dict[str, str]:
    files = {}
    for body in blocks("yaml"):
        first = body.splitlines()[0]
        match = re.match(r"# (\S+\.yaml)\b", first)
        assert match, f"a YAML example must start with '# NAME.yaml': {first!r}"
        files[match.group(1)] = body
    return files


def sessions() -> list[list[tuple[str, str]]]:
    """Each console block as [(command, expected output)]."""
    out = []
    for body in blocks("console"):
        steps: list[tuple[str, list[str]]] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                assert steps, f"output before any command: {line!r}"
                steps[-1][1].append(line)
        out.append([(cmd, "".join(f"{ln}\n" for ln in lines)) for cmd, lines in steps])
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("simulate-doc")
    for name, text in scenario_files().items():
        (where / name).write_text(text)
    bin_dir = where / "bin"
    bin_dir.mkdir()
    gq = bin_dir / "gpuqueue"
    gq.write_text(f"#!/bin/sh\nexec {sys.executable} -m gpuqueue \"$@\"\n")
    gq.chmod(0o755)
    return where


def test_every_scenario_of_the_page_is_run():
    commands = " ".join(cmd for session in sessions() for cmd, _ in session)
    for name in scenario_files():
        assert re.search(rf"\bsimulate {re.escape(name)}\b", commands), f"{name} is shown but never run"
    assert len(scenario_files()) >= 7


@pytest.mark.parametrize("session", range(len(sessions())))
def test_console_example(folder, session):
    env = {**os.environ, "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "COLUMNS": "200"}
    status = 0
    for command, expected in sessions()[session]:
        if command == "echo $?":
            assert expected == f"{status}\n"
            continue
        res = subprocess.run(["bash", "-c", command + " 2>&1"], cwd=folder, capture_output=True, text=True,
                             env=env, timeout=120)
        status = res.returncode
        assert res.stdout == expected, f"$ {command}"
        if command.endswith(".png > /dev/null"):
            png = folder / command.split("--plot ")[1].split()[0]
            assert png.read_bytes()[:4] == b"\x89PNG"


def test_the_readme_links_the_page():
    assert "docs/simulate.md" in (ROOT / "README.md").read_text()
