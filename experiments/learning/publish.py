"""What the pretrained-policy experiment's page cites: each run's training summary from its verl step log,
and the copy of the outputs into the docs (:func:`publish`), so a lost ``--out`` folder loses no number."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETS = ("synthetic", "musique", "hotpotqa")


def publish(
    out: Path, dest: Path, results: list[dict], repo: Path = REPO, tag: str = "", iii: Path | None = None
) -> list[Path]:
    """Copy what the docs cite from ``out`` into ``dest`` (inside ``repo``) and return the files written.

    ``table.md``, ``learning_curves.png``, the SFT warm start's ``policy_sft.json``; per finished run its
    merged step log as ``runs/<name>/metrics.jsonl`` and each held-out set's ``report.json`` as
    ``runs/<name>/eval_<set>.report.json`` and its per-question scores as ``eval_<set>.questions.json``
    (also ``<warm|sft>_<set>.questions.json`` for the warm starts: what :func:`paired_table` compares);
    ``results.json`` with every run's ``metrics`` naming its published
    step log relative to ``repo``, so the page's numbers survive the loss of ``out`` (weights never copied).
    ``tag`` names the precision's SFT folder (``experiments.learning.pretrained.precision_tag``); ``iii`` is
    warm start (iii)'s build folder, whose held-out scores become ``iii_<set>.questions.json``.
    """
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(src: Path, dst: Path) -> None:
        src = src if src.is_absolute() else repo / src
        if src.is_file() and src.resolve() != dst.resolve():  # a run restored from ``dest`` is there already
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            written.append(dst)

    def put_questions(records: Path, dst: Path) -> None:
        if records.is_dir() and not dst.is_file():  # records never change once a run is done
            write_questions(records, dst)
            written.append(dst)

    for name in ("table.md", "learning_curves.png", "teacher.json"):
        put(out / name, dest / name)
    put(out / f"{tag}sft" / "policy_sft.json", dest / "policy_sft.json")
    for key in SETS:
        for start in ("warm", f"{tag}sft"):
            put_questions(out / "eval" / f"{start}_{key}" / "records", dest / f"{start}_{key}.questions.json")
        if iii is not None:
            put_questions(iii / f"eval_{key}" / "records", dest / f"iii_{key}.questions.json")
    summary = json.loads((out / "results.json").read_text())
    runs = []
    for r in results:
        name = Path(r["metrics"]).parent.name  # runs/<name>/metrics.all.jsonl, or a published runs/<name>/…
        pub = dest / "runs" / name
        put(Path(r["metrics"]), pub / "metrics.jsonl")
        for key in SETS:
            put(out / "runs" / name / f"eval_{key}" / "report.json", pub / f"eval_{key}.report.json")
            put_questions(out / "runs" / name / f"eval_{key}" / "records", pub / f"eval_{key}.questions.json")
        runs.append({**r, "metrics": str((pub / "metrics.jsonl").resolve().relative_to(repo.resolve()))})
    summary["runs"] = runs
    tmp = dest / "results.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    tmp.replace(dest / "results.json")
    return [*written, dest / "results.json"]


# what a run's numbers depend on: a published run is restored only into an experiment with the same values
RESTORE_KEYS = (
    "policy", "kb", "n_paths", "steps", "batch", "n", "lr", "eval_questions", "precision", "sft_steps",
    "sft_rows", "sft_lr", "iii_rows", "iii_epochs", "iii_lr", "train_pool", "filter_groups", "rollout",
    "lora_rank", "padding",
)  # fmt: skip
#: The value a setting had before its option existed: a folder published then compares as that value.
RESTORE_DEFAULTS: dict[str, object] = {
    "iii_rows": 0, "iii_epochs": 3, "iii_lr": 2e-5, "train_pool": None, "filter_groups": False,
    "rollout": "hf_cpu", "lora_rank": 0, "padding": "full",
}  # fmt: skip
#: The options of ``experiments.learning.pretrained`` that change no finished run's numbers: where it is
#: written or published, which runs are asked for (a run's seed and start are in its name), when it
#: checkpoints or gives up, and the CPU flags behind ``precision`` (compared itself). Every other option is
#: one of RESTORE_KEYS (a test holds the parser to that).
RESTORE_IGNORED = (
    "out", "conditions", "seeds_ab", "seeds_cd", "start", "save_freq", "timeout", "report_only", "publish",
    "restore_from", "cpu_bf16_flags", "vllm_python",
)  # fmt: skip


def restore(published: Path, out: Path, settings: dict, prefix: str) -> list[str]:
    """The inverse of :func:`publish` for finished runs: each run in ``published/results.json`` whose name
    starts with ``prefix`` (the start and precision, e.g. ``sft_fp32_``) gets ``out/runs/<name>/done.json``
    holding its published result, so the same command on a fresh machine trains only what was not
    published. A run already finished under ``out`` is kept. Returns the names restored.

    Raises ``ValueError`` when a setting in :data:`RESTORE_KEYS` differs from the published ones: a run
    trained with other settings is a different experiment.
    """
    from gta_verl.data.io import write_text_atomic

    restored = []
    for r in published_runs(published, settings):
        name = Path(r["metrics"]).parent.name
        done = out / "runs" / name / "done.json"
        if not name.startswith(prefix) or done.is_file():
            continue
        # the step log published next to it, not the repository path results.json names: run from another
        # checkout or directory, that path reads as a missing log, i.e. a run of 0 training steps
        write_text_atomic(done, json.dumps({**r, "metrics": str(published_log(published, name))}, indent=2))
        restored.append(name)
    return restored


def published_log(published: Path, name: str) -> Path:
    """Where :func:`publish` put run ``name``'s step log inside the published folder."""
    return published / "runs" / name / "metrics.jsonl"


