"""The documentation's two kinds of pages stay reachable: reference pages from the README, and one
measurement page per benchmark from ``docs/benchmarks.md``, each run on it stamped with commit, machine
and command."""

from __future__ import annotations

import argparse
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


# --------------------------------------------------------------------------- references
# Every repository path, ``gta-verl`` command and ``python -m`` module a page cites in code
# (inline or fenced) exists, and every relative link resolves, so a rename fails here rather
# than in a reader's shell.
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md")), *sorted((ROOT / "experiments").rglob("*.md"))]
REPO_DIRS = (
    "gta_verl",
    "recipes",
    "docs",
    "benchmarks",
    "experiments",
    "data_prep",
    "tests",
    "assets",
    "scripts",
)
_PATH = re.compile(rf"(?<![\w./~$-])((?:{'|'.join(REPO_DIRS)})/[\w./-]*)([*{{<$]?)")
_MODULE = re.compile(r"\bpython3?\s+-m\s+([\w.]+)")
_NODE = re.compile(r"((?:tests|benchmarks|experiments)/[\w/]+\.py)::(\w+)")
_COMMAND = re.compile(r"(?<![\w.-])gta-verl[ \t]+([a-z][\w-]*)(?:[ \t]+([a-z][\w-]*))?")
#: Cited paths that are not in the tree, each with why that is right.
NOT_IN_TREE = {
    # experiments/learning/results/README.md: experiment 5's command writes there, but its record was
    # never committed (the page says where it ran).
    "experiments/learning/results/exp5",
    "experiments/learning/results/exp5/runs/",
}


def _code(page: Path) -> list[str]:
    """The page's code: fenced blocks, then inline spans of the prose around them."""
    text = page.read_text(encoding="utf-8")
    if page.name == "README.md":  # its code map names files relative to their folder; checked above
        text = re.sub(r"## Code map.*?```.*?```", "", text, flags=re.S)
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return fenced + re.findall(r"`([^`\n]+)`", prose)


def _cited_paths(page: Path) -> set[tuple[str, str]]:
    return {(path.rstrip("."), glob) for code in _code(page) for path, glob in _PATH.findall(code)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_repository_paths_exist(page):
    missing = []
    for path, glob in sorted(_cited_paths(page)):
        found = any(ROOT.glob(path + "*")) if glob else (ROOT / path).exists()
        if not found and path not in NOT_IN_TREE:
            missing.append(path + glob)
    assert missing == [], f"{page.name} cites paths that are not in the repository"
    nodes = {node for code in _code(page) for node in _NODE.findall(code)}
    gone = sorted(f"{path}::{name}" for path, name in nodes if not _defines(ROOT / path, name))
    assert gone == [], f"{page.name} cites tests or functions that are not there"


def _defines(path: Path, name: str) -> bool:
    return (
        path.is_file()
        and re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", path.read_text(), re.M) is not None
    )


def _module_exists(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_python_modules_exist(page):
    cited = {m for code in _code(page) for m in _MODULE.findall(code) if m.split(".")[0] in REPO_DIRS}
    # An upper-case part is a placeholder the page explains (``python -m benchmarks.NAME``).
    missing = sorted(m for m in cited if not m.split(".")[-1].isupper() and not _module_exists(m))
    assert missing == [], f"{page.name} runs modules that are not in the repository"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@pytest.fixture(scope="module")
def cli_tree() -> dict[str, dict[str, argparse.ArgumentParser]]:
    from gta_verl.cli import build_parser

    return {name: _subcommands(sub) for name, sub in _subcommands(build_parser()).items()}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_cli_commands_exist(page, cli_tree):
    wrong = _wrong_commands(_code(page), cli_tree)
    assert sorted(wrong) == [], f"{page.name} cites commands the CLI does not have"


def _wrong_commands(spans: list[str], cli_tree: dict[str, dict[str, argparse.ArgumentParser]]) -> set[str]:
    wrong = set()
    for code in spans:
        for first, second in _COMMAND.findall(code):
            if first not in cli_tree or (cli_tree[first] and second and second not in cli_tree[first]):
                wrong.add(f"gta-verl {first} {second}".strip())
    return wrong


#: Comments and docstrings outside the pages cite commands too (the configs' ``kb_dir`` comment).
SOURCES = sorted(
    p
    for d in ("gta_verl", "recipes", "benchmarks", "experiments", "data_prep", "scripts")
    for p in (ROOT / d).rglob("*")
    if p.suffix in (".py", ".yaml", ".sh")
)


def test_commands_cited_in_sources_exist(cli_tree):
    wrong = {}
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        # Only spans that open with the command: a comment's backticks may pair across lines.
        spans = [s for s in re.findall(r"`([^`\n]+)`", text) if re.match(r"(?:\S*/)?gta-verl\s", s)]
        bad = _wrong_commands(spans, cli_tree)
        bad |= {m for m in _MODULE.findall(text) if m.split(".")[0] in REPO_DIRS and not _module_exists(m)}
        if bad:
            wrong[str(path.relative_to(ROOT))] = sorted(bad)
    assert wrong == {}, "sources cite commands or modules that do not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = sorted(t for t in targets if "://" not in t and not (page.parent / t).exists())
    assert missing == [], f"{page.name} links to files that are not there"


#: A 95 % interval as the learning page writes it: [−0.066, −0.014], [-0.2, +0.1], [0.05, 0.95] …
_INTERVAL = re.compile(r"\[[+−-]?\d+\.\d+, [+−-]?\d+\.\d+\]")
#: What an interval must say of itself: ``q [..]`` resamples the questions with the training seeds held fixed,
#: ``seeds t [..]`` treats the seeds as random.
_LABELS = ("q ", "seeds t ")


def _verdict_text() -> dict[str, str]:
    """The claims about learning: the learning page's lead (before its first section) and every paragraph
    naming a verdict, and the README's learning line."""
    page = (DOCS / "learning.md").read_text(encoding="utf-8")
    lead, _, body = page.partition("\n## ")
    verdicts = [p for p in body.split("\n\n") if "Verdict" in p or "verdict" in p]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = readme[readme.index("- [docs/learning.md]") :].split("\n\n")[0]
    named = {f"verdict {i}": v for i, v in enumerate(verdicts)}
    return {"docs/learning.md lead": lead, **named, "README": line}


def _unnamed(text: str) -> list[str]:
    text = re.sub(r"\s+", " ", text)  # a label may end one line and its interval open the next
    return [m.group(0) for m in _INTERVAL.finditer(text) if not text[: m.start()].endswith(_LABELS)]


def test_every_interval_in_a_learning_verdict_names_the_variance_it_covers():
    unnamed = {where: bad for where, text in _verdict_text().items() if (bad := _unnamed(text))}
    assert unnamed == {}, "write each interval as 'q [a, b]' (questions) or 'seeds t [a, b]' (seeds random)"


def test_the_interval_rule_catches_an_unlabelled_interval():
    text = "(b) − (r) is −0.038 [−0.066, −0.014]; seeds t [−0.208, +0.133] and q\n[−0.1, +0.2]"
    assert _unnamed(text) == ["[−0.066, −0.014]"]
