"""Where a CPU GRPO step of the learning setting goes, and what the step-cost knobs save.

Usage:
    python -m experiments.learning.step_cost [--warm-start DIR] [--batch 8] [--n 4] [--steps 3]
                                   [--variants base,threads,bypass,nopad]

Each variant is one ``recipes/cpu/run.sh gta_stage1`` run (stock ``main_ppo``, ``hf_cpu``, our Ray retriever)
from the same warm start on the same RL questions with ``grpo_overrides`` plus the variant's overrides; the
table gives verl's ``timing_s/*`` averaged over the steps after the first (start-up warms there) and each
step's ratio to ``base`` measured in the same invocation:

* ``base``: the learning runs' settings;
* ``threads``: ``OMP_NUM_THREADS=2`` in every Ray worker (``experiments.learning.tiny --torch-threads 2``);
* ``bypass``: ``threads`` + verl's ``algorithm.rollout_correction.bypass_mode`` (``--bypass-old-logprob``);
* ``nopad``: ``threads`` + ``actor_rollout_ref.model.use_remove_padding=true``.

``--warm-start`` is a warm-start root (``model/``, ``stage1_rl.parquet`` or ``stage1_train.parquet``), e.g.
experiment 4's under ``$GTA_VERL_CACHE/warm_start/``; by default the quick warm start (built on first use).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from experiments.learning.tiny import speed_overrides

KEYS = ("gen", "old_log_prob", "ref", "update_actor", "step")
VARIANTS = {
    "base": argparse.Namespace(torch_threads=0, bypass_old_logprob=False),
    "threads": argparse.Namespace(torch_threads=2, bypass_old_logprob=False),
    "bypass": argparse.Namespace(torch_threads=2, bypass_old_logprob=True),
    "nopad": argparse.Namespace(torch_threads=2, bypass_old_logprob=False),
}
EXTRA = {"nopad": ("actor_rollout_ref.model.use_remove_padding=true",)}


def _inputs(warm_start: str | None) -> tuple[Path, Path, Path]:
    """(KB, model, GRPO questions) of the warm start."""
    from gta_verl.cpu.prepare import default_root, ensure_kb
    from gta_verl.cpu.warm_start import QUICK, build_warm_start

    kb = ensure_kb(default_root() / "kb_musique")
    if warm_start is None:
        ws = build_warm_start(kb, settings=QUICK)
        return kb, ws.model, ws.train
    root = Path(warm_start)
    rl = root / "stage1_rl.parquet"
    return kb, root / "model", rl if rl.is_file() else root / "stage1_train.parquet"


def measure(
    variant: str, kb: Path, model: Path, questions: Path, args: argparse.Namespace
) -> dict[str, float]:
    """verl's mean ``timing_s/*`` over steps 2…N of one run, plus its largest rollout-vs-actor diff."""
    from gta_verl.cpu.recipe_run import run_cpu_recipe
    from gta_verl.cpu.warm_start import grpo_overrides

    env = {
        "MODEL_PATH": str(model),
        "KB_DIR": str(kb),
        "STAGE1_TRAIN": str(questions),
        "QA_FILES": str(questions),
        "STEPS": str(args.steps),
    }
    base = tuple(o for o in grpo_overrides(args.steps, 0, 5e-4, args.n, args.batch) if "save_" not in o)
    overrides = (*base, "trainer.save_freq=-1", *speed_overrides(VARIANTS[variant]), *EXTRA.get(variant, ()))
    run = run_cpu_recipe("gta_stage1", Path(args.out) / variant, env, overrides, timeout_s=args.timeout)
    if run.returncode != 0 or len(run.steps) < 2:
        raise RuntimeError(
            f"{variant}: run.sh exited {run.returncode} after {len(run.steps)} steps; see {run.log}"
        )
    later = [m for s, m in sorted(run.steps.items()) if s > 1]
    row = {k: statistics.mean(m.get(f"timing_s/{k}", 0.0) for m in later) for k in KEYS}
    diffs = [
        m["training/rollout_probs_diff_max"]
        for m in run.steps.values()
        if "training/rollout_probs_diff_max" in m
    ]
    row["diff"] = max(diffs) if diffs else float("nan")
    return row


def table(rows: dict[str, dict[str, float]]) -> str:
    """Markdown: seconds per phase, the step's ratio to ``base`` and the log-prob diff."""
    ref = rows.get("base", {}).get("step")
    lines = [
        "| variant | gen | old log-prob | ref | update | step | step / base | rollout vs actor diff |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        ratio = f"{r['step'] / ref:.2f}" if ref else "–"
        cells = " | ".join(f"{r[k]:.1f}" for k in KEYS)
        lines.append(f"| {name} | {cells} | {ratio} | {r['diff']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warm-start", default=None, help="warm-start root (default: the quick warm start)")
    p.add_argument("--batch", type=int, default=8, help="prompts per step")
    p.add_argument("--n", type=int, default=4, help="rollouts per prompt")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--variants", default="base,threads,bypass,nopad")
    p.add_argument("--out", default="/tmp/gta_verl_step_cost")
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variants {sorted(unknown)}; valid: {', '.join(VARIANTS)}")
    kb, model, questions = _inputs(args.warm_start)
    rows = {}
    for v in args.variants.split(","):
        rows[v] = measure(v, kb, model, questions, args)
        print(f"{v}: {rows[v]}", flush=True)
    print(f"\n{args.batch} × {args.n} rollouts, steps 2–{args.steps} (seconds, verl timing_s):\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