def _check_run(path: Path, i: int, r: object) -> None:
    """A published run entry carries what a finished run needs (``ValueError`` naming what is missing)."""
    where = f"{path}: run {i}"
    if not isinstance(r, dict):
        raise ValueError(f"{where} is {type(r).__name__}, not an object")
    if not isinstance(r.get("metrics"), str) or not r["metrics"]:
        raise ValueError(f"{where} has no 'metrics' (its step log); republish it")
    name = Path(r["metrics"]).parent.name
    where = f"{path}: run {i} ({name})"
    problems = [f"no {k!r}" for k in ("condition", "seed", "seconds") if k not in r]
    problems += [
        f"no {key} held-out metrics"
        for key in SETS
        if not isinstance(r.get(key), dict) or "target_doc_cov" not in r[key]
    ]
    log = published_log(path.parent, name)
    if not log.is_file():
        problems.append(f"no step log at {log}")
    if problems:
        raise ValueError(f"{where}: {', '.join(problems)}; republish it or drop it from results.json")


def published_runs(published: Path, settings: dict) -> list[dict]:
    """The runs in ``published/results.json``, after checking its :data:`RESTORE_KEYS` equal ``settings``
    and that every run entry is complete: a condition, seed, wall time, each set's held-out metrics and its
    step log inside ``published`` (``ValueError`` naming each differing value or the first incomplete run;
    ``FileNotFoundError`` without the file). Called before the warm starts, so nothing fails an hour in."""
    path = published / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no published results to restore runs from")
    try:
        summary = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("runs", []), list):
        raise ValueError(f"{path}: not a published results.json (an object with a 'runs' list)")
    old = summary.get("settings") or {}
    was = {k: old.get(k, RESTORE_DEFAULTS.get(k)) for k in RESTORE_KEYS}
    now = {k: settings.get(k, RESTORE_DEFAULTS.get(k)) for k in RESTORE_KEYS}
    diff = {k: (was[k], now[k]) for k in RESTORE_KEYS if was[k] != now[k]}
    if diff:
        raise ValueError(f"{path}: published with other settings (published, now): {diff}")
    runs = list(summary.get("runs", []))
    for i, r in enumerate(runs):
        _check_run(path, i, r)
    return runs


def write_questions(records: Path, dst: Path) -> None:
    """A records directory's per-question scores (:func:`experiments.learning.paired.question_rows`), JSON."""
    from experiments.learning.paired import question_rows
    from gta_verl.eval.records import read_records

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    rows = question_rows(read_records(records))
    tmp.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    tmp.replace(dst)


def opening(text: str) -> str:
    """A response's first action tag (``<think>``, ``<search>``, …) or, without one, its first word."""
    m = re.match(r"\s*(<[a-z_]+>|\S+)", text)
    return m.group(1) if m else "(empty)"


def openings_table(records: Path) -> str:
    """How a records directory's responses begin, most common first: what a policy writes before anything
    else (a collapsed protocol shows here before any metric names it)."""
    from collections import Counter

    from gta_verl.eval.records import read_records

    counts = Counter(opening(r.response_text) for r in read_records(records))
    total = sum(counts.values())
    lines = ["| response begins with | responses | share |", "|---|---:|---:|"]
    lines += [f"| `{k}` | {v} | {v / total:.3f} |" for k, v in counts.most_common()]
    return "\n".join(lines)


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


