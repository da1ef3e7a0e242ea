"""The layers of STYLE.md, enforced: protocol is pure, Ray stays out of the store path."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "protocol": {"protocol", "pydantic", "pydantic_core", "msgpack"},
    "storage": {"protocol", "storage", "lmdb", "msgpack", "icu4py"},
    "service": {"protocol", "storage", "service", "msgpack", "pydantic"},
    "actors": {"protocol", "storage", "service", "actors", "ray", "msgpack", "pydantic"},
}


def imported_roots(package: str) -> set[str]:
    roots: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots.add(node.module.split(".")[0])
    return roots - set(sys.stdlib_module_names) - {"__future__"}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_its_layers(package: str) -> None:
    assert imported_roots(package) <= ALLOWED[package]


@pytest.mark.parametrize("package", ["protocol", "storage", "actors", "morphz"])
def test_all_is_sorted_and_complete(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert names == sorted(names)
    for name in names:
        assert hasattr(module, name), name


def test_store_path_does_not_import_ray() -> None:
    code = (
        "import sys, morphz, morphz.cli, actors, protocol, storage;"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
