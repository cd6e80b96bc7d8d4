"""The documentation's two kinds of pages stay reachable: reference pages from the README, and one
measurement page per benchmark from ``docs/benchmarks.md``, each run on it stamped with commit, machine
and command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCH_PAGES = sorted((DOCS / "benchmarks").glob("*.md"))


def _links(page: Path) -> set[Path]:
    text = page.read_text(encoding="utf-8")
    return {(page.parent / t).resolve() for t in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", text)}


def test_every_docs_page_is_linked_from_the_readme():
    linked = _links(ROOT / "README.md")
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked] == []


def test_every_measurement_page_is_linked_from_the_benchmarks_index():
    linked = _links(DOCS / "benchmarks.md")
    assert [p.name for p in BENCH_PAGES if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", BENCH_PAGES, ids=lambda p: p.name)
def test_every_measurement_page_is_stamped(page):
    stamps = [
        line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("> **Stamp**")
    ]
    assert stamps, f"{page.name} has no stamp line"
    for line in stamps:
        assert re.search(r"commits? `[0-9a-f]{7}", line) and "machine:" in line and "command:" in line, line


def test_measurement_page_links_resolve():
    for page in [DOCS / "benchmarks.md", DOCS / "reliability.md", *BENCH_PAGES]:
        for target in _links(page):
            assert target.exists(), f"{page.name} links to missing {target}"