#: PathRouter's own per-step columns (route shares, the path score P, the selective teacher KL).
PATH_ROUTER_COLUMNS = (
    ("reward (mean)", "critic/score/mean", "{:.3f}"),
    ("C (EM)", "path_router/C_mean", "{:.3f}"),
    ("P", "path_router/P_mean", "{:.3f}"),
    ("C+P+", "path_router/route_share/C+P+", "{:.2f}"),
    ("C+P−", "path_router/route_share/C+P-", "{:.2f}"),
    ("C−P+", "path_router/route_share/C-P+", "{:.2f}"),
    ("C−P−", "path_router/route_share/C-P-", "{:.2f}"),
    ("route weight", "path_router/mean_route_weight", "{:.3f}"),
    ("KL selected", "path_router/kl_select_frac", "{:.2f}"),
    ("λ(step)", "path_router/kl_lambda", "{:.4f}"),
    ("teacher KL", "actor/distillation/gta_kl_selected", "{:.3f}"),
    ("searches / rollout", "gta/num_searches", "{:.2f}"),
    ("step (s)", "timing_s/step", "{:.0f}"),
)

#: ``steps --columns`` choices.
COLUMN_SETS = {"gta": STEP_COLUMNS, "path_router": PATH_ROUTER_COLUMNS}


def step_table(
    steps: dict[int, dict[str, float]], columns: tuple[tuple[str, str, str], ...] = STEP_COLUMNS
) -> str:
    """One run's per-step table (training questions, T = 1) from its verl step metrics; ``–`` = not logged."""
    lines = [
        "| step | " + " | ".join(h for h, _, _ in columns) + " |",
        "|---:|" + "---:|" * len(columns),
    ]
    for s in sorted(steps):
        cells = [fmt.format(float(steps[s][k])) if k in steps[s] else "–" for _, k, fmt in columns]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


WARM_STARTS = {"i": "warm", "ii": "sft", "iii": "iii"}


def side_files(dest: Path, side: str, key: str) -> dict[int, Path]:
    """Per seed, the published per-question file of ``side`` (a condition, or ``i``/``ii``: seed -1).

    Every run of ``side`` that ``results.json`` lists must have its file once one of them has: a missing one
    is a ``ValueError`` naming it, not a seed silently left out of the mean (round 5: (b) − (r) moved from
    −0.038 over seeds 0, 1, 2 to −0.015 over 0, 2 and its interval crossed 0). No run with a file: ``{}``.
    """
    if side in WARM_STARTS:
        found = sorted(dest.glob(f"*{WARM_STARTS[side]}_{key}.questions.json"))  # the SFT's: <tag>sft_…
        return {-1: found[0]} if found else {}
    runs = json.loads((dest / "results.json").read_text())["runs"]
    files = {
        int(r["seed"]): dest / "runs" / Path(r["metrics"]).parent.name / f"eval_{key}.questions.json"
        for r in runs
        if r["condition"] == side
    }
    missing = [f for f in files.values() if not f.is_file()]
    if missing and len(missing) < len(files):
        seeds = ", ".join(str(s) for s, f in files.items() if f in missing)
        raise ValueError(
            f"{missing[0]}: missing, so ({side}) seed {seeds} would drop out of the paired {key} mean"
        )
    return {} if missing else files


def seed_files(dest: Path, a: str, b: str, key: str) -> tuple[dict[int, Path], dict[int, Path]]:
    """:func:`side_files` of ``a`` and ``b``; a warm start's one file repeated for every seed of the other.

    ``ValueError`` when one side has its files for ``key`` and the other, though it has runs (or is a warm
    start), has none: the pair would vanish from the table without a word.
    """
    fa, fb = side_files(dest, a, key), side_files(dest, b, key)
    for x, fx, y, fy in ((a, fa, b, fb), (b, fb, a, fa)):
        if fx and not fy and (y in WARM_STARTS or any(r["condition"] == y for r in _runs(dest))):
            raise ValueError(f"{dest}: ({y}) has no {key} per-question file while ({x}) has; republish it")
    if -1 in fa and -1 not in fb:
        fa = {seed: fa[-1] for seed in fb}
    if -1 in fb and -1 not in fa:
        fb = {seed: fb[-1] for seed in fa}
    return fa, fb


def _runs(dest: Path) -> list[dict]:
    return list(json.loads((dest / "results.json").read_text())["runs"])


