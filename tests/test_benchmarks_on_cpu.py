"""The benchmarks and the campaigns stand on the package alone: helpers they share with the tests live in
gta_verl.testing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> set[str]:
    mods: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module)
    return mods


def test_no_benchmark_imports_the_test_suite():
    offenders = {
        str(p.relative_to(ROOT)): sorted(
            m for m in _imported_modules(p) if m == "tests" or m.startswith("tests.")
        )
        for d in ("benchmarks", "experiments")
        for p in sorted((ROOT / d).rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}
