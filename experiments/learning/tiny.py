"""GTA-RAG Table 3 in miniature on CPU: does the trajectory-guided reward teach evidence retrieval?

Usage:
    python -m experiments.learning.tiny [--out runs/learning] [--steps 30] [--seeds-ab 0,1,2] [--seeds-cd 0]
                                     [--conditions a,b,c,d,e] [--eval-questions 64]

1. KB: the bundled MuSiQue KB (built once, cached like the CPU recipes' inputs).
2. Warm start (:mod:`gta_verl.cpu.warm_start`, cached): Stage-I questions split so that no held-out question
   shares a target document with a training one; a 4,096-token corpus BPE and a 4.2 M-parameter Qwen2 trained
   by verl's own SFT trainer on τ* replays.
3. Reference rows on the held-out split through ``gta-verl eval``'s runner: the untrained policy, the warm
   start, the oracle replay of τ*.
4. GRPO from the warm start through ``recipes/cpu/run.sh`` (stock ``main_ppo``, ``hf_cpu``, our Ray
   retriever): (a) answer-only reward on Stage-I data (GTA's "w/o TGR"), (b) trajectory-guided reward,
   (c) PathRouter, (d) GTA + PathRouter, (e) the trajectory-guided reward with the coverage bonus spread
   over turns (``gta.reward.step_shaping=coverage_bonus``); the same data order per seed (``data.seed``)
   across conditions.
5. Each final checkpoint evaluated on the held-out split; ``<out>/table.md`` gets the Table-3-layout table
   (mean ± std over seeds), the learning-curve PNG and the settings; per-step metrics stay in ``<out>/runs/``.

Resumable: a run with ``done.json`` is not redone; an evaluation with its records is not redone;
``--report-only`` writes the tables and curves from the finished runs without starting another.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from experiments.learning.args import build_parser

CONDITIONS = {
    "a": ("answer-only (w/o TGR)", "gta_stage1", ("reward.reward_manager.name=exact_match",)),
    "b": ("trajectory-guided (GTA Stage I)", "gta_stage1", ()),
    "c": ("PathRouter", "path_router", ()),
    "d": ("GTA + PathRouter", "gta_path_router", ()),
    "e": (
        "trajectory-guided, coverage bonus over turns",
        "gta_stage1",
        ("gta.reward.step_shaping=coverage_bonus",),
    ),
    # The control: (b)'s rewards shuffled within each group before GRPO (gta_verl.algos.shuffled_control).
    "r": (
        "trajectory-guided, rewards shuffled within each group (control)",
        "gta_stage1",
        ("algorithm.adv_estimator=gta_shuffled_grpo",),
    ),
}
METRICS = (
    ("em", "EM"),
    ("f1", "F1"),
    ("target_doc_cov", "TargetDocCov"),
    ("complete_traj_cov", "CompleteTrajCov"),
    ("zero_target_turns_per_q", "zero-target turns/q"),
    ("search_turns", "search turns"),
    ("answered", "answered"),
    ("uar", "UAR"),
)
CURVES = (
    ("critic/score/mean", "training reward"),
    ("gta/target_doc_cov", "gta/target_doc_cov"),
    ("gta/acc", "gta/acc"),
    ("gta/num_searches", "gta/num_searches"),
    ("gta/invalid_actions", "gta/invalid_actions"),
)


def evaluate(
    policy: str,
    data: Path,
    kb: Path,
    out: Path,
    n: int | None,
    name: str,
    server_manager: Any = None,
    tokenizer: Any = None,
    samples: int = 1,
) -> dict[str, float]:
    """``policy`` on ``data``: greedy, or ``samples`` rollouts per question at temperature 1 (avg@samples,
    the policy GRPO optimizes)."""
    from gta_verl.cpu.sft_data import MAX_OBS_TOKENS, PROMPT_LENGTH, RESPONSE_LENGTH
    from gta_verl.eval.runner import EvalSettings, evaluate_policy

    settings = EvalSettings(
        policy=policy,
        n_samples=samples,
        temperature=1.0 if samples > 1 else None,
        max_obs_tokens=MAX_OBS_TOKENS,
        prompt_length=PROMPT_LENGTH,
        response_length=RESPONSE_LENGTH,
    )
    # 32 rollouts in flight: the HF server batches concurrent turns (greedy rows equal the one-by-one result).
    res = evaluate_policy(
        name,
        [data],
        kb,
        out_dir=out,
        max_questions=n,
        settings=settings,
        server_manager=server_manager,
        tokenizer=tokenizer,
        batch_size=32,
        concurrency=32,
    )
    return dict(res.summary.overall)


def oracle(ws: Any, kb: Path, out: Path, n: int | None) -> dict[str, float]:
    import pandas as pd
    from transformers import AutoTokenizer

    from gta_verl.agent.backends import ScriptedServerManager
    from gta_verl.eval.replay import reference_scripts

    tok = AutoTokenizer.from_pretrained(str(ws.model))
    rows = pd.read_parquet(ws.heldout).to_dict("records")[:n]
    return evaluate(
        "reference-replay",
        ws.heldout,
        kb,
        out,
        n,
        "reference-replay",
        ScriptedServerManager(tok, reference_scripts(rows)),
        tok,
    )


def _bundled_musique_qa(data_dir: Path) -> Path:
    """The bundled 100 MuSiQue questions as a verl QA parquet (written once)."""
    from gta_verl.data.prep import prepare_musique

    qa = data_dir / "musique_train.parquet"
    return qa if qa.is_file() else Path(prepare_musique(data_dir, verbose=False)["qa"])


def speed_overrides(args: argparse.Namespace) -> tuple[str, ...]:
    """Overrides of ``--torch-threads`` and ``--bypass-old-logprob``.

    Measured in experiments/learning/results/README.md, Step cost.
    """
    from gta_verl.cpu.warm_start import step_cost_overrides

    return step_cost_overrides(args.torch_threads or 0, bool(args.bypass_old_logprob))


def algo_overrides(args: argparse.Namespace) -> tuple[str, ...]:
    """Overrides of ``--adam-eps``, ``--no-std-norm`` and ``--kl-coef``.

    Measured in experiments/learning/results/README.md, experiment 8.
    """
    from gta_verl.cpu.warm_start import grpo_algo_overrides

    return grpo_algo_overrides(args.adam_eps, not args.no_std_norm, args.kl_coef)


def rl_questions(ws: Any, out: Path, args: argparse.Namespace) -> Path:
    """GRPO's prompts: the warm start's RL split, its first ``--rl-questions`` questions, or (with
    ``--select-spread M``) the ``--rl-questions`` of its first M whose warm-start rollouts spread most."""
    n = args.rl_questions
    if not n:
        return Path(ws.rl_questions)
    if args.select_spread:
        from experiments.learning.spread import select_spread_questions
        from gta_verl.cpu.sft_data import MAX_OBS_TOKENS, PROMPT_LENGTH, RESPONSE_LENGTH

        tag = "" if args.select_score == "proxy" else f"_{args.select_score}"  # proxy: experiment 8's dirs
        return select_spread_questions(
            ws.model,
            ws.rl_questions,
            args.kb_dir,
            out / f"rl_spread_{n}_of_{args.select_spread}{tag}",
            n,
            args.n,
            pool=args.select_spread,
            max_obs_tokens=MAX_OBS_TOKENS,
            prompt_length=PROMPT_LENGTH,
            response_length=RESPONSE_LENGTH,
            score=args.select_score,
        )
    import pandas as pd

    path = out / f"rl_questions_{n}.parquet"
    if not path.is_file():
        out.mkdir(parents=True, exist_ok=True)
        pd.read_parquet(ws.rl_questions).head(n).to_parquet(path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    return path


def train_table(ws: Any, kb: Path, out: Path, args: argparse.Namespace, results: list[dict]) -> str:
    """The warm start and every checkpoint on GRPO's own ``--rl-questions`` prompts (greedy)."""
    rl = rl_questions(ws, out, args)
    warm = evaluate(
        str(ws.model),
        rl,
        kb,
        out / "eval" / "warm_start_train",
        None,
        "warm_start",
        samples=args.train_samples,
    )
    rows = [("warm start (verl SFT on τ* replays)", [warm])] + [
        (f"({c}) {CONDITIONS[c][0]}", [r["train"] for r in results if r["condition"] == c and "train" in r])
        for c in args.conditions.split(",")
    ]
    visits = args.steps * args.batch / args.rl_questions
    which = (
        f"the {args.rl_questions} of the first {args.select_spread} RL questions whose warm-start rollouts "
        f"spread most ({args.select_score} score)"
        if args.select_spread
        else f"the first {args.rl_questions} RL questions"
    )
    how = f"{args.train_samples} rollouts each at T = 1" if args.train_samples > 1 else "greedy"
    return f"GRPO's own training questions ({which}, each a prompt ≈ {visits:.0f} times; {how}):\n\n" + table(
        rows
    )


