"""``gta-verl eval``: evaluate a policy through the agent loop, or score a verl validation dump.

Examples::

    gta-verl eval --policy Qwen/Qwen2.5-3B-Instruct --data test/musique.parquet,test/hotpotqa.parquet \\
        --kb kb/ --backend vllm --out eval/qwen3b
    gta-verl eval --policy tiny-random-qwen2 --data musique.parquet --kb kb/ --max-questions 5 \\
        --out eval/smoke
    gta-verl eval --from-verl-dump checkpoints/val_generations --data test/musique.parquet --kb kb/ \\
        --out eval/step40
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

logger = logging.getLogger(__name__)


def _key_value(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    import yaml

    return key.strip(), yaml.safe_load(value)  # numbers/bools typed as in the recipe YAML


def add_parser(subparsers: Any) -> None:
    """Register ``eval`` on the top-level ``gta-verl`` parser."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate a policy (EM/F1, evidence coverage, SF-F1, UAR, costs) and write a report",
        description="Run a policy through the training agent loop and retriever on test questions, or "
        "score the validation generations verl dumped during training. Writes records/, report.md, "
        "report.json and plots/ to --out.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--policy",
        help="HF model path, a policy name (gemma-3-270m), or 'tiny-random-qwen2' (CPU smoke)",
    )
    src.add_argument(
        "--from-verl-dump",
        metavar="DIR_OR_JSONL",
        help="trainer.validation_data_dir (latest step) or one <step>.jsonl",
    )
    _add_data_arguments(p)
    _add_rollout_arguments(p)
    _add_run_arguments(p)
    p.set_defaults(func=run)
    add_signal_parser(subparsers)


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    """What the policy is evaluated on: questions and the KB."""
    p.add_argument(
        "--data",
        default="",
        help="comma-separated verl QA parquet files (dump mode: optional, gives data_source/hops/qid)",
    )
    p.add_argument(
        "--kb", help="KB directory of the retrieval environment (dump mode: optional, exact doc ids)"
    )


