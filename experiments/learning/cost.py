"""What a GRPO trajectory of the learning runs costs on this machine, per rollout engine.

Usage:
    python -m experiments.learning.cost --out runs/learning_pretrained --precision bf16 --iii-rows 64 \
        --iii-epochs 4 --iii-lr 3e-5 --train-pool runs/learning_pretrained/pool.parquet --n 8 --batch 4 \
        --cost-steps 3 --engines hf_cpu,vllm --condition b

Shares ``--out`` and every option with :mod:`experiments.learning.pretrained` (its KBs, cut policy and warm
start (iii) are reused): each engine in ``--engines`` runs ``--cost-steps`` GRPO steps of ``--condition`` from
(iii) with the learning runs' overrides (:func:`experiments.learning.pretrained.step_overrides`, no
checkpoints), one engine after the other on the same prompts (``data.seed``). The table gives verl's
``timing_s/*`` averaged over the steps after the first (step 1 warms caches), the response tokens per step
and per second of generation, the seconds per trajectory (``timing_s/step`` ÷ ``batch`` × ``n``) and the
hours per 1,000 trajectories, and verl's largest rollout-vs-actor token probability difference
(``training/rollout_probs_diff_max``, logged when bypass mode is off). ``<out>/cost/cost.md`` and
``cost.json`` hold them with the CPU they ran on.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.learning.pretrained import (
    build_iii,
    build_parser,
    prepare,
    resolve_precision,
    rollout_env,
    step_overrides,
)
from experiments.learning.tiny import CONDITIONS

PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "step")


def cost_overrides(args: argparse.Namespace, seed: int) -> tuple[str, ...]:
    """The learning runs' overrides without checkpoints or resuming: a cost run keeps nothing."""
    keep = tuple(
        o
        for o in step_overrides(args, seed)
        if not o.startswith(
            ("trainer.save_freq=", "trainer.resume_mode=", "actor_rollout_ref.actor.checkpoint")
        )
    )
    return (*keep, "trainer.save_freq=-1", "trainer.resume_mode=disable")


def summarize(steps: dict[int, dict[str, float]], rollouts_per_step: int) -> dict[str, float]:
    """Mean of ``timing_s/*`` and response length over the steps after the first, and what they cost.

    ``s_per_trajectory`` = mean ``timing_s/step`` ÷ rollouts per step; ``h_per_1000`` = 1,000 × that ÷ 3,600;
    ``gen_tokens_per_s`` = mean response length × rollouts per step ÷ mean ``timing_s/gen`` (the response
    holds the retrieved observations too, so it over-counts generated tokens equally for every engine).

    Raises:
        ValueError: fewer than two steps (no step after the first to average).
    """
    later = [m for s, m in sorted(steps.items()) if s > 1]
    if not later:
        raise ValueError(f"{len(steps)} step(s) logged: a cost needs a step after the first")
    row = {k: statistics.mean(float(m.get(f"timing_s/{k}", 0.0)) for m in later) for k in PHASES}
    row["response_tokens"] = (
        statistics.mean(float(m["response_length/mean"]) for m in later) * rollouts_per_step
    )
    row["gen_tokens_per_s"] = row["response_tokens"] / row["gen"] if row["gen"] else float("nan")
    row["s_per_trajectory"] = row["step"] / rollouts_per_step
    row["h_per_1000"] = 1000 * row["s_per_trajectory"] / 3600
    row["step1"] = float(steps[min(steps)].get("timing_s/step", float("nan")))
    diffs = [
        float(m["training/rollout_probs_diff_max"])
        for m in steps.values()
        if "training/rollout_probs_diff_max" in m
    ]
    row["diff"] = max(diffs) if diffs else float("nan")
    row["steps_averaged"] = len(later)
    return row


