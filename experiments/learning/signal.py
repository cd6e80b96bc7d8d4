"""Signal before compute: which warm start gives GRPO groups whose rewards differ on its training pool?

Usage:
    python -m experiments.learning.signal --out runs/learning_pretrained --precision bf16 --sft-steps 40 \
        --pool 24 --signal-n 8 --iii-rows 128 --iii-epochs 3 --iii-lr 2e-5 --eval-questions 48

Shares ``--out`` with :mod:`experiments.learning.pretrained` (its KBs, question split, cut policy and warm
start (ii) are reused, not rebuilt), then:

1. warm start (iii): verl SFT of the cut policy on the τ* replays of the first ``--iii-rows`` training
   questions for ``--iii-epochs`` epochs at ``--iii-lr`` (the training pool's questions seen several times,
   so the policy answers some of them: the answer reward can fire), evaluated greedy on the held-out sets;
2. each warm start's signal on the first ``--pool`` training questions (inside every warm start's SFT rows):
   ``--signal-n`` rollouts per question at T = 1, batched like verl's ``hf_cpu`` rollout
   (:mod:`gta_verl.eval.signal`: pass rates, the share of groups whose rewards differ for (a), (b), (e), the
   mean |advantage|, the expected share by group size);
3. ``<out>/signal_table.md`` and ``signal_results.json``: one row per warm start — training pass rate, groups
   that differ, held-out EM and TargetDocCov on the three sets.

Every step is cached under ``--out``; a rerun measures only what is missing.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.learning.pretrained import (
    MAX_OBS_TOKENS,
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    build_ii,
    build_iii,
    build_parser,
    evaluate,
    iii_dir,
    precision_tag,
    prepare,
    resolve_precision,
)
from experiments.learning.publish import SETS


def measure_signal(
    name: str, policy: Path, inputs: dict[str, Any], out: Path, args: argparse.Namespace
) -> Any:
    """``--signal-n`` rollouts at T = 1 of each of the first ``--pool`` training questions, measured."""
    from gta_verl.eval.records import iter_rows
    from gta_verl.eval.runner import EvalSettings, evaluate_policy
    from gta_verl.eval.signal import outcome_from_record, signal_report

    settings = EvalSettings(
        policy=str(policy),
        n_samples=args.signal_n,
        temperature=1.0,
        max_obs_tokens=MAX_OBS_TOKENS,
        prompt_length=PROMPT_LENGTH,
        response_length=RESPONSE_LENGTH,
        seed=args.signal_seed,
        sampler="batched",
        # as the GRPO runs' hf_cpu rollout generates (precision_overrides: bfloat16 in bf16 runs)
        dtype="bfloat16" if args.precision == "bf16" else "float32",
    )
    where = out / "signal" / f"{name}_p{args.pool}_n{args.signal_n}_s{args.signal_seed}_{args.precision}"
    t0 = time.perf_counter()
    res = evaluate_policy(
        name,
        [inputs["plain"]["train"]],
        inputs["kb"],
        out_dir=where,
        max_questions=args.pool,
        settings=settings,
        batch_size=args.pool,
        concurrency=64,
    )
    print(f"signal of {name}: {res.n_new} new rollouts in {time.perf_counter() - t0:.0f} s", flush=True)
    return signal_report([outcome_from_record(r) for r in iter_rows(res.records_dir)])


def row(name: str, report: Any, held: dict[str, dict]) -> str:
    by = {r.key: r for r in report.rewards}
    cells = [
        name,
        f"{report.pass_rate:.3f}",
        f"{report.pass_rate_histogram()['0 < p < 1']}/{len(report.questions)}",
        f"{by['a'].share_differ:.3f}",
        f"{by['b'].share_differ:.3f}",
        f"{by['a'].mean_abs_adv:.3f}",
        f"{by['b'].mean_abs_adv:.3f}",
        f"{report.term_rates()['searches / rollout']:.2f}",
        *(
            f"{float(held[k]['em']):.3f} / {float(held[k]['target_doc_cov']):.3f}" if k in held else "–"
            for k in SETS
        ),
    ]
    return "| " + " | ".join(cells) + " |"


def table(rows: list[str], args: argparse.Namespace) -> str:
    head = [
        "warm start",
        "train EM at T = 1",
        "questions 0 < p < 1",
        f"(a) groups of {args.signal_n} differ",
        f"(b) groups of {args.signal_n} differ",
        "(a) mean abs A",
        "(b) mean abs A",
        "searches / rollout",
        *(f"{k} held-out EM / TargetDocCov" for k in SETS),
    ]
    return "\n".join(["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1), *rows])


def warm_start_builders(args: argparse.Namespace) -> dict[str, tuple[str, Callable[..., Path]]]:
    """Each warm start's row label and the function that builds it under ``--out``."""
    return {
        "ii": (f"(ii) SFT {args.sft_steps} steps on {args.sft_rows} replays, lr {args.sft_lr:g}", build_ii),
        "iii": (
            f"(iii) SFT {args.iii_epochs} epochs on {args.iii_rows} replays, lr {args.iii_lr:g}",
            build_iii,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    p.description = __doc__
    p.add_argument("--pool", type=int, default=24, help="first N training questions measured")
    p.add_argument("--signal-n", type=int, default=8, help="rollouts per question (a GRPO group)")
    p.add_argument("--signal-seed", type=int, default=0)
    p.add_argument("--warm-starts", default="ii,iii", help="which warm starts to measure")
    p.add_argument(
        "--heldout-of",
        default="ii,iii",
        help="which warm starts to evaluate on the held-out sets (a published one can be left out)",
    )
    args = p.parse_args(argv)
    from experiments.learning.cpu_precision import cpu_bf16_flags
    from gta_verl.eval.signal import render_markdown

    args.precision = resolve_precision(args.precision, cpu_bf16_flags())
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    inputs = prepare(out, args)
    inputs["tag"] = precision_tag(args.precision)
    want = [w for w in args.warm_starts.split(",") if w]
    results: dict[str, Any] = {"settings": vars(args)}
    # Each warm start's signal as soon as it is built, the held-out evaluations last: the gate decides.
    builders = warm_start_builders(args)
    models: dict[str, tuple[str, Path, Path]] = {}
    reports: dict[str, Any] = {}
    for k in want:
        label, build = builders[k]
        model = build(inputs, out, args)
        prefix = out / "eval" / f"{inputs['tag']}sft_" if k == "ii" else iii_dir(out, args) / "eval_"
        models[k] = (label, model, prefix)
        reports[k] = measure_signal(k if k == "ii" else iii_dir(out, args).name, model, inputs, out, args)
        print(render_markdown(reports[k]), flush=True)
    rows = []
    for k, (label, model, prefix) in models.items():
        held = {
            key: evaluate(
                str(model), data, kb, Path(f"{prefix}{key}"), args.eval_questions, "sft" if k == "ii" else k
            )
            for key, (data, kb) in inputs["plain"]["sets"].items()
            if k in args.heldout_of.split(",")
        }
        rows.append(row(label, reports[k], held))
        results[k] = {"model": str(model), "held_out": held, "signal": _summary(reports[k])}
    md = table(rows, args)
    (out / "signal_table.md").write_text(md + "\n")
    (out / "signal_results.json").write_text(json.dumps(results, indent=2, default=str))
    print(md)
    return 0


def _summary(rep: Any) -> dict[str, Any]:
    return {**rep.summary(), "pass_rates": {q.group: q.pass_rate for q in rep.questions}}


if __name__ == "__main__":
    raise SystemExit(main())
