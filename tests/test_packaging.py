"""The installed import names: every package folder of the product is installed under `gpuqueue`,
and nothing else is (no generic top-level `extender`, `webhook` or `certs`, no test code)."""

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _config():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_installed_under_gpuqueue():
    cfg = _config()
    folders = {}
    for dotted, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            folders[".".join((dotted, *rel.parts))] = init.parent
    assert set(cfg["packages"]) == set(folders), "pyproject's packages list and the package folders differ"
    assert all(p == "gpuqueue" or p.startswith("gpuqueue.") for p in cfg["packages"])


def test_no_product_module_imports_the_tests():
    offenders = []
    for folder in _config()["package-dir"].values():
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            if "from tests" in text or "import tests" in text:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def _pins():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_constraints_pin_every_dependency_within_the_declared_bounds():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"]]
    declared += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = _pins()
    for req in declared:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is declared but constraints.txt does not pin it"
        assert req.specifier.contains(pins[name]), f"{req.name}=={pins[name]} is outside {req.specifier}"


def test_the_image_and_ci_install_the_tested_versions():
    assert "-c /src/constraints.txt" in (ROOT / "Dockerfile").read_text()
    assert "-c constraints.txt" in (ROOT / ".ci" / "run").read_text()
