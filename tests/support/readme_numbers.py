"""The numbers the README's "What the main job prints" section quotes, against the main job's summary.json.

The README says every number in that section is recomputed by ``gta-verl quickstart``; the run writes
them to ``<out>/summary.json`` (one entry per stage, keyed by the stage's title). :func:`mismatches`
compares the two, at the precision the README prints them (the run's own table format).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"

#: summary.json titles of the stages the README quotes.
KB_TITLE = "Knowledge base (GTA-RAG Table 5 layout)"
RETRIEVAL_TITLE = "Retrieval recall@k on the 100 MuSiQue questions"
SYNTH_TITLE = "Trajectory synthesis (template generator)"

#: README column of the KB table → key of the KB stage's data.
KB_COLUMNS = {
    "Document nodes": "document_nodes",
    "Entity nodes": "entity_nodes",
    "Document–entity edges": "doc_entity_edges",
    "Relation edges": "relation_edges",
    "Synonymy edges": "synonymy_edges",
    "Avg. document degree": "avg_document_degree",
}


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("## What the main job prints", 1)[1].split("\n## ", 1)[0]


def _table_after(section: str, marker: str) -> list[list[str]]:
    """Rows (cells stripped of ``**``) of the first markdown table after ``marker``."""
    lines = section.split(marker, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
        if not all(set(c) <= set("-: ") for c in cells):
            rows.append(cells)
    return rows


def readme_kb() -> dict[str, float]:
    """The KB table: ``{data key: value}``."""
    head, values = _table_after(_section(), "**Knowledge base**")
    return {KB_COLUMNS[h]: float(v.replace(",", "")) for h, v in zip(head, values, strict=True)}


def readme_recall() -> dict[str, dict[str, str]]:
    """The recall table: ``{mode: {"R@k": "0.xyz"}}`` (mode names as the run's ``modes`` keys)."""
    head, *rows = _table_after(_section(), "**Retrieval recall@k**")
    return {row[0].split()[0]: dict(zip(head[1:], row[1:], strict=True)) for row in rows}


def readme_synth() -> dict[str, int]:
    """The synthesis funnel sentence: sampled → phrased → rule checks → executable; written per hop."""
    text = " ".join(_section().split("**Trajectory synthesis**", 1)[1].split())
    m = re.search(
        r"(\d+) paths sampled → (\d+) phrased → (\d+) pass the rule checks → (\d+) executable by "
        r"the retriever; (\d+) written \((\d+) 2-hop, (\d+) 3-hop, (\d+) 4-hop\)",
        text,
    )
    assert m, f"README synthesis sentence not found in: {text[:300]}"
    keys = (
        "sampled",
        "generated",
        "rules_passed",
        "validated",
        "validated_trajectories",
        "2_hop_trajectories",
        "3_hop_trajectories",
        "4_hop_trajectories",
    )
    return dict(zip(keys, map(int, m.groups()), strict=True))


def mismatches(summary: dict[str, Any], stages: tuple[str, ...] = ("kb", "retrieval", "synth")) -> list[str]:
    """Every README number of ``stages`` that differs from ``summary`` (the parsed ``summary.json``)."""
    bad: list[str] = []
    if "kb" in stages:
        kb = summary[KB_TITLE]["data"]
        for key, want in readme_kb().items():
            if abs(float(kb[key]) - want) > 0.005:
                bad.append(f"KB {key}: README {want}, run {kb[key]}")
    if "retrieval" in stages:
        modes = summary[RETRIEVAL_TITLE]["data"]["modes"]
        for mode, row in readme_recall().items():
            for k, want in row.items():
                got = f"{modes[mode]['recall'][k]:.3f}"  # the run's table format
                if got != want:
                    bad.append(f"recall {mode} {k}: README {want}, run {got}")
    if "synth" in stages:
        data = summary[SYNTH_TITLE]["data"]
        for key, want in readme_synth().items():
            got = data["stats"][key] if key in data["stats"] else data["funnel"][key]
            if int(got) != want:
                bad.append(f"synthesis {key}: README {want}, run {got}")
    return bad