def unpaired(fa: dict[int, Path], fb: dict[int, Path], a: str, b: str) -> str:
    """The seeds that one side ran and the other did not, e.g. ``(r) 1,2``: named, since they are not in
    the mean (``""`` when every seed pairs)."""
    only = [(x, sorted(set(fx) - set(fy))) for x, fx, fy in ((a, fa, fb), (b, fb, fa))]
    return "; ".join(f"({x}) " + ",".join(map(str, seeds)) for x, seeds in only if seeds)


def paired_rows(dest: Path, a: str, b: str, key: str) -> tuple[list[int], list[list[dict]], list[list[dict]]]:
    """Seed-paired per-question rows of ``a`` and ``b`` on one set (a warm start pairs with every seed).

    Seeds run by one side only are not paired (:func:`unpaired` names them); a published run whose file is
    missing is refused (:func:`side_files`)."""
    fa, fb = seed_files(dest, a, b, key)
    seeds = sorted(set(fa) & set(fb))
    return (
        seeds,
        [json.loads(fa[s].read_text()) for s in seeds],
        [json.loads(fb[s].read_text()) for s in seeds],
    )


def paired_table(
    dest: Path, pairs: list[tuple[str, str]], metrics: list[str], n_boot: int = 10_000, wide: bool = False
) -> str:
    """Markdown: A − B per held-out set and metric, seed-paired, with a bootstrap interval over questions.

    ``wide``: one row per pair and set, a column per metric holding ``mean q [interval over questions] ·
    seeds t [t-interval over seeds]`` and the seeds' values (the learning page's layout); else one row per
    metric with both intervals, the two-level bootstrap and P(≤ 0). Every interval names the variance it
    covers: ``q`` resamples the questions with the seeds held fixed; ``seeds t`` treats the seeds as random
    (``–`` with one seed).
    """
    from experiments.learning.paired import paired_difference

    if wide:
        lines = [
            "| A − B | set | seeds | " + " | ".join(f"{m} (per seed)" for m in metrics) + " |",
            "|---|---|---|" + "---|" * len(metrics),
        ]
    else:
        lines = [
            "| A − B | set | metric | seeds | per seed | mean | 95 % interval (questions) "
            "| 95 % interval (seeds, t) | 95 % interval (seeds and questions, bootstrap) | P(≤ 0) |",
            "|---|---|---|---|---|---:|---|---|---|---:|",
        ]
    for a, b in pairs:
        for key in SETS:
            seeds, ra, rb = paired_rows(dest, a, b, key)
            if not seeds:
                continue
            shown = ",".join("–" if s < 0 else str(s) for s in seeds)
            if alone := unpaired(*seed_files(dest, a, b, key), a, b):
                shown += f" (unpaired: {alone})"
            cells = []
            for metric in metrics:
                d = paired_difference(ra, rb, metric, n_boot=n_boot)
                per = ", ".join(f"{x:+.3f}" for x in d.per_seed)
                ci = f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]"
                if d.n_unshared:  # a run evaluated on fewer questions narrowed every run to the shared ones
                    ci += f" on {d.n_questions} shared questions, {d.n_unshared} not in every run left out"
                t_ci = (
                    f"[{d.seed_t_low:+.3f}, {d.seed_t_high:+.3f}]" if len(d.per_seed) > 1 else "– (one seed)"
                )
                if wide:
                    cells.append(f"**{d.diff:+.3f}** q {ci} · seeds t {t_ci} ({per})")
                else:
                    b2 = f"[{d.seed_boot_low:+.3f}, {d.seed_boot_high:+.3f}]"
                    lines.append(
                        f"| ({a}) − ({b}) | {key} | {metric} | {shown} | {per} | {d.diff:+.3f} | "
                        f"{ci} | {t_ci} | {b2} | {d.p_not_above_0:.3f} |"
                    )
            if wide:
                lines.append(f"| ({a}) − ({b}) | {key} | {shown} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gold_documents(qa: Path) -> dict[str, list[str]]:
    """qid → the row's gold documents (``reward_model.ground_truth.target_doc_ids``) of a verl QA parquet."""
    import pyarrow.parquet as pq

    out = {}
    for row in pq.read_table(qa).to_pylist():
        truth = (row.get("reward_model") or {}).get("ground_truth") or {}
        out[str((row.get("extra_info") or {}).get("qid"))] = [
            str(d) for d in truth.get("target_doc_ids") or []
        ]
    return out


def seen_split_table(
    dest: Path, train: Path, qa: Path, key: str = "musique", sides: str = "i,ii,a,b,r"
) -> str:
    """Markdown: each policy's held-out ``key`` questions split into those sharing no gold document with any
    training target (:func:`gta_verl.data.split.split_by_seen_documents`) and the rest, TargetDocCov and EM on
    each side (mean over a condition's seeds; the seeds' values in parentheses)."""
    from experiments.learning.paired import question_values
    from gta_verl.data.split import split_by_seen_documents

    gold, seen = gold_documents(qa), list(gold_documents(train).values())
    lines = [
        f"| policy | seeds | {key} questions sharing no gold document with a training target: n, "
        "TargetDocCov, EM | sharing one: n, TargetDocCov, EM |",
        "|---|---|---|---|",
    ]
    for side in sides.split(","):
        files = side_files(dest, side, key)
        if not files:
            continue
        runs = [json.loads(f.read_text()) for _, f in sorted(files.items())]
        qids = [str(r["qid"]) for r in runs[0]]
        disjoint, shared = split_by_seen_documents([gold.get(q, []) for q in qids], seen)
        cells = []
        for part in (disjoint, shared):
            keep = {qids[i] for i in part}
            cov, em = [], []
            for rows in runs:
                mine = [r for r in rows if str(r["qid"]) in keep]
                num_den = question_values(mine, "target_doc_cov").values()
                cov.append(sum(n for n, _ in num_den) / max(1.0, sum(d for _, d in num_den)))
                em.append(sum(float(r["em"]) for r in mine) / max(1, len(mine)))
            per = ", ".join(f"{c:.3f}" for c in cov) if len(cov) > 1 else ""
            cells.append(
                f"{len(part)}, {sum(cov) / len(cov):.3f}{f' ({per})' if per else ''}, {sum(em) / len(em):.3f}"
            )
        seeds = ",".join(str(x) for x in sorted(files)) if -1 not in files else "–"
        lines.append(f"| ({side}) | {seeds} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.learning.publish steps LOG.jsonl``: print a run's per-step table;
    ``… paired DEST``: the seed-paired held-out differences (:func:`paired_table`)."""
    import argparse

    from gta_verl.cpu.recipe_run import read_step_metrics

    p = argparse.ArgumentParser(description=main.__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    ps = sub.add_parser("steps", help="a run's per-step table from its verl step log")
    ps.add_argument("log")
    ps.add_argument(
        "--columns", choices=sorted(COLUMN_SETS), default="gta", help="path_router: its own metrics"
    )
    sub.add_parser("openings", help="how a records directory's responses begin").add_argument("records")
    pp = sub.add_parser("paired", help="seed-paired held-out differences of a published experiment")
    pp.add_argument("dest", help="the published folder, e.g. experiments/learning/results/exp10")
    pp.add_argument(
        "--pairs", default="b-r,a-r,b-ii,r-ii", help="A-B pairs: conditions, or i / ii / iii (warm starts)"
    )
    pp.add_argument("--metrics", default="target_doc_cov,complete_traj_cov,search_turns,em")
    pp.add_argument("--n-boot", type=int, default=10_000)
    pp.add_argument("--wide", action="store_true", help="one row per pair and set, a column per metric")
    pu = sub.add_parser(
        "seen-split",
        help="held-out questions sharing no gold document with a training target vs the rest, per policy",
    )
    pu.add_argument("dest", help="the published folder")
    pu.add_argument("--train", required=True, help="the training questions' parquet (their target documents)")
    pu.add_argument("--qa", required=True, help="the held-out set's verl QA parquet (its gold documents)")
    pu.add_argument("--set", default="musique", help="which held-out set (default musique)")
    pu.add_argument("--sides", default="i,ii,a,b,r", help="policies: warm starts i / ii / iii and conditions")
    args = p.parse_args(argv)
    if args.cmd == "seen-split":
        print(seen_split_table(Path(args.dest), Path(args.train), Path(args.qa), args.set, args.sides))
        return 0
    if args.cmd == "paired":
        pairs = [tuple(x.split("-", 1)) for x in args.pairs.split(",") if x]
        table = paired_table(Path(args.dest), pairs, args.metrics.split(","), args.n_boot, args.wide)  # type: ignore[arg-type]
        print(table)
        return 0
    if args.cmd == "openings":
        print(openings_table(Path(args.records)))
        return 0
    print(step_table(read_step_metrics(Path(args.log)), COLUMN_SETS[args.columns]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
