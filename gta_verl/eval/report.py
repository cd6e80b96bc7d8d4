"""Evaluation report: markdown tables in the papers' layouts, a cost section, JSON and PNG plots.

:func:`write_report` is the one entry point (the CLI, the runner and the README main
job call it). It writes into ``out_dir``::

    report.md        the tables below
    report.json      every number of the tables (fractions, not percent)
    plots/*.png      coverage by hops, search-turn histogram, route mix,
                     and route shares over training steps when a metrics log is given

Tables: answer quality per dataset + unweighted average (GTA-RAG Table 1 /
PathRouter Table 1), retrieval behaviour (GTA-RAG Table 3), path faithfulness
(PathRouter Table 2: F1, SF-F1, UAR, Turns), the same metrics by hop count, the route
distribution (PathRouter Fig. 3) and costs (retrieval p50/p95 latency, searches per
question, tokens per trajectory). Metric definitions: :mod:`gta_verl.eval.metrics`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gta_verl import SCHEMA_VERSION
from gta_verl.data.io import write_text_atomic
from gta_verl.eval import paper_tables as paper
from gta_verl.eval import plots
from gta_verl.eval.metrics import EvalSummary, RecordMetrics, score_record, summarize
from gta_verl.eval.records import EvalRecord
from gta_verl.rewards.path_router import PathRouterConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportPaths:
    """Where :func:`write_report` put its outputs."""

    markdown: Path
    json: Path
    plots: dict[str, Path] = field(default_factory=dict)


def _pct(x: float, nd: int = 1) -> str:
    return "–" if x is None or math.isnan(x) else f"{100 * x:.{nd}f}"


def _num(x: float, nd: int = 2) -> str:
    if x is None or math.isnan(x):
        return "–"
    return f"{int(x):,}" if nd == 0 else f"{x:.{nd}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines + [""]


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else math.nan


def _measured(values: list[float]) -> list[float]:
    """Token counts are 0 when not measured (verl dumps): all-zero means unknown, not zero."""
    return values if any(values) else []


def cost_summary(records: Sequence[EvalRecord]) -> dict[str, float]:
    """Costs: retrieval latency p50/p95 (ms, over every search call with a measured latency),
    searches per question (mean over rollouts), tokens per trajectory (response = generated +
    observation tokens: mean/p50/p95; generated and prompt: mean). Unmeasured → NaN."""
    lat = [float(x) for r in records for x in r.retrieval_latency_ms if not math.isnan(x)]
    resp = _measured([float(r.rollout.response_tokens) for r in records])
    prompt = _measured([float(r.prompt_tokens) for r in records])
    generated = _measured([float(r.generated_tokens) for r in records])
    searches = [float(r.rollout.num_searches) for r in records]

    def mean(v: list[float]) -> float:
        return float(np.mean(v)) if v else math.nan

    return {
        "retrieval_calls_timed": float(len(lat)),
        "retrieval_latency_p50_ms": _percentile(lat, 50),
        "retrieval_latency_p95_ms": _percentile(lat, 95),
        "searches_per_question": mean(searches),
        "searches_total": float(sum(searches)),
        "response_tokens_mean": mean(resp),
        "response_tokens_p50": _percentile(resp, 50),
        "response_tokens_p95": _percentile(resp, 95),
        "generated_tokens_mean": mean(generated),
        "prompt_tokens_mean": mean(prompt),
    }


def _answer_quality(summary: EvalSummary, name: str) -> list[str]:
    ds = list(summary.per_dataset)
    header = ["Policy"] + [f"{d} {m}" for d in ds for m in ("EM", "F1")] + ["Average EM", "Average F1"]
    row = [name]
    for d in ds:
        row += [_pct(summary.per_dataset[d]["em"]), _pct(summary.per_dataset[d]["f1"])]
    row += [_pct(summary.average["em"]), _pct(summary.average["f1"])]
    return ["## Answer quality (GTA-RAG Table 1 layout)", ""] + _table(header, [row])


def _retrieval_rows(groups: Mapping[Any, Mapping[str, float]], label: Any) -> list[list[str]]:
    return [
        [
            label(k),
            _num(s["n_with_targets"], 0),
            _pct(s["target_doc_cov"]),
            _pct(s["complete_traj_cov"]),
            _num(s["zero_target_turns"], 0),
            _num(s["zero_target_turns_per_q"]),
            _num(s["zero_target_queries"], 0),
            _num(s["search_turns"]),
        ]
        for k, s in groups.items()
    ]


def _retrieval_behaviour(summary: EvalSummary) -> list[str]:
    header = [
        "Dataset",
        "n (with gold docs)",
        "Target-doc coverage (%) ↑",
        "Complete-trajectory coverage (%) ↑",
        "Zero-target turns ↓",
        "Zero-target turns / rollout ↓",
        "Zero-target queries ↓",
        "Avg. search turns ↓",
    ]
    rows = _retrieval_rows(summary.per_dataset, str)
    rows += _retrieval_rows({"avg": summary.average}, lambda _: "Average (unweighted)")
    rows += _retrieval_rows({"all": summary.overall}, lambda _: "All rollouts (pooled)")
    return ["## Retrieval behaviour (GTA-RAG Table 3 layout)", ""] + _table(header, rows)


def _faithfulness(summary: EvalSummary, name: str) -> list[str]:
    ds = list(summary.per_dataset)
    header = ["Policy"] + [f"{d} {m}" for d in ds for m in ("F1", "SF-F1", "UAR↓", "Turns")]
    row = [name]
    for d in ds:
        s = summary.per_dataset[d]
        row += [_pct(s["f1"], 2), _pct(s["sf_f1"], 2), _pct(s["uar"], 2), _num(s["search_turns"], 1)]
    return ["## Path faithfulness (PathRouter Table 2 layout)", ""] + _table(header, [row])


def _by_hops(summary: EvalSummary) -> list[str]:
    header = [
        "Hops",
        "n",
        "EM",
        "F1",
        "Target-doc cov. (%)",
        "Complete-traj. cov. (%)",
        "Zero-target turns / rollout",
        "SF-F1",
        "UAR↓",
        "Search turns",
    ]
    rows = [
        [
            str(h) if h else "unknown",
            _num(s["n"], 0),
            _pct(s["em"]),
            _pct(s["f1"]),
            _pct(s["target_doc_cov"]),
            _pct(s["complete_traj_cov"]),
            _num(s["zero_target_turns_per_q"]),
            _pct(s["sf_f1"]),
            _pct(s["uar"]),
            _num(s["search_turns"]),
        ]
        for h, s in summary.per_hops.items()
    ]
    return ["## By hop count (all datasets pooled)", ""] + _table(header, rows)


def _routes(summary: EvalSummary) -> list[str]:
    groups = {**summary.per_dataset, "All rollouts (pooled)": summary.overall}
    keys = sorted({k for s in groups.values() for k in s if k.startswith("route/")})
    if not keys:
        return ["## Route distribution", "", "No rollout has gold evidence texts: routes undefined.", ""]
    header = ["Dataset", "n (with gold texts)"] + [f"{k.split('/', 1)[1]} (%)" for k in keys]
    rows = [
        [d, _num(s["n_with_evidence"], 0)] + [_pct(s.get(k, math.nan)) for k in keys]
        for d, s in groups.items()
    ]
    return ["## Route distribution (PathRouter Fig. 3; θ_C, θ_P as configured)", ""] + _table(header, rows)


def _cost(cost: Mapping[str, float], overall: Mapping[str, float]) -> list[str]:
    rows = [
        [
            "Retrieval latency p50 / p95 (ms)",
            f"{_num(cost['retrieval_latency_p50_ms'], 1)} / {_num(cost['retrieval_latency_p95_ms'], 1)}"
            f" over {_num(cost['retrieval_calls_timed'], 0)} timed calls",
        ],
        ["Searches per question (mean)", _num(cost["searches_per_question"])],
        [
            "Response tokens per trajectory (mean / p50 / p95)",
            f"{_num(cost['response_tokens_mean'], 1)} / {_num(cost['response_tokens_p50'], 0)}"
            f" / {_num(cost['response_tokens_p95'], 0)}",
        ],
        ["Policy-generated tokens per trajectory (mean)", _num(cost["generated_tokens_mean"], 1)],
        ["Prompt tokens per trajectory (mean)", _num(cost["prompt_tokens_mean"], 1)],
        [
            "Retrieval errors (total, % of searches)",
            f"{_num(overall['retrieval_errors'], 0)} ({_pct(overall['retrieval_error_rate'])})",
        ],
        ["Invalid actions per rollout (mean)", _num(overall["invalid_actions"])],
        ["Answered (%)", _pct(overall["answered"])],
    ]
    return ["## Cost", ""] + _table(["Quantity", "Value"], rows)


def _paper_reference(summary: EvalSummary) -> list[str]:
    present = {paper.canonical_dataset(d) for d in summary.per_dataset}
    ds = [d for d in ("hotpotqa", "2wiki", "musique", "popqa", "nq") if d in present]
    if not ds:
        return []
    header = ["Published (EM / F1)"] + ds
    rows = [[m] + [f"{v[d][0]:.1f} / {v[d][1]:.1f}" for d in ds] for m, v in paper.GTA_RAG_TABLE1.items()]
    out = [
        "## Published numbers for the same datasets",
        "",
        "GTA-RAG Table 1 (full test sets, the papers' corpora; comparable only when this run "
        "used the same test split and retrieval corpus — see docs/eval.md):",
        "",
    ]
    out += _table(header, rows)
    pr_ds = [d for d in ds if d in paper.PATHROUTER_TABLE2]
    if pr_ds:
        out += ["PathRouter Table 2, full model, Qwen2.5-7B (F1 / SF-F1 / UAR / Turns):", ""]
        rows_pr = []
        for d in pr_ds:
            f1_, sf, uar, turns = paper.PATHROUTER_TABLE2[d]
            rows_pr.append([d, f"{f1_:.2f}", f"{sf:.2f}", f"{uar:.2f}", f"{turns:.1f}"])
        out += _table(["Dataset", "F1", "SF-F1", "UAR↓", "Turns"], rows_pr)
    return out


def render_markdown(
    summary: EvalSummary,
    cost: Mapping[str, float],
    name: str = "policy",
    meta: Mapping[str, Any] | None = None,
    plot_paths: Mapping[str, Path] | None = None,
    title: str = "gta-verl evaluation report",
) -> str:
    """Render the markdown report from a :class:`EvalSummary` and :func:`cost_summary`."""
    lines = [f"# {title}", ""]
    for k, v in (meta or {}).items():
        lines.append(f"- **{k}**: {v}")
    o = summary.overall
    lines += [
        f"- **rollouts**: {int(o['n'])} over {int(o['n_questions'])} questions, "
        f"{len(summary.per_dataset)} dataset(s)",
        "",
        "Percentages; `–` = undefined (no gold documents / evidence for that group). "
        "Definitions in docs/eval.md.",
        "",
    ]
    lines += _answer_quality(summary, name) + _retrieval_behaviour(summary) + _faithfulness(summary, name)
    lines += _by_hops(summary) + _routes(summary) + _cost(cost, o) + _paper_reference(summary)
    if plot_paths:
        lines += ["## Plots", ""] + [f"![{k}](plots/{p.name})" for k, p in plot_paths.items()] + [""]
    return "\n".join(lines)


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None  # JSON has no NaN; null = undefined
    if isinstance(obj, Mapping):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def make_plots(
    metrics: Sequence[RecordMetrics],
    summary: EvalSummary,
    plot_dir: Path,
    metrics_log: Path | str | None = None,
) -> dict[str, Path]:
    """Draw every plot the data supports; returns ``{name: png path}``."""
    out: dict[str, Path] = {}
    if any(s.get("n_with_targets", 0) for s in summary.per_hops.values()):
        out["coverage_by_hops"] = plots.plot_coverage_by_hops(
            summary.per_hops, plot_dir / "coverage_by_hops.png"
        )
    if metrics:
        out["search_turns"] = plots.plot_search_turn_histogram(
            [m.num_searches for m in metrics], plot_dir / "search_turns.png"
        )
    if any(k.startswith("route/") for s in summary.per_dataset.values() for k in s):
        out["routes"] = plots.plot_route_distribution(summary.per_dataset, plot_dir / "routes.png")
    if metrics_log is not None:
        out["route_shares_over_training"] = plots.plot_route_shares(
            plots.read_route_shares(metrics_log), plot_dir / "route_shares_over_training.png"
        )
    return out


def write_report(
    records: Sequence[EvalRecord],
    out_dir: Path | str,
    *,
    name: str = "policy",
    meta: Mapping[str, Any] | None = None,
    metrics_log: Path | str | None = None,
    config: PathRouterConfig | None = None,
    title: str = "gta-verl evaluation report",
) -> ReportPaths:
    """Score ``records`` and write ``report.md``, ``report.json`` and ``plots/*.png`` to ``out_dir``.

    Args:
        records: Evaluated rollouts (e.g. :func:`gta_verl.eval.records.read_records`).
        out_dir: Output directory (created).
        name: Row label of the policy in the tables.
        meta: Run facts listed at the top (policy, data, KB, backend…).
        metrics_log: Optional training metrics log (verl ``file`` logger jsonl or CSV)
            with ``path_router/route_share/*`` per step, for the route-shares plot.
        config: θ_C / θ_P / P reading for correctness and routes (defaults 0.5 / 0.4 / best_passage).
        title: Markdown title.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metrics = [score_record(r.rollout, config) for r in records]
    summary = summarize(metrics, config)
    cost = cost_summary(records)
    plot_paths = make_plots(metrics, summary, out / "plots", metrics_log)
    md_path, json_path = out / "report.md", out / "report.json"
    write_text_atomic(md_path, render_markdown(summary, cost, name, meta, plot_paths, title))
    payload = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "meta": dict(meta or {}),
        **summary.to_dict(),
        "cost": cost,
        "plots": {k: p.name for k, p in plot_paths.items()},
    }
    write_text_atomic(json_path, json.dumps(_json_safe(payload), indent=2, default=str))
    logger.info("wrote %s (%d rollouts)", md_path, len(records))
    return ReportPaths(markdown=md_path, json=json_path, plots=plot_paths)
