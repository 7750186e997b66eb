"""The installed import names: every package folder of the product is installed under `gpuqueue`,
and nothing else is (no generic top-level `extender`, `webhook` or `certs`, no test code)."""

import tomllib
from pathlib import Path

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
