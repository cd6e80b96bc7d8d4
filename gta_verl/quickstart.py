"""``gta-verl quickstart``: the README main job, end to end on the bundled real data, on CPU.

Stages (each one is the same library call the stage's own subcommand makes):

1. data prep   — MuSiQue subset → corpus parquet + verl QA parquet;
2. kb build    — precomputed GPT-3.5 OpenIE triples → entity–document graph → statistics;
3. retrieval   — recall@k of dense / graph / hybrid retrieval on the 100 questions;
4. synthesis   — template trajectories over graph paths, validated by the deployed retriever;
5. RL smoke    — tiny random Qwen2 through the real agent loop, retriever and reward, one GRPO step;
6. evaluation  — agent-loop evaluation with evidence metrics, markdown report and PNG plots.

Everything is written under ``--out``; a ``summary.md`` collects each stage's table.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSETS = REPO_ROOT / "assets"
MUSIQUE = ASSETS / "musique"
MUSIQUE_CORPUS = MUSIQUE / "musique_train_corpus.json"
MUSIQUE_QA = MUSIQUE / "musique_train.json"
MUSIQUE_OPENIE = MUSIQUE / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"


@dataclass
class StageLog:
    """What one stage reported: a title, a markdown body and wall time."""

    title: str
    markdown: str
    seconds: float
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class QuickstartContext:
    out: Path
    n_synth: int
    smoke_questions: int
    smoke_group: int
    eval_questions: int
    seed: int
    paths: dict[str, Path] = field(default_factory=dict)


def _stage_prep(ctx: QuickstartContext) -> StageLog:
    from gta_verl.data.prep import prepare_musique

    result = prepare_musique(ctx.out / "data")
    ctx.paths.update({k: Path(v) for k, v in result.paths.items()})
    return StageLog("Data preparation (MuSiQue subset)", result.markdown(), 0.0, result.to_dict())


def _stage_kb(ctx: QuickstartContext) -> StageLog:
    from gta_verl.kb.build import KBConfig, build_kb_from_files
    from gta_verl.kb.stats import format_stats_table, kb_stats

    kb_dir = ctx.out / "kb_musique"
    kb = build_kb_from_files(
        MUSIQUE_CORPUS, "hipporag", f"precomputed:{MUSIQUE_OPENIE}", kb_dir, KBConfig()
    )
    ctx.paths["kb"] = kb_dir
    stats = kb_stats(kb)
    return StageLog("Knowledge base (GTA-RAG Table 5 layout)", format_stats_table(stats), 0.0, stats)


def _stage_retrieval(ctx: QuickstartContext) -> StageLog:
    from gta_verl.retrieval.evaluate import evaluate_retrieval, format_recall_table

    result = evaluate_retrieval(
        ctx.paths["kb"], ctx.paths["qa"], modes=("dense", "graph", "hybrid"), ks=(1, 2, 5, 10)
    )
    return StageLog("Retrieval recall@k on the 100 MuSiQue questions", format_recall_table(result), 0.0, result)


def _stage_synth(ctx: QuickstartContext) -> StageLog:
    from gta_verl.synth.pipeline import run_synthesis

    out = ctx.out / "stage1_template.parquet"
    result = run_synthesis(kb_dir=ctx.paths["kb"], out=out, generator="template", n=ctx.n_synth, seed=ctx.seed)
    ctx.paths["stage1"] = out
    return StageLog("Trajectory synthesis (template generator)", result.markdown(), 0.0, result.to_dict())


def _stage_smoke(ctx: QuickstartContext) -> StageLog:
    from gta_verl.agent.smoke import run_smoke

    report = run_smoke(
        kb_dir=ctx.paths["kb"],
        data_parquet=ctx.paths["stage1"],
        n_questions=ctx.smoke_questions,
        group=ctx.smoke_group,
        seed=ctx.seed,
    )
    return StageLog("RL smoke (tiny random Qwen2, one GRPO step)", report.markdown(), 0.0, report.to_dict())


def _stage_eval(ctx: QuickstartContext) -> StageLog:
    from gta_verl.eval.quick import run_quick_eval

    result = run_quick_eval(
        kb_dir=ctx.paths["kb"],
        qa_parquet=ctx.paths["qa"],
        stage1_parquet=ctx.paths["stage1"],
        out_dir=ctx.out / "eval",
        max_questions=ctx.eval_questions,
        seed=ctx.seed,
    )
    return StageLog("Evaluation report", result.markdown(), 0.0, result.to_dict())


STAGES: tuple[tuple[str, Callable[[QuickstartContext], StageLog]], ...] = (
    ("prep", _stage_prep),
    ("kb", _stage_kb),
    ("retrieval", _stage_retrieval),
    ("synth", _stage_synth),
    ("smoke", _stage_smoke),
    ("eval", _stage_eval),
)


def run_quickstart(ctx: QuickstartContext, stages: tuple[str, ...] | None = None) -> list[StageLog]:
    """Run the stages in order, print each stage's table, and write ``summary.md``."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    logs: list[StageLog] = []
    for name, fn in STAGES:
        if stages and name not in stages:
            continue
        print(f"\n=== [{name}] ===", flush=True)
        t0 = time.perf_counter()
        log = fn(ctx)
        log.seconds = time.perf_counter() - t0
        print(f"## {log.title}  ({log.seconds:.1f} s)\n\n{log.markdown}", flush=True)
        logs.append(log)
        _write_summary(ctx.out, logs)
    return logs


def _write_summary(out: Path, logs: list[StageLog]) -> None:
    parts = ["# gta-verl quickstart summary\n"]
    for log in logs:
        parts.append(f"## {log.title}\n\n_{log.seconds:.1f} s_\n\n{log.markdown}\n")
    tmp = out / "summary.md.tmp"
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(out / "summary.md")
    data = {log.title: {"seconds": log.seconds, "data": log.data} for log in logs}
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    tmp.replace(out / "summary.json")


def _cmd(args: argparse.Namespace) -> int:
    ctx = QuickstartContext(
        out=Path(args.out),
        n_synth=args.n_synth,
        smoke_questions=args.smoke_questions,
        smoke_group=args.smoke_group,
        eval_questions=args.eval_questions,
        seed=args.seed,
    )
    stages = tuple(args.stages.split(",")) if args.stages else None
    run_quickstart(ctx, stages)
    print(f"\nDone. Summary: {ctx.out / 'summary.md'}")
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "quickstart",
        help="run the whole pipeline on the bundled MuSiQue data (CPU)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default="runs/quickstart", help="output directory (default: %(default)s)")
    p.add_argument("--n-synth", type=int, default=200, help="graph paths to synthesize from")
    p.add_argument("--smoke-questions", type=int, default=4)
    p.add_argument("--smoke-group", type=int, default=4, help="rollouts per question (GRPO group size)")
    p.add_argument("--eval-questions", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stages", default="", help="comma list of stages to run (default: all, in order)")
    p.set_defaults(func=_cmd)
