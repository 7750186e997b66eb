"""The Dockerfile: hadolint's rules that matter here, checked by reading it, and its build stage
run without a container engine (build context from .dockerignore, COPY, wheel, entrypoint).

Rules (hadolint numbers where it has one):
- DL3006/DL3007: every FROM is pinned (tag and sha256 digest), never `latest`.
- DL3020: COPY, not ADD; no ADD of URLs or archives.
- DL3042: pip installs with --no-cache-dir.
- DL3002: the last USER is not root; here a numeric uid:gid (Kubernetes runAsNonRoot can only
  verify a numeric user).
- DL3025: ENTRYPOINT and CMD in JSON form.
- multi-stage: the runtime stage copies the virtualenv from the build stage and runs no
  package manager install (no compilers, no apt, no pip install in the final image).
- no secrets in ENV/ARG names, no `curl | sh`, no `sudo`.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(instrs):
    """Split into stages: list of (from_args, [instructions])."""
    result = []
    for ins, args in instrs:
        if ins == "FROM":
            result.append((args, []))
        elif result:
            result[-1][1].append((ins, args))
    return result


INSTRS = instructions(DOCKERFILE.read_text())
ARGS = {m.group(1): m.group(2) for ins, a in INSTRS if ins == "ARG" for m in [re.match(r"(\w+)=(\S+)", a)] if m}


def resolve(image: str) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: ARGS[m.group(1)], image)


def test_base_images_are_pinned_by_tag_and_digest():
    for from_args, _ in stages(INSTRS):
        image = resolve(from_args.split()[0])
        name, _, digest = image.partition("@")
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), image
        assert ":" in name and not name.endswith(":latest"), image
        assert "slim" in name, "small base"


def test_multi_stage_and_nothing_built_in_the_final_image():
    all_stages = stages(INSTRS)
    assert len(all_stages) >= 2
    final = all_stages[-1][1]
    assert any(ins == "COPY" and args.startswith("--from=build") for ins, args in final)
    for ins, args in final:
        if ins == "RUN":
            assert not re.search(r"\b(apt-get|apt|apk|yum|dnf)\b.*\binstall\b", args), args
            assert not re.search(r"\bpip\b.*\binstall\b", args), args
            assert not re.search(r"\b(gcc|make|build-essential)\b", args), args


def test_copy_not_add_and_no_remote_fetches():
    for ins, args in INSTRS:
        assert ins != "ADD", "use COPY (DL3020)"
        if ins == "RUN":
            assert not re.search(r"\b(curl|wget)\b", args), args
            assert "sudo" not in args


def test_pip_never_caches():
    for ins, args in INSTRS:
        if ins == "RUN" and re.search(r"\bpip\b.*\b(install|uninstall)\b", args):
            for command in args.split("&&"):
                if re.search(r"\bpip\b.*\binstall\b", command):
                    assert "--no-cache-dir" in command, command


def test_runs_as_numeric_non_root_user():
    final = stages(INSTRS)[-1][1]
    users = [args for ins, args in final if ins == "USER"]
    assert users, "final stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or (gid.isdigit() and int(gid) > 0))
    from manifests.tools import render

    for obj in render.build():
        for pod in render.pod_specs(obj):
            assert pod["securityContext"]["runAsUser"] == int(uid), "manifests and image agree on the uid"


def test_entrypoint_is_gpuqueue_in_json_form():
    entry = [args for ins, args in INSTRS if ins == "ENTRYPOINT"]
    assert entry == ['["gpuqueue"]']
    for ins, args in INSTRS:
        if ins in ("CMD", "ENTRYPOINT"):
            assert args.startswith("["), f"{ins} in exec form (DL3025)"


def test_no_secrets_in_env_or_args():
    for ins, args in INSTRS:
        if ins in ("ENV", "ARG"):
            assert not re.search(r"(PASSWORD|TOKEN|SECRET|KEY)\w*=", args, re.I), args


# --- the build stage, without a container engine ------------------------------------------------


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def in_context(rel: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatch(c, pat) for c in candidates):
            included = negate
    return included


def build_context(dest: Path) -> None:
    patterns = dockerignore_patterns()
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_file() and not rel.startswith(".git/") and in_context(rel, patterns):
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def test_dockerignore_keeps_the_context_small(tmp_path):
    build_context(tmp_path)
    top = {p.name for p in tmp_path.iterdir()}
    assert top <= {"pyproject.toml", "README.md", "constraints.txt", "gpuqueue", "extender", "webhook", "certs"}
    assert not list(tmp_path.rglob("__pycache__"))
    assert not (tmp_path / "tests").exists() and not (tmp_path / ".git").exists()


def test_build_stage_produces_a_working_gpuqueue(tmp_path):
    context, src = tmp_path / "context", tmp_path / "src"
    build_context(context)
    build_stage = stages(INSTRS)[0][1]
    src.mkdir()
    for ins, args in build_stage:
        if ins == "COPY":
            *sources, dest = shlex.split(args)
            for source in sources:
                origin = context / source
                assert origin.exists(), f"COPY {source}: not in the build context (.dockerignore?)"
                target = src / dest if not dest.endswith("/") and dest not in ("./", ".") else src
                if origin.is_dir():
                    shutil.copytree(origin, target)
                else:
                    shutil.copy2(origin, target / origin.name if target == src else target)
    wheels = tmp_path / "wheels"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-q", "-w", str(wheels), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = wheels.glob("gpuqueue-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "gpuqueue = gpuqueue.cli:main" in entry_points
    assert "gpuqueue/cli.py" in names and "gpuqueue/extender/simulate/examples/flame.yaml" in names
    # only gpuqueue's own import package reaches site-packages, and no test code with it
    assert {n.split("/")[0] for n in names} == {"gpuqueue", next(n.split("/")[0] for n in names if ".dist-info/" in n)}
    assert not [n for n in names if "/testing/" in n or "/standin/" in n or "/tests/" in n]
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "-q", "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # the ENTRYPOINT as the image runs it, from the installed wheel only (not the checkout)
    run = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); from gpuqueue.cli import main; sys.exit(main(['--help']))"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "usage: gpuqueue" in run.stdout
    sim = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); from gpuqueue.cli import main; sys.exit(main(['simulate', '--output', 'json']))"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert sim.returncode == 0, sim.stderr
    assert '"final"' in sim.stdout.splitlines()[-1]


@pytest.mark.parametrize("rel,expected", [("tests/test_x.py", False), ("gpuqueue/cli.py", True), ("gpuqueue/__pycache__/x.pyc", False), ("docs/install.md", False)])
def test_dockerignore_semantics(rel, expected):
    assert in_context(rel, dockerignore_patterns()) is expected
