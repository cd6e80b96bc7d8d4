"""What the pretrained-policy experiment's page cites: each run's training summary from its verl step log,
and the copy of the outputs into the docs (:func:`publish`), so a lost ``--out`` folder loses no number."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETS = ("synthetic", "musique", "hotpotqa")


def publish(out: Path, dest: Path, results: list[dict], repo: Path = REPO, tag: str = "") -> list[Path]:
    """Copy what the docs cite from ``out`` into ``dest`` (inside ``repo``) and return the files written.

    ``table.md``, ``learning_curves.png``, the SFT warm start's ``policy_sft.json``; per finished run its
    merged step log as ``runs/<name>/metrics.jsonl`` and each held-out set's ``report.json`` as
    ``runs/<name>/eval_<set>.report.json``; ``results.json`` with every run's ``metrics`` naming its published
    step log relative to ``repo``, so the page's numbers survive the loss of ``out`` (weights never copied).
    ``tag`` names the precision's SFT folder (``benchmarks.learning_pretrained.precision_tag``).
    """
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(src: Path, dst: Path) -> None:
        src = src if src.is_absolute() else repo / src
        if src.is_file() and src.resolve() != dst.resolve():  # a run restored from ``dest`` is there already
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            written.append(dst)

    for name in ("table.md", "learning_curves.png"):
        put(out / name, dest / name)
    put(out / f"{tag}sft" / "policy_sft.json", dest / "policy_sft.json")
    summary = json.loads((out / "results.json").read_text())
    runs = []
    for r in results:
        name = Path(r["metrics"]).parent.name  # runs/<name>/metrics.all.jsonl, or a published runs/<name>/…
        pub = dest / "runs" / name
        put(Path(r["metrics"]), pub / "metrics.jsonl")
        for key in SETS:
            put(out / "runs" / name / f"eval_{key}" / "report.json", pub / f"eval_{key}.report.json")
        runs.append({**r, "metrics": str((pub / "metrics.jsonl").resolve().relative_to(repo.resolve()))})
    summary["runs"] = runs
    tmp = dest / "results.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    tmp.replace(dest / "results.json")
    return [*written, dest / "results.json"]


def _mean(vals: list[float]) -> float:
    return sum(vals) / len(vals) if vals else float("nan")


def run_row(steps: dict[int, dict[str, float]]) -> dict[str, float]:
    """One run's training summary from its verl step metrics (``step → {metric: value}``).

    Searches per rollout and mean reward over the first and the last three steps; the steps where some
    rollout answered correctly (``gta/acc`` > 0) and where GRPO had anything to follow (advantages not all
    zero: ``critic/advantages/max`` ≠ ``min``); the median step seconds.
    """
    order = sorted(steps)
    col = {
        k: [float(steps[s][k]) for s in order if k in steps[s]]
        for k in ("gta/num_searches", "critic/score/mean")
    }
    secs = [float(steps[s]["timing_s/step"]) for s in order if "timing_s/step" in steps[s]]
    adv = [
        s
        for s in order
        if steps[s].get("critic/advantages/max", 0.0) != steps[s].get("critic/advantages/min", 0.0)
    ]
    return {
        "steps": float(len(order)),
        "searches_first3": _mean(col["gta/num_searches"][:3]),
        "searches_last3": _mean(col["gta/num_searches"][-3:]),
        "reward_first3": _mean(col["critic/score/mean"][:3]),
        "reward_last3": _mean(col["critic/score/mean"][-3:]),
        "acc_steps": float(sum(1 for s in order if steps[s].get("gta/acc", 0.0) > 0)),
        "advantage_steps": float(len(adv)),
        "median_step_s": statistics.median(secs) if secs else float("nan"),
    }


def run_table(results: list[dict]) -> str:
    """Per finished run: training wall time, :func:`run_row`'s summary, held-out TargetDocCov per set."""
    from gta_verl.cpu.recipe_run import read_step_metrics

    head = (
        "| run | training s | steps | searches/rollout first 3 → last 3 | reward first 3 → last 3 "
        "| steps with a correct answer | steps with non-zero advantages | median step s | "
        + " | ".join(f"{k} TargetDocCov" for k in SETS)
        + " |"
    )
    lines = [head, "|---|" + "---:|" * (7 + len(SETS))]
    for r in sorted(results, key=lambda r: (r["condition"], r["seed"])):
        row = run_row(read_step_metrics(Path(r["metrics"])))
        cov = [f"{r[k]['target_doc_cov']:.3f}" if k in r else "–" for k in SETS]
        lines.append(
            f"| ({r['condition']}) s{r['seed']} | {r['seconds']:.0f} | {row['steps']:.0f} "
            f"| {row['searches_first3']:.2f} → {row['searches_last3']:.2f} "
            f"| {row['reward_first3']:.3f} → {row['reward_last3']:.3f} | {row['acc_steps']:.0f} "
            f"| {row['advantage_steps']:.0f} | {row['median_step_s']:.0f} | " + " | ".join(cov) + " |"
        )
    return "\n".join(lines)


#: The experiment log's per-step columns: (heading, verl metric, format).
STEP_COLUMNS = (
    ("reward (mean)", "critic/score/mean", "{:.3f}"),
    ("target-doc coverage", "gta/target_doc_cov", "{:.3f}"),
    ("searches / rollout", "gta/num_searches", "{:.2f}"),
    ("correct", "gta/acc", "{:.3f}"),
    ("invalid", "gta/invalid_actions", "{:.2f}"),
    ("response tokens", "response_length/mean", "{:.0f}"),
    ("advantages max", "critic/advantages/max", "{:.3f}"),
    ("`actor/ppo_kl`", "actor/ppo_kl", "{:.4f}"),
    ("step (s)", "timing_s/step", "{:.0f}"),
    ("gen", "timing_s/gen", "{:.0f}"),
    ("ref", "timing_s/ref", "{:.0f}"),
    ("update", "timing_s/update_actor", "{:.0f}"),
)


def step_table(steps: dict[int, dict[str, float]]) -> str:
    """One run's per-step table (training questions, T = 1) from its verl step metrics; ``–`` = not logged."""
    lines = [
        "| step | " + " | ".join(h for h, _, _ in STEP_COLUMNS) + " |",
        "|---:|" + "---:|" * len(STEP_COLUMNS),
    ]
    for s in sorted(steps):
        cells = [fmt.format(float(steps[s][k])) if k in steps[s] else "–" for _, k, fmt in STEP_COLUMNS]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.learning_publish steps LOG.jsonl``: print a run's per-step table."""
    import argparse

    from gta_verl.cpu.recipe_run import read_step_metrics

    p = argparse.ArgumentParser(description=main.__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("steps", help="a run's per-step table from its verl step log").add_argument("log")
    args = p.parse_args(argv)
    print(step_table(read_step_metrics(Path(args.log))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
