"""How the product's modules may import each other, read from the source with ``ast`` (every import:
module level, inside functions, under ``if TYPE_CHECKING``).

- no import cycle between modules;
- the components (extender/, webhook/, certs/) do not import each other: what they share lives in
  shared packages under gpuqueue/ (gpuqueue.api, gpuqueue.kube, gpuqueue.jobframework,
  gpuqueue.tls, ...), which import no component; gpuqueue/cli.py alone puts the commands together;
- the quota engine (gpuqueue.extender.quota) is pure: besides itself it imports gpuqueue.api and the
  standard library only.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = ("gpuqueue.extender", "gpuqueue.webhook", "gpuqueue.certs")
ASSEMBLER = "gpuqueue.cli"  # the one module that imports every component's command


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) for every module of the product."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found: dict[str, tuple[Path, bool]] = {}
    for dotted, folder in package_dir.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            package = parts[-1] == "__init__"
            if package:
                parts = parts[:-1]
            found[".".join((dotted, *parts))] = (path, package)
    return found


MODULES = _modules()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _imports(name: str) -> dict[str, int]:
    """The modules ``name`` imports (product modules by their module name, others by top-level
    name), each with the first line that imports it."""
    path, package = MODULES[name]
    here = name if package else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        found[target] = min(found.get(target, line), line)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_product_module(alias.name) or alias.name.split(".")[0], node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                target = _product_module(f"{source}.{alias.name}") or _product_module(source)
                add(target or source.split(".")[0], node.lineno)
    found.pop(name, None)
    return found


def _product_module(dotted: str) -> str | None:
    """The product module ``dotted`` names, or the nearest enclosing one; None outside the product."""
    parts = dotted.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return out


def _component(name: str) -> str | None:
    return next((c for c in COMPONENTS if _within(name, c)), None)


def _where(name: str, target: str) -> str:
    return f"{MODULES[name][0].relative_to(ROOT)}:{GRAPH[name][target]} imports {target}"


def test_the_graph_sees_the_product():
    # The parse must find what is known to be there, or the checks below check nothing.
    assert {"gpuqueue.cli", "gpuqueue.extender.quota.engine", "gpuqueue.webhook.command",
            "gpuqueue.certs.command", "gpuqueue.api.kueue"} <= set(MODULES)
    assert "gpuqueue.extender.command" in GRAPH["gpuqueue.cli"]
    assert "gpuqueue.extender.quota.model" in GRAPH["gpuqueue.extender.quota.engine"]


def test_no_import_cycles():
    cycles = _cycles()
    assert cycles == [], "modules importing each other (directly or around a loop): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_components_do_not_import_each_other():
    offenders = []
    for name, targets in GRAPH.items():
        if name == ASSEMBLER:
            continue
        mine = _component(name)
        for target in targets:
            theirs = _component(target)
            if theirs is not None and theirs != mine:
                offenders.append(_where(name, target))
    assert offenders == [], "a component (or a shared module) reaching into a component:\n" + "\n".join(offenders)


def test_the_quota_engine_imports_only_the_api_and_the_standard_library():
    offenders = []
    for name, targets in GRAPH.items():
        if not _within(name, "gpuqueue.extender.quota"):
            continue
        for target in targets:
            if target in MODULES:
                allowed = _within(target, "gpuqueue.extender.quota") or _within(target, "gpuqueue.api")
            else:
                allowed = target == "__future__" or target in sys.stdlib_module_names
            if not allowed:
                offenders.append(_where(name, target))
    assert offenders == [], "\n".join(offenders)