def _add_rollout_arguments(p: argparse.ArgumentParser) -> None:
    """How each question is rolled out: backend, samples, budgets, prompt, retriever."""
    p.add_argument("--backend", choices=("hf", "vllm"), default="hf", help="generation backend (default hf)")
    p.add_argument("--n-samples", type=int, default=1, help="rollouts per question (default 1)")
    p.add_argument(
        "--temperature", type=float, default=None, help="default: 0 (greedy) for one sample, 1.0 for several"
    )
    p.add_argument(
        "--max-actions",
        type=int,
        default=5,
        help="action budget B (default 5, ours: GTA-RAG names B but gives no value)",
    )
    p.add_argument(
        "--max-obs-tokens",
        type=int,
        default=512,
        help="cap on one <info> observation in tokens, as gta.agent.max_obs_tokens (default 512)",
    )
    p.add_argument(
        "--response-length",
        type=int,
        default=None,
        help="response token budget (default: the training config's data.max_response_length, 3072)",
    )
    p.add_argument(
        "--prompt-length",
        type=int,
        default=None,
        help="prompt token budget (default: the training config's data.max_prompt_length, 1024)",
    )
    p.add_argument(
        "--prompt-style",
        choices=("instructions", "fewshot"),
        default=None,
        help="rewrite each row's prompt in this style from its question (default: keep the rows' prompts; "
        "fewshot: two worked examples, for a pretrained base model such as gemma-3-270m)",
    )
    p.add_argument(
        "--gold-evidence",
        action="store_true",
        help="PathRouter's teacher view: each row's gold passages (ground_truth.support_texts) placed before "
        "its question, as the teacher scores the student; compare with a run without it to see whether "
        "the policy, as a teacher, uses the evidence it is shown",
    )
    p.add_argument(
        "--sampler",
        choices=("per_rollout", "batched"),
        default="per_rollout",
        help="hf backend at T > 0: per_rollout (one seeded stream per rollout, batching-independent) or "
        "batched (rollouts share model calls, as verl's hf_cpu rollout: many times faster; signal's default)",
    )
    p.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="hf backend weights and compute (default: as saved; bfloat16 as verl's hf_cpu rollout in bf16)",
    )
    p.add_argument("--max-questions", type=int, default=None, help="first N questions of each --data file")
    p.add_argument(
        "--retriever",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="gta.retriever knob, repeatable (e.g. --retriever mode=dense for w/o graph retrieval)",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Chunks, concurrency, seed, dump step, labels and output."""
    p.add_argument("--batch-size", type=int, default=16, help="questions per resumable chunk (default 16)")
    p.add_argument("--concurrency", type=int, default=8, help="rollouts in flight (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step", type=int, default=None, help="dump mode: which <step>.jsonl (default latest)")
    p.add_argument(
        "--metrics-log",
        default=None,
        help="training metrics jsonl/CSV with path_router/route_share/* for the route-shares plot",
    )
    p.add_argument("--name", default=None, help="row label of the policy in the tables")
    p.add_argument("--out", default="eval_out", help="output directory (default eval_out)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _data_paths(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _run_dump(args: argparse.Namespace) -> int:
    """``--from-verl-dump``: score the generations verl dumped during training."""
    from gta_verl.eval.verl_dumps import score_verl_dump

    res, report = score_verl_dump(
        args.from_verl_dump,
        args.out,
        step=args.step,
        data_paths=_data_paths(args.data),
        kb_dir=args.kb,
        metrics_log=args.metrics_log,
        name=args.name or "policy",
    )
    print(
        f"scored {len(res.records)} of {res.n_in} dumped rollouts (step {res.step}); "
        f"{len(res.rejected)} rejected" + (f", first: {res.rejected[0]}" if res.rejected else "")
    )
    print(f"report: {report.markdown}")
    return 0 if res.records else 1


def settings_from_args(args: argparse.Namespace, temperature: float | None = None) -> Any:
    """The :class:`~gta_verl.eval.runner.EvalSettings` of ``eval``'s and ``signal``'s rollout arguments."""
    from gta_verl.eval.runner import EvalSettings

    return EvalSettings(
        policy=args.policy,
        backend=args.backend,
        n_samples=args.n_samples,
        temperature=args.temperature if args.temperature is not None else temperature,
        max_actions=args.max_actions,
        max_obs_tokens=args.max_obs_tokens,
        prompt_style=args.prompt_style,
        **{
            k: v
            for k, v in (("prompt_length", args.prompt_length), ("response_length", args.response_length))
            if v is not None
        },
        retriever=dict(args.retriever),
        seed=args.seed,
        sampler=args.sampler,
        dtype=args.dtype,
        gold_evidence=args.gold_evidence,
    )


def _evaluate(args: argparse.Namespace, data: list[str], settings: Any) -> Any:
    from gta_verl.eval.runner import evaluate_policy

    return evaluate_policy(
        args.policy,
        data,
        args.kb,
        out_dir=args.out,
        max_questions=args.max_questions,
        settings=settings,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        metrics_log=args.metrics_log,
        name=args.name,
        progress=not args.no_progress,
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``gta-verl eval``; returns the exit code."""
    if args.from_verl_dump:
        return _run_dump(args)
    data = _data_paths(args.data)
    if not data or not args.kb:
        raise SystemExit("gta-verl eval --policy needs --data PARQUET[,…] and --kb DIR")
    res = _evaluate(args, data, settings_from_args(args))
    o = res.summary.overall
    print(
        f"{res.n_records} rollouts ({res.n_new} new, {res.n_skipped} already done): "
        f"EM {100 * o['em']:.1f}  F1 {100 * o['f1']:.1f}  TargetDocCov {100 * o['target_doc_cov']:.1f}  "
        f"searches/q {o['search_turns']:.2f}"
    )
    print(f"report: {res.report.markdown}")
    return 0


def add_signal_parser(subparsers: Any) -> None:
    """Register ``signal``: the warm start's reward signal on a training pool, before any GRPO run."""
    p = subparsers.add_parser(
        "signal",
        help="measure a policy's GRPO signal on training questions: pass rates, groups whose rewards differ",
        description="Sample --n-samples rollouts per question at T = 1 (the training temperature) through "
        "the agent loop and report, per reward (answer-only, trajectory-guided, coverage bonus): the share "
        "of groups whose rewards are not all equal and the mean |advantage|; the pass rate of the answer and "
        "of each reward term; optionally the questions in a pass-rate window as a training pool. Writes "
        "signal.md and signal.json next to the evaluation's records/ in --out.",
    )
    p.add_argument("--policy", help="HF model path or a policy name (as eval)")
    p.add_argument(
        "--records",
        default=None,
        help="measure an earlier run's records/ directory instead of sampling (no --policy needed)",
    )
    p.add_argument(
        "--window",
        default=None,
        metavar="LO,HI",
        help="keep the questions whose answer pass rate p has LO <= p <= HI (e.g. 0.05,0.95)",
    )
    p.add_argument(
        "--pool-out", default=None, help="with --window: write those questions' rows here (parquet)"
    )
    _add_data_arguments(p)
    _add_rollout_arguments(p)
    _add_run_arguments(p)
    p.set_defaults(func=run_signal, n_samples=8, sampler="batched")


def _window(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--window {text!r}: expected LO,HI such as 0.05,0.95") from None
    return lo, hi


def run_signal(args: argparse.Namespace) -> int:
    """Entry point of ``gta-verl signal``; returns the exit code (1 when no rollout was measured)."""
    import json
    from pathlib import Path

    from gta_verl.data.io import write_text_atomic
    from gta_verl.eval.signal import outcome_from_record, pass_rate_window, render_markdown, signal_report

    data = _data_paths(args.data)
    window = _window(args.window) if args.window else None
    if args.pool_out and not (window and data):
        raise SystemExit("gta-verl signal --pool-out needs --window LO,HI and --data (the rows to keep)")
    if args.records:
        records = Path(args.records)
    else:
        if not (args.policy and data and args.kb):
            raise SystemExit(
                "gta-verl signal needs --policy, --data PARQUET[,…] and --kb DIR (or --records DIR)"
            )
        _evaluate(args, data, settings_from_args(args, temperature=1.0))
        records = Path(args.out) / "records"
    report = signal_report([outcome_from_record(r) for r in _read_records(records)])
    md = render_markdown(report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "records": str(records),
        **report.summary(),
        "questions": [
            {**vars(q), "reward_mean": dict(q.reward_mean), "differs": dict(q.differs)}
            for q in report.questions
        ],
    }
    if window:
        keep = pass_rate_window(report, *window)
        summary["window"] = {"lo": window[0], "hi": window[1], "questions": keep}
        md += f"\n{len(keep)} of {len(report.questions)} questions have {window[0]} <= p <= {window[1]}.\n"
        if args.pool_out:
            n = _write_pool(data, set(keep), Path(args.pool_out))
            md += f"Wrote their {n} rows to {args.pool_out}.\n"
    write_text_atomic(out / "signal.md", md)
    write_text_atomic(out / "signal.json", json.dumps(summary, indent=2))
    print(md, end="")
    return 0


def _read_records(records: Any) -> list[dict[str, Any]]:
    from gta_verl.eval.records import iter_rows

    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in iter_rows(records):  # first occurrence of a (data_source, qid, sample) wins, as read_records
        rows.setdefault((row.get("data_source"), row.get("qid"), row.get("sample_idx")), row)
    if not rows:
        raise SystemExit(f"{records}: no evaluation records to measure")
    return list(rows.values())


def _write_pool(data: list[str], keep: set[str], out: Any) -> int:
    """The rows of ``data`` whose question key is in ``keep``, in file order; returns how many."""
    import pyarrow as pa

    from gta_verl.data.io import write_table_atomic
    from gta_verl.eval.runner import load_rows, row_identity

    rows = [r for r in load_rows(data) if "/".join(row_identity(r)[:2]) in keep]
    write_table_atomic(pa.Table.from_pylist(rows), out)
    return len(rows)
