"""Files other projects published are read from shared/fixtures, never copied into the repository;
without shared/ beside the checkout, the tests that read them are skipped, all on one line, and
everything else runs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests import shared_fixtures
from tests.standin import crds

ROOT = shared_fixtures.REPOSITORY


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_no_file_in_the_repository_is_a_copy_of_a_published_one():
    published = {}
    for path in shared_fixtures.fixture().rglob("*"):
        if path.is_file():
            published.setdefault(path.stat().st_size, []).append(path)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    copies = []
    for name in filter(None, tracked.decode().split("\0")):
        path = ROOT / name
        if not path.is_file() or path.stat().st_size not in published:
            continue
        digest = _sha256(path)
        copies += [f"{name} = {p}" for p in published[path.stat().st_size] if _sha256(p) == digest]
    assert not copies, copies
    assert not (ROOT / "tests" / "fixtures").exists()


def test_each_crd_the_standin_serves_is_the_published_file_of_that_name():
    for name, rel in crds.PUBLISHED.items():
        doc = yaml.safe_load(shared_fixtures.fixture("crds", rel).read_text())
        assert (doc["kind"], doc["metadata"]["name"]) == ("CustomResourceDefinition", name)


def test_without_shared_the_tests_that_read_it_are_skipped_saying_why():
    env = {**os.environ, "GPUQUEUE_SHARED": str(ROOT / "no-such-shared")}
    # test_scheduler_client_cert reads a recording when its module is imported, the others in tests
    files = ["tests/test_standin_crds.py", "tests/test_scheduler_extender.py", "tests/test_scheduler_client_cert.py",
             "tests/test_shared_fixtures.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "-rs", "-k", "not saying_why", *files], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:]
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped
    why = f"needs the published fixtures in {ROOT / 'no-such-shared' / 'fixtures'}, which this checkout"
    assert all(why in line for line in skipped), skipped
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and " skipped" in summary, summary
