"""No module of the package or the benchmarks uses another module's private (``_``-prefixed) name.

A helper that another module needs has a public name, or the two modules are one. The check reads each
module's AST and imports nothing: ``from X import _name`` (top-level and function-level alike, relative
imports resolved) and ``alias._name`` where ``alias`` is a project module bound by an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("gta_verl", "benchmarks", "experiments")


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts)  # a package's __init__ keeps its name: relative imports start from its package


def _source(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path, root: Path = ROOT) -> list[str]:
    """``"<file>: <what>"`` for every private name of another project module that ``path`` uses."""
    module, where = _module(path, root), path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _source(module, node)
            if src.split(".")[0] not in TREES:
                continue
            found += [f"{where}: from {src} import {a.name}" for a in node.names if _private(a.name)]
            modules |= {a.asname or a.name for a in node.names if not _private(a.name)}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in TREES}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                found.append(f"{where}: {ast.unparse(node)}")
    return found


def _all_uses() -> list[str]:
    return [
        hit
        for tree in TREES
        if (ROOT / tree).is_dir()
        for p in sorted((ROOT / tree).rglob("*.py"))
        for hit in private_uses(p)
    ]


def test_no_private_name_crosses_a_module():
    offenders = _all_uses()
    assert offenders == [], offenders


def test_the_check_sees_what_it_looks_for(tmp_path):
    # the checks above would pass vacuously if the walk missed the imports
    pkg = tmp_path / "gta_verl"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "from gta_verl.b import _hidden, shown\nfrom . import b\nimport gta_verl.c as c\n"
        "def f():\n    from .b import _inner\n    return b._x, c._y, b.__name__\n"
    )
    assert private_uses(pkg / "a.py", tmp_path) == [
        "gta_verl/a.py: from gta_verl.b import _hidden",
        "gta_verl/a.py: from gta_verl.b import _inner",
        "gta_verl/a.py: b._x",
        "gta_verl/a.py: c._y",
    ]
