"""Questions whose sampled rollouts differ: where a GRPO group has something to learn from.

GRPO's advantage Â_i = (r_i − mean_g) / (std_g + ε) is 0 for every rollout of a group whose rewards are all
equal, so a question the policy always solves, or never does, teaches nothing. The learning regression
check and the fixed-question learning runs (``experiments.learning.tiny --select-spread``) therefore train on
the questions whose rollouts, sampled from the warm start at the training temperature, spread most in the two
things the trajectory-guided reward rises with: EM and the fraction of target documents found.

The scores and the ranking are pure (:func:`spread_score`, :func:`questions_with_spread`);
:func:`select_spread_questions` samples the rollouts with ``gta-verl eval``'s runner and writes the subset.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl.rewards.trajectory import trajectory_reward

__all__ = ["SCORES", "questions_with_spread", "select_spread_questions", "spread_score"]

SCORES = ("proxy", "trajectory")


def spread_score(em: float, n_targets_hit: int, n_targets: int) -> float:
    """A rollout's proxy reward for question selection: EM + the fraction of target documents found.

    Both terms are what the trajectory-guided reward (eq 18) rises with, so a question whose sampled
    rollouts differ in it is one whose GRPO group has non-zero advantages.
    """
    return float(em) + (n_targets_hit / n_targets if n_targets > 0 else 0.0)


def rollout_score(record: Mapping[str, Any], score: str) -> float:
    """A sampled rollout's selection score from its eval record.

    Args:
        record: One ``gta-verl eval`` record (``em``, ``n_targets_hit``, ``n_targets``, ``turn_doc_ids``,
            ``target_doc_ids``, ``answer``, ``gold_answers``).
        score: ``"proxy"`` — :func:`spread_score` (EM + fraction of targets found); ``"trajectory"`` — the
            trajectory-guided reward itself (eq 18, :func:`gta_verl.rewards.trajectory.trajectory_reward`),
            which also separates rollouts by how many of their searches missed, so more groups have spread.

    Returns:
        The score.
    """
    if score == "proxy":
        return spread_score(record["em"], record["n_targets_hit"], record["n_targets"])
    if score == "trajectory":
        # trajectory_reward turns parquet's numpy arrays into plain lists itself
        return trajectory_reward(
            record["turn_doc_ids"], record["target_doc_ids"], record["answer"], record["gold_answers"]
        ).total
    raise ValueError(f"score must be one of {SCORES}, got {score!r}")


def questions_with_spread(scores: Sequence[tuple[str, float]], k: int) -> list[str]:
    """The k questions whose sampled rollouts' scores spread most (a GRPO step has something to learn).

    Args:
        scores: (qid, score) per sampled rollout, several per question (e.g. :func:`spread_score`).
        k: How many questions to keep.

    Returns:
        qids ranked by the sample variance of their scores (descending), ties broken by the mean score
        (descending, a question the policy sometimes solves over one it never does), then by first
        appearance. Questions with a single rollout have variance 0.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    by_qid: dict[str, list[float]] = {}
    for qid, s in scores:
        by_qid.setdefault(qid, []).append(float(s))
    if len(by_qid) < k:
        raise ValueError(f"{len(by_qid)} distinct questions scored, {k} asked for")

    def rank(item: tuple[int, str]) -> tuple[float, float, int]:
        order, qid = item
        vals = by_qid[qid]
        var = statistics.variance(vals) if len(vals) > 1 else 0.0
        return (-var, -statistics.mean(vals), order)

    return [qid for _, qid in sorted(enumerate(by_qid), key=rank)[:k]]


def select_spread_questions(
    policy: str | Path,
    questions: str | Path,
    kb_dir: str | Path,
    out_dir: str | Path,
    k: int,
    rollouts: int,
    pool: int | None = None,
    *,
    max_obs_tokens: int,
    prompt_length: int,
    response_length: int,
    score: str = "proxy",
) -> Path:
    """Write the ``k`` questions of ``questions`` (its first ``pool``) with the most reward spread.

    Each question is sampled ``rollouts`` times from ``policy`` at temperature 1 with the rollout layout
    the GRPO run trains with; the kept rows keep the file's order. The subset is
    ``out_dir/questions.parquet``, written once (a second call with the file present only returns its path).

    Args:
        policy: HF model directory of the policy the GRPO run starts from.
        questions: verl Stage-I parquet (``extra_info.qid`` per row).
        kb_dir: KB directory of the retrieval environment.
        out_dir: Where the sampled records and the subset go.
        k: Questions to keep.
        rollouts: Samples per question (the GRPO group size is the natural choice).
        pool: Only the first ``pool`` questions are candidates (None: all).
        max_obs_tokens, prompt_length, response_length: The GRPO run's rollout layout (the CPU warm
            start's: :mod:`gta_verl.cpu.sft_data`); taken as arguments so that ``eval`` imports no ``cpu``.
        score: How a sampled rollout is scored (:func:`rollout_score`).

    Returns:
        Path of the written subset parquet.
    """
    import pandas as pd

    from gta_verl.eval.runner import EvalSettings

    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    out = Path(out_dir)
    subset = out / "questions.parquet"
    if subset.is_file():
        return subset
    out.mkdir(parents=True, exist_ok=True)
    rows = pd.read_parquet(questions)[:pool]  # the first ``pool`` rows; all when None
    candidates = out / "pool.parquet"
    rows.to_parquet(candidates)
    settings = EvalSettings(
        policy=str(policy),
        n_samples=rollouts,
        temperature=1.0,
        max_obs_tokens=max_obs_tokens,
        prompt_length=prompt_length,
        response_length=response_length,
    )
    keep = set(questions_with_spread(_sampled_scores(settings, candidates, kb_dir, out, score), k))
    return _write_atomic(rows[[info["qid"] in keep for info in rows["extra_info"]]], subset)


def _write_atomic(rows: Any, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    rows.to_parquet(tmp)
    tmp.replace(path)
    return path


def _sampled_scores(
    settings: Any, candidates: Path, kb_dir: str | Path, out: Path, score: str
) -> list[tuple[str, float]]:
    """``(qid, score)`` of every rollout ``settings`` samples on the candidate questions."""
    from gta_verl.eval.records import iter_rows
    from gta_verl.eval.runner import evaluate_policy

    res = evaluate_policy(
        settings.policy,
        [candidates],
        kb_dir,
        out_dir=out / "eval",
        settings=settings,
        batch_size=32,
        concurrency=32,
        progress=False,
    )
    return [(row["qid"], rollout_score(row, score)) for row in iter_rows(res.records_dir)]
