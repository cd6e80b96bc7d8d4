"""Keep the README honest: its commands, links and code map must match the tree."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_exactly_two_setup_commands_and_ci_runs_the_test_one():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = _bash_blocks(quick)
    assert len(blocks) == 2, blocks
    main_job, tests = blocks
    assert "gta-verl quickstart" in main_job and main_job.startswith("bash scripts/setup.sh")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests in ci, "the CI script must run the README's test command verbatim"


def test_linked_files_exist():
    for target in re.findall(r"\]\(([^)#:]+)\)", README):
        assert (ROOT / target).exists(), f"README links to missing {target}"


def test_code_map_names_existing_files():
    code_map = README.split("## Code map", 1)[1].split("```", 2)[1]
    folder = None
    for line in code_map.splitlines():
        m = re.match(r"  (\w+)/\s", line)
        if m:
            folder = m.group(1)
        elif not line.startswith("    "):
            folder = None  # a top-level line, e.g. recipes/ or tests/
        for name in re.findall(r"([\w/]+\.py|[\w/]+/)", line):
            if m and name == f"{folder}/":
                continue  # the folder heading itself
            candidates = [ROOT / "gta_verl" / name, ROOT / name, ROOT / "benchmarks" / name]
            candidates.append(ROOT / "experiments" / "learning" / name)
            if folder:
                candidates.insert(0, ROOT / "gta_verl" / folder / name)
            assert any(c.exists() for c in candidates), f"code map names missing {name} (folder {folder})"


def test_registered_names_table_matches_plugin_module():
    from gta_verl.verl_plugins import REGISTERED_NAMES

    for names in REGISTERED_NAMES.values():
        for name in names:
            assert f"`{name}`" in README, f"README does not document registered name {name}"


# The Quick start quotes a few measured figures; each is a row of a measurement page's
# ``| README figure | measured |`` table, next to the stamped run it comes from.
_FIGURE = re.compile(r"≈ [\d,]+ (?:min|tests)\b")


def _page_figures() -> dict[str, str]:
    """``{README figure: measured}`` from every measurement page's figure table."""
    figures = {}
    for page in sorted((ROOT / "docs" / "benchmarks").glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.replace(" ", "").startswith("|READMEfigure|measured|"):
                for row in lines[i + 2 :]:
                    if not row.startswith("|"):
                        break
                    figure, measured = (c.strip() for c in row.strip().strip("|").split("|"))
                    figures[figure] = measured
    return figures


def _agrees(figure: str, measured: str) -> bool:
    quoted = int(figure.split()[1].replace(",", ""))
    value, unit = measured.split()
    value_n = float(value.replace(",", ""))
    if figure.endswith("min"):
        return unit == "s" and round(value_n / 60) == quoted
    return unit == "tests" and round(value_n, -1) == quoted


def test_quick_start_figures_are_the_measurement_pages():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    quoted = set(_FIGURE.findall(" ".join(quick.split())))
    figures = _page_figures()
    assert quoted, "the Quick start quotes no time"
    assert sorted(quoted - figures.keys()) == [], "Quick start figures with no measurement page row"
    assert sorted(set(figures) - quoted) == [], "measurement page figures the README no longer quotes"
    wrong = {f: m for f, m in figures.items() if not _agrees(f, m)}
    assert wrong == {}, "README figures that do not round from their measurement"
