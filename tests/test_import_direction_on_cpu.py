"""Imports point one way: ``experiments`` → ``benchmarks`` → ``gta_verl``, never back.

The plugin (``gta_verl/``) imports neither the measurement suite (``benchmarks/``) nor the research campaigns
(``experiments/``), and no benchmark imports a campaign, so each product can change or go without touching the
ones below it. The check reads each module's AST (top-level and function-level imports, every ``import`` and
``from`` form, relative imports resolved) and imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Per tree, the top-level packages its modules must not import.
FORBIDDEN = {"gta_verl": ("benchmarks", "experiments"), "benchmarks": ("experiments",)}


def _module(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def _imported(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every module ``path`` imports, relative imports resolved against its package."""
    module = _module(path, root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            # ``from pkg import sub`` names a module too, so each imported name is checked under its source
            found += [(node.lineno, src)] + [(node.lineno, f"{src}.{a.name}".lstrip(".")) for a in node.names]
    return found


def upward_imports(root: Path = ROOT) -> list[str]:
    """``"<file>:<line> <module>"`` for every import of a package its tree must not import."""
    hits = []
    for tree, banned in FORBIDDEN.items():
        for path in sorted((root / tree).rglob("*.py")):
            for line, name in _imported(path, root):
                if name.split(".")[0] in banned:
                    hits.append(f"{path.relative_to(root).as_posix()}:{line} {name}")
    return sorted(set(hits))


def test_no_module_imports_a_product_above_it():
    offenders = upward_imports()
    assert offenders == [], offenders


def test_the_check_sees_every_import_form(tmp_path):
    # the check above would pass vacuously if the walk missed an import form
    (tmp_path / "gta_verl" / "eval").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "experiments").mkdir()
    (tmp_path / "gta_verl" / "eval" / "a.py").write_text(
        "import benchmarks.synth\nfrom experiments.learning import tiny\nimport gta_verl.protocol\n"
        "def f():\n    import experiments as e\n    from ... import benchmarks\n    return e, benchmarks\n"
    )
    (tmp_path / "benchmarks" / "b.py").write_text(
        "from gta_verl import protocol\nimport benchmarks.synth\n"
        "def g():\n    from experiments.learning.paired import paired_difference\n"
    )
    (tmp_path / "experiments" / "c.py").write_text("import benchmarks.synth\nimport gta_verl\n")
    assert upward_imports(tmp_path) == [
        "benchmarks/b.py:4 experiments.learning.paired",
        "benchmarks/b.py:4 experiments.learning.paired.paired_difference",
        "gta_verl/eval/a.py:1 benchmarks.synth",
        "gta_verl/eval/a.py:2 experiments.learning",
        "gta_verl/eval/a.py:2 experiments.learning.tiny",
        "gta_verl/eval/a.py:5 experiments",
        "gta_verl/eval/a.py:6 benchmarks",
    ]
