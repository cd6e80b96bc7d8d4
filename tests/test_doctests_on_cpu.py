"""The docstring examples of the package run and print what they show.

Every module of ``gta_verl`` with a ``>>>`` line is imported and run through :func:`doctest.testmod`.
A module whose import fails only for a missing optional package is skipped with that package named;
any other import error fails. Examples that need a live server carry ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted((ROOT / "gta_verl").rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_the_scan_finds_the_examples():
    assert len(MODULES) >= 20 and "gta_verl.protocol" in MODULES, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "gta_verl":
            raise
        pytest.skip(f"{name} needs the optional package {exc.name}")
    result = doctest.testmod(module)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
    source = Path(module.__file__ or "").read_text(encoding="utf-8")
    runnable = [line for line in source.splitlines() if ">>>" in line and "+SKIP" not in line]
    # doctest sees only docstrings: an example anywhere else would never run.
    assert result.attempted >= len(runnable), f"{name}: {len(runnable)} examples, {result.attempted} run"
