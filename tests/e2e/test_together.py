"""Case 5, the Together guide (shared/seeds/together-queue-gpu-jobs-with-kueue.txt) as
docs/install.md gives it ("Walkthrough: the Together guide on a real cluster"): every command of
that section run as written, by bash with the real kubectl, from the repository's root, and each
output the page shows (its `# ` lines) compared with what comes out, cell by cell. Only what
cannot be the same is let vary: the Workload name's hash and the AGE column. A command whose
output the page shows is retried until it matches (the guide waits for admission as a user
would), for at most SETTLE seconds. The page's expectations agree with the guide's own where the
guide shows the same command (checked too); the guide's `kubectl get workloads` shows fewer
columns than Kueue's CRD prints, as the page notes."""

from tests.e2e.env import require

require()

import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from tests.e2e.env import REPOSITORY  # noqa: E402
from tests.shared_fixtures import SHARED  # noqa: E402

PAGE = REPOSITORY / "docs" / "install.md"
GUIDE = SHARED / "seeds" / "together-queue-gpu-jobs-with-kueue.txt"
SETTLE = 30.0
AGE = re.compile(r"^\d+(s|m\d*s?|h\d*m?|d\d*h?)$")
WORKLOAD_NAME = re.compile(r"^(job-.+)-[0-9a-f]{5}$")


def section() -> list[tuple[str, list[str]]]:
    """(command, the output lines the page shows after it) in the Together walkthrough."""
    text = PAGE.read_text()
    start = text.index("## Walkthrough: the Together guide on a real cluster")
    end = text.index("### The FLAME cohort", start)
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```sh\n(.*?)```", text[start:end], re.S):
        for line in block.splitlines():
            if line.startswith("#"):
                steps[-1][1].append(line[2:] if line.startswith("# ") else "")
            elif line.strip():
                steps.append((line.strip(), []))
    return steps


def cells(line: str) -> list[str]:
    return [c for c in re.split(r"\s{2,}", line.strip())]


def same_cell(want: str, got: str) -> bool:
    if want == got or (AGE.match(want) and AGE.match(got)):
        return True
    w, g = WORKLOAD_NAME.match(want), WORKLOAD_NAME.match(got)
    return bool(w and g and w[1] == g[1])


def matches(want: list[str], got: str) -> bool:
    lines = [line for line in got.rstrip("\n").split("\n")]
    if len(lines) != len(want):
        return False
    for w, g in zip(want, lines):
        cw, cg = cells(w), cells(g)
        if len(cw) != len(cg) or not all(same_cell(a, b) for a, b in zip(cw, cg)):
            return False
    return True


def test_the_page_shows_what_the_guide_shows():
    guide = GUIDE.read_text()
    steps = dict(section())
    for cmd in ("kubectl get jobs -o custom-columns='NAME:.metadata.name,SUSPEND:.spec.suspend,ACTIVE:.status.active'",
                "kubectl get job gpu-job-b -o jsonpath='{.spec.suspend}{\"\\n\"}'"):
        assert cmd in steps and cmd in guide, cmd
        at = guide.index(cmd) + len(cmd)
        following = [line.lstrip("# ").rstrip() for line in guide[at:].strip().split("\n\n")[0].splitlines()]
        assert [cells(x) for x in steps[cmd]] == [cells(x) for x in following], (steps[cmd], following)
    message = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-flavor, 4 more needed"
    assert f"# {message}" in guide and [message] in steps.values()


def test_the_together_walkthrough_with_kubectl(e2e):
    steps = section()
    assert len(steps) >= 9, steps
    e2e.node("e2e-together-n1", 8, {"e2e.gpuqueue.io/pool": "together"})
    env = {**os.environ, "KUBECONFIG": e2e.c.kubeconfig,
           "PATH": f"{Path(e2e.kubectl_bin).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    ran = []
    try:
        for cmd, want in steps:
            m = re.match(r"^(\w+)=\$\((.*)\)$", cmd)
            if m:   # WORKLOAD=$(...): a shell variable the next commands use
                value = e2e.wait_for(f"`{m[2]}` prints something", lambda: _sh(m[2], env).stdout.strip(),
                                     timeout=SETTLE)
                env[m[1]] = value
                ran.append(cmd)
                continue
            deadline = time.monotonic() + SETTLE
            while True:
                r = _sh(cmd, env)
                if r.returncode == 0 and (not want or matches(want, r.stdout)):
                    break
                if time.monotonic() > deadline:
                    e2e.fail(f"after {ran}:\n`{cmd}` (exit {r.returncode}) printed\n{r.stdout}{r.stderr}\n"
                             f"where the page shows\n" + "\n".join(want))
                time.sleep(0.5)
            ran.append(cmd)
    finally:
        _sh("kubectl delete job gpu-job-a gpu-job-b --ignore-not-found", env)
        _sh("kubectl delete -f manifests/examples/together/kueue-quota.yaml --ignore-not-found", env)
        e2e.wait_for("the Jobs' pods gone", lambda: not e2e.pods("default", "job-name in (gpu-job-a,gpu-job-b)"),
                     timeout=60)
        e2e.delete_nodes(["e2e-together-n1"])


def _sh(cmd: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=60)