def render(rows: dict[str, dict[str, float]]) -> str:
    """Markdown: seconds per phase, tokens, seconds per trajectory, hours per 1,000 and the ratio to the
    first engine measured in the same invocation."""
    first = next(iter(rows.values()))["step"] if rows else None
    lines = [
        "| engine | gen | old log-prob | ref | update actor | update weights | step "
        "| response tokens / step | tokens / s of gen | s / trajectory | h / 1,000 trajectories "
        "| step / first | step 1 | prob. diff max |",
        "|---|" + "---:|" * 13,
    ]
    for name, r in rows.items():
        cells = [
            f"{r[k]:.1f}" for k in ("gen", "old_log_prob", "ref", "update_actor", "update_weights", "step")
        ]
        cells += [
            f"{r['response_tokens']:.0f}",
            f"{r['gen_tokens_per_s']:.1f}",
            f"{r['s_per_trajectory']:.2f}",
            f"{r['h_per_1000']:.2f}",
            f"{r['step'] / first:.2f}" if first else "–",
            f"{r['step1']:.1f}",
            f"{r['diff']:.1e}",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_engine(name: str) -> tuple[str, int]:
    """``hf_cpu`` | ``vllm``, optionally ``+lora<rank>``: (rollout engine, LoRA rank, 0 for full training).

    >>> parse_engine("vllm+lora16"), parse_engine("hf_cpu")
    (('vllm', 16), ('hf_cpu', 0))
    """
    rollout, _, lora = name.partition("+")
    if rollout not in ("hf_cpu", "vllm") or (lora and not (lora.startswith("lora") and lora[4:].isdigit())):
        raise ValueError(f"engine {name!r}: expected hf_cpu or vllm, optionally +lora<rank> (vllm+lora16)")
    return rollout, int(lora[4:]) if lora else 0


def measure(engine: str, inputs: dict[str, Any], out: Path, args: argparse.Namespace) -> dict[str, float]:
    """``--cost-steps`` GRPO steps of ``--condition`` from (iii) with ``engine`` as the rollout."""
    from gta_verl.cpu.recipe_run import run_cpu_recipe

    rollout, lora_rank = parse_engine(engine)
    # this engine's copy of the settings: every engine starts from the command's, and --cost-steps is the run
    args = argparse.Namespace(
        **{**vars(args), "rollout": rollout, "lora_rank": lora_rank, "steps": args.cost_steps}
    )
    _, recipe, extra = CONDITIONS[args.condition]
    train = str(Path(args.train_pool).resolve() if args.train_pool else inputs["plain"]["train"])
    env = {
        "MODEL_PATH": str(inputs["iii_model"]),
        "KB_DIR": str(inputs["kb"]),
        "STAGE1_TRAIN": train,
        "QA_FILES": train,
        "STEPS": str(args.cost_steps),
        **rollout_env(args),
    }
    overrides = (*cost_overrides(args, args.cost_seed), *extra, *args.override)
    run = run_cpu_recipe(recipe, out / engine, env, overrides, timeout_s=args.timeout)
    if run.returncode != 0:
        raise RuntimeError(f"{engine}: run.sh {recipe} exited {run.returncode}; see {run.log}")
    row = summarize(run.steps, args.batch * args.n)
    row["wall_s"] = run.seconds
    return row


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.machine()`` where there is none)."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    p.description = __doc__
    p.add_argument(
        "--engines",
        default="hf_cpu,vllm",
        help="rollout engines, measured in this order; +lora<rank> trains LoRA adapters (e.g. hf_cpu+lora16)",
    )
    p.add_argument(
        "--cost-steps", type=int, default=3, help="GRPO steps per engine (the first is not averaged)"
    )
    p.add_argument("--cost-seed", type=int, default=0)
    p.add_argument(
        "--override",
        action="append",
        default=[],
        help="an extra Hydra override for every engine (repeatable), e.g. "
        "algorithm.rollout_correction.bypass_mode=false to log the rollout-vs-actor log-prob difference",
    )
    p.add_argument("--tag", default="", help="suffix of the output folder (runs with other --override)")
    p.add_argument("--condition", default="b", choices=sorted(CONDITIONS))
    args = p.parse_args(argv)
    from experiments.learning.cpu_precision import cpu_bf16_flags

    try:
        engines = [e for e in args.engines.split(",") if e and parse_engine(e)]
    except ValueError as exc:
        p.error(str(exc))
    if args.cost_steps < 2:
        p.error("--cost-steps must be ≥ 2: the first step is not averaged")
    if args.iii_rows <= 0:
        p.error("--iii-rows N > 0: the cost is measured from warm start (iii)")
    args.precision = resolve_precision(args.precision, cpu_bf16_flags())
    out = Path(args.out).resolve()
    inputs = prepare(out, args)
    build_iii(inputs, out, args)
    where = out / "cost" / f"{args.condition}_b{args.batch}_n{args.n}_{args.precision}{args.tag}"
    rows: dict[str, dict[str, float]] = {}
    for engine in engines:
        t0 = time.perf_counter()
        rows[engine] = measure(engine, inputs, where, args)
        print(f"{engine} ({time.perf_counter() - t0:.0f} s): {rows[engine]}", flush=True)
        md = render(rows)
        where.mkdir(parents=True, exist_ok=True)
        (where / "cost.md").write_text(md + "\n")
        meta = {"cpu": cpu_model(), "settings": vars(args), "rows": rows}
        (where / "cost.json").write_text(json.dumps(meta, indent=2, default=str))
    head = f"{args.batch} × {args.n} rollouts of ({args.condition}), steps 2–{args.cost_steps}"
    print(f"\n{head}:\n\n{render(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