def run_condition(
    cond: str, seed: int, ws: Any, kb: Path, out: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Train (cond, seed) unless ``done.json`` records it, then add the evaluations it lacks."""
    from gta_verl.cpu.recipe_run import run_cpu_recipe
    from gta_verl.cpu.warm_start import checkpoint_dir, grpo_overrides

    run_dir = out / "runs" / f"{cond}_s{seed}"
    done = run_dir / "done.json"
    rl = rl_questions(ws, out, args)
    if done.is_file():
        result = json.loads(done.read_text())
    else:
        label, recipe, extra = CONDITIONS[cond]
        env = {
            "MODEL_PATH": str(ws.model),
            "KB_DIR": str(kb),
            "STAGE1_TRAIN": str(rl),
            "QA_FILES": str(rl),
            "STEPS": str(args.steps),
        }
        overrides = (
            grpo_overrides(args.steps, seed, args.lr, args.n, args.batch)
            + extra
            + speed_overrides(args)
            + algo_overrides(args)
        )
        run = run_cpu_recipe(recipe, run_dir, env, overrides, timeout_s=args.timeout)
        if run.returncode != 0:
            raise RuntimeError(f"{cond} seed {seed}: run.sh {recipe} exited {run.returncode}; see {run.log}")
        result = {
            "condition": cond,
            "seed": seed,
            "seconds": run.seconds,
            "metrics": str(run_dir / "metrics.jsonl"),
            "rl_questions": str(rl),
        }
    tag = f"{cond}_s{seed}"
    # An evaluation added to the command later (--real-qa, --train-samples) runs on the kept checkpoint.
    todo = [("heldout", ws.heldout, args.eval_questions, 1)]
    if args.rl_questions:
        todo.append(("train", rl, None, args.train_samples))
    if args.real_qa:
        todo.append(("real", Path(args.real_qa), None, 1))
    todo = [t for t in todo if t[0] not in result]
    if todo or not done.is_file():
        ckpt = str(checkpoint_dir(run_dir, args.steps)) if todo else ""  # FileNotFoundError names it if gone
        for key, questions, limit, samples in todo:
            result[key] = evaluate(ckpt, questions, kb, run_dir / f"eval_{key}", limit, tag, samples=samples)
        tmp = done.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2))
        tmp.replace(done)
    return result


#: Conditions run over ``--seeds-ab``: the two rewards compared and the shuffled-reward control.
SEEDED_LIKE_AB = ("a", "b", "r")


def run_order(conditions: list[str], seeds_ab: str, seeds_cd: str) -> list[tuple[str, int]]:
    """Seed-major order (a0, b0, c0, d0, a1, b1, …): a cut-short experiment still has every condition.

    (a), (b) and the control (r) take ``seeds_ab`` (the comparison needs their spread); others ``seeds_cd``.
    """
    seeds = {
        c: [int(x) for x in (seeds_ab if c in SEEDED_LIKE_AB else seeds_cd).split(",") if x]
        for c in conditions
    }
    depth = max((len(v) for v in seeds.values()), default=0)
    return [(c, seeds[c][k]) for k in range(depth) for c in conditions if k < len(seeds[c])]


def _mean_std(values: list[float]) -> str:
    values = [float(v) for v in values if v == v]  # NaN (e.g. UAR with no correct answer) is "not defined"
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def table(rows: list[tuple[str, list[dict[str, float]]]]) -> str:
    head = "| policy | seeds | " + " | ".join(t for _, t in METRICS) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(METRICS)]
    for label, runs in rows:
        cells = [_mean_std([r[k] for r in runs if k in r]) for k, _ in METRICS]
        lines.append(f"| {label} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curve_summary(results: list[dict[str, Any]], first: int = 3, last: int = 3) -> str:
    """Training-time metrics: mean of the first and of the last ``first``/``last`` steps, mean ± std over
    seeds."""
    from gta_verl.cpu.recipe_run import read_step_metrics

    head = "| condition | seeds | " + " | ".join(f"{t} first {first} → last {last}" for _, t in CURVES) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(CURVES)]
    for cond in sorted({r["condition"] for r in results}):
        runs = [read_step_metrics(Path(r["metrics"])) for r in results if r["condition"] == cond]
        cells = []
        for key, _ in CURVES:
            early, late = [], []
            for run in runs:
                vals = [run[s][key] for s in sorted(run) if key in run[s]]
                if vals:
                    early.append(statistics.mean(vals[:first]))
                    late.append(statistics.mean(vals[-last:]))
            cells.append(f"{_mean_std(early)} → {_mean_std(late)}")
        lines.append(f"| ({cond}) {CONDITIONS[cond][0]} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


TIMINGS = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "step")


def step_cost(results: list[dict[str, Any]]) -> str:
    """verl's ``timing_s/*`` per step, median over every step of every run (step 1 included)."""
    from gta_verl.cpu.recipe_run import read_step_metrics

    per: dict[str, list[float]] = {k: [] for k in TIMINGS}
    for r in results:
        for m in read_step_metrics(Path(r["metrics"])).values():
            for k in TIMINGS:
                if f"timing_s/{k}" in m:
                    per[k].append(float(m[f"timing_s/{k}"]))
    head = "| " + " | ".join(TIMINGS) + " |"
    cells = [f"{statistics.median(v):.1f}" if v else "–" for v in per.values()]
    n = len(per["step"])
    return f"{head}\n|" + "---:|" * len(TIMINGS) + "\n| " + " | ".join(cells) + f" |\n\n({n} steps, seconds)"


def plot_curves(results: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from gta_verl.cpu.recipe_run import read_step_metrics

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.6))
    for cond in sorted({r["condition"] for r in results}):
        runs = [read_step_metrics(Path(r["metrics"])) for r in results if r["condition"] == cond]
        for ax, (key, title) in zip(axes, CURVES, strict=True):
            steps = sorted(set.intersection(*[{s for s, m in run.items() if key in m} for run in runs]))
            if not steps:
                continue
            vals = np.array([[run[s][key] for s in steps] for run in runs])
            mean = vals.mean(axis=0)
            ax.plot(steps, mean, label=f"({cond}) {CONDITIONS[cond][0]}")
            if len(runs) > 1:
                ax.fill_between(steps, vals.min(axis=0), vals.max(axis=0), alpha=0.2)
            ax.set_title(title)
            ax.set_xlabel("GRPO step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _warm_start(args: argparse.Namespace, kb: Path) -> Any:
    """The warm start of the run's settings (built once, cached)."""
    from gta_verl.cpu.warm_start import QUICK, SFTSettings, build_warm_start

    t0 = time.perf_counter()
    settings = (
        dataclasses.replace(QUICK, steps=args.sft_steps)
        if args.quick
        else SFTSettings(
            n_paths=args.n_paths,
            steps=args.sft_steps,
            rl_fraction=args.rl_fraction,
            split=args.split,
            heldout_fraction=args.heldout_fraction,
            val_rows=args.sft_val_rows,
        )
    )
    ws = build_warm_start(kb, args.warm_start_root, settings=settings)
    print(f"warm start: {ws.model} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return ws


Rows = list[tuple[str, list[dict[str, float]]]]


def _reference_rows(ws: Any, kb: Path, out: Path, args: argparse.Namespace) -> tuple[Rows, Rows]:
    """The untrained policy, the warm start and the oracle on the held-out split; the first two on real QA."""
    n = args.eval_questions
    # A random policy never stops before the response budget (≈ 2.6 s a rollout here) and scores 0: a few
    # dozen questions show that as well as all of them.
    n_untrained = min(n or args.untrained_questions, args.untrained_questions)
    untrained = f"untrained (random init, corpus BPE; first {n_untrained} questions)"
    warm = "warm start (verl SFT on τ* replays)"

    def policy(path: Path, data: Path, name: str, n_q: int | None, kind: str) -> list[dict[str, float]]:
        return [evaluate(str(path), data, kb, out / "eval" / name, n_q, kind)]

    ref_rows: Rows = [
        (untrained, policy(ws.init_model, ws.heldout, "untrained", n_untrained, "untrained")),
        (warm, policy(ws.model, ws.heldout, "warm_start", n, "warm_start")),
        ("oracle replay of τ*", [oracle(ws, kb, out / "eval" / "oracle", n)]),
    ]
    real_rows: Rows = []
    if args.real_qa:
        real = Path(args.real_qa)
        real_rows = [
            (untrained, policy(ws.init_model, real, "untrained_real", n_untrained, "untrained")),
            (warm, policy(ws.model, real, "warm_start_real", None, "warm_start")),
        ]
    return ref_rows, real_rows


def _run_all(ws: Any, kb: Path, out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every condition × seed in run order; with ``--report-only`` the finished ones only."""
    results = []
    for cond, seed in run_order(args.conditions.split(","), args.seeds_ab, args.seeds_cd):
        if args.report_only and not (out / "runs" / f"{cond}_s{seed}" / "done.json").is_file():
            print(f"run ({cond}) seed {seed}: not finished, left out of the report", flush=True)
            continue
        print(f"run ({cond}) seed {seed}", flush=True)
        results.append(run_condition(cond, seed, ws, kb, out, args))
    return results


def _condition_rows(conditions: list[str], results: list[dict[str, Any]], key: str) -> Rows:
    return [
        (f"({c}) {CONDITIONS[c][0]}", [r[key] for r in results if r["condition"] == c and key in r])
        for c in conditions
    ]


def _write_report(
    ws: Any, kb: Path, out: Path, args: argparse.Namespace, refs: tuple[Rows, Rows], results: list[dict]
) -> str:
    """``results.json``, ``table.md`` and ``learning_curves.png`` under ``out``; returns the markdown."""
    ref_rows, real_rows = refs
    conditions = args.conditions.split(",")
    report = {
        "settings": vars(args),
        "warm_start": json.loads((ws.root / "warm_start.json").read_text()),
        "reference": {k: v for k, v in ref_rows},
        "reference_real": {k: v for k, v in real_rows},
        "runs": results,
    }
    (out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    md = "Held-out synthetic questions:\n\n" + table(
        ref_rows + _condition_rows(conditions, results, "heldout")
    )
    if real_rows:
        real_cond = _condition_rows(conditions, results, "real")
        md += "\n\nReal MuSiQue questions (the bundled 100):\n\n" + table(real_rows + real_cond)
    if args.rl_questions:
        md += "\n\n" + train_table(ws, kb, out, args, results)
    if results:
        plot_curves(results, out / "learning_curves.png")
        md += "\n\nTraining (rollouts on the GRPO prompts):\n\n" + curve_summary(results)
        md += "\n\nStep cost (verl timing_s, median):\n\n" + step_cost(results)
    (out / "table.md").write_text(md + "\n")
    return md


def main(argv: list[str] | None = None) -> int:
    args = build_parser(__doc__).parse_args(argv)

    from gta_verl.cpu.prepare import default_root, ensure_kb

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    kb = Path(args.kb).resolve() if args.kb else ensure_kb(default_root() / "kb_musique")
    args.kb_dir = kb
    if args.real_qa == "bundled":
        args.real_qa = str(_bundled_musique_qa(default_root() / "data"))
    ws = _warm_start(args, kb)
    refs = _reference_rows(ws, kb, out, args)
    results = _run_all(ws, kb, out, args)
    print(_write_report(ws, kb, out, args, refs, results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
