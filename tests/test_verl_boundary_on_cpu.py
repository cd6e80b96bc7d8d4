"""verl internals are imported only in gta_verl/verl_compat.py and gta_verl/verl_compat_cpu.py.

Every other module reaches verl through those two, so a verl upgrade touches one place. The check
reads each module's AST (top-level and function-level imports alike) and imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gta_verl

PACKAGE = Path(gta_verl.__file__).resolve().parent
ALLOWED = {"verl_compat.py", "verl_compat_cpu.py"}


def _verl_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {n}"
            for n in names
            if n.split(".")[0] == "verl"
        ]
    return found


def test_only_verl_compat_imports_verl():
    offenders = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (path.parent == PACKAGE and path.name in ALLOWED)
        for hit in _verl_imports(path)
    ]
    assert offenders == [], offenders


def test_the_compat_modules_do_import_verl():
    # the check above would pass vacuously if the walk missed the package
    assert _verl_imports(PACKAGE / "verl_compat.py")
