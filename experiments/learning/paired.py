"""Paired comparison of two policies evaluated on the same questions.

Two policies greedy on the same 48 questions differ on far fewer questions than two independent samples
would, so the unpaired standard error of one set (≈ 0.07 on TargetDocCov) overstates the noise of their
difference. :func:`paired_difference` takes, per seed, each policy's per-question values and returns the
difference of the corpus-level metric (A − B, mean over seeds), each seed's difference, and a percentile
bootstrap interval that resamples **questions** (the same resample for both policies and every seed): the
uncertainty from which questions were asked, not from the seeds. Two intervals treat the training seeds as
random too: a t-interval over the per-seed differences, mean ± t_{(1+level)/2, S−1} · sd/√S (undefined for one
seed), and a two-level bootstrap that resamples seeds, then questions. With three seeds the t-interval is the
honest one (t_{0.975, 2} = 4.303); the two-level bootstrap of three values understates the seeds' spread.

Metrics (:data:`PAIRED_METRICS`), each a ratio of sums over questions so that the resampled statistic is the
metric itself:

* ``target_doc_cov``: Σ_x |C(x) ∩ S(x)| / Σ_x |S(x)| (GTA-RAG eq. 22), questions with S ≠ ∅;
* ``complete_traj_cov``: mean_x 1[S(x) ⊆ C(x)] (eq. 23), questions with S ≠ ∅;
* ``em``, ``f1``, ``search_turns``, ``answered``: means over questions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gta_verl.eval.metrics import score_record
from gta_verl.eval.records import EvalRecord, record_key

#: metric → (numerator field, denominator field or None for 1, needs targets).
PAIRED_METRICS: dict[str, tuple[str, str | None, bool]] = {
    "target_doc_cov": ("n_targets_hit", "n_targets", True),
    "complete_traj_cov": ("complete_chain", None, True),
    "em": ("em", None, False),
    "f1": ("f1", None, False),
    "search_turns": ("num_searches", None, False),
    "answered": ("answered", None, False),
}
#: The per-question fields :func:`question_rows` keeps (what a published ``*.questions.json`` holds).
QUESTION_FIELDS = ("data_source", "qid", "sample_idx", "n_targets", "n_targets_hit", "complete_chain")
QUESTION_FIELDS += ("em", "f1", "num_searches", "answered")

Key = tuple[str, str, int]


@dataclass(frozen=True)
class PairedDiff:
    """A − B of one metric on shared questions.

    Attributes:
        metric: A key of :data:`PAIRED_METRICS`.
        n_questions: Questions shared by every run (the ones compared).
        n_unshared: Questions some run has and another lacks, left out of every run's value: a seed evaluated
            on fewer questions narrows all of them, so a caller shows this when it is not 0.
        per_seed: A − B for each seed pair, in the order given.
        diff: Mean of ``per_seed``.
        ci_low, ci_high: Percentile bootstrap interval of ``diff`` over questions (``level``).
        level: Coverage of the interval, e.g. 0.95.
        p_not_above_0: Share of bootstrap resamples with a difference ≤ 0 (one-sided; small → A > B).
        seed_t_low, seed_t_high: t-interval of ``diff`` over the seeds (NaN with one seed).
        seed_boot_low, seed_boot_high: Two-level bootstrap interval (seeds, then questions, resampled).
    """

    metric: str
    n_questions: int
    n_unshared: int
    per_seed: tuple[float, ...]
    diff: float
    ci_low: float
    ci_high: float
    level: float
    p_not_above_0: float
    seed_t_low: float = float("nan")
    seed_t_high: float = float("nan")
    seed_boot_low: float = float("nan")
    seed_boot_high: float = float("nan")


def question_rows(records: Sequence[EvalRecord]) -> list[dict[str, Any]]:
    """Per evaluated rollout, the :data:`QUESTION_FIELDS`, scored from what the policy was shown (JSON-ready).

    The key is the records' own (:func:`gta_verl.eval.records.record_key`: ``qid`` or, without one, the
    question text).
    """
    out = []
    for rec in records:
        m = score_record(rec.rollout)
        source, qid, sample = record_key(rec.rollout)
        row: dict[str, Any] = {"data_source": source, "qid": qid, "sample_idx": sample}
        row.update({k: getattr(m, k) for k in QUESTION_FIELDS[3:]})
        row["answered"] = float(bool(row["answered"]))
        out.append(row)
    return out


def question_values(rows: Sequence[Mapping[str, Any]], metric: str) -> dict[Key, tuple[float, float]]:
    """Per question ``(data_source, qid, sample_idx)``: the metric's (numerator, denominator)."""
    if metric not in PAIRED_METRICS:
        raise ValueError(f"unknown paired metric {metric!r}; valid: {sorted(PAIRED_METRICS)}")
    num, den, needs_targets = PAIRED_METRICS[metric]
    out: dict[Key, tuple[float, float]] = {}
    for r in rows:
        if needs_targets and not r["n_targets"]:
            continue
        key = (str(r["data_source"]), str(r["qid"]), int(r["sample_idx"]))
        out[key] = (float(r[num]), float(r[den]) if den else 1.0)
    return out


def _arrays(runs: Sequence[dict[Key, tuple[float, float]]], keys: list[Key]) -> tuple[np.ndarray, np.ndarray]:
    """(numerators, denominators), each shaped (seeds, questions)."""
    num = np.array([[run[k][0] for k in keys] for run in runs], dtype=np.float64)
    den = np.array([[run[k][1] for k in keys] for run in runs], dtype=np.float64)
    return num, den


def paired_difference(
    a: Sequence[Sequence[Mapping[str, Any]]],
    b: Sequence[Sequence[Mapping[str, Any]]],
    metric: str = "target_doc_cov",
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDiff:
    """A − B of ``metric`` over the questions every run shares, with a bootstrap interval over questions.

    Args:
        a, b: Per seed (paired by position), one policy's per-question rows (:func:`question_rows`).
        metric: A key of :data:`PAIRED_METRICS`.
        n_boot: Bootstrap resamples of the questions.
        level: Interval coverage.
        seed: Seed of the resampling.

    Returns:
        The difference per seed pair and its mean; the interval resamples questions (shape
        (n_boot, Q) indices, one resample shared by all 2 × seeds runs).

    Raises:
        ValueError: ``a`` and ``b`` differ in length or are empty, or the runs share no question.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"need the same number (≥ 1) of runs on each side, got {len(a)} and {len(b)}")
    va = [question_values(rows, metric) for rows in a]
    vb = [question_values(rows, metric) for rows in b]
    keys = sorted(set.intersection(*(set(v) for v in va + vb)))
    if not keys:
        raise ValueError(f"the runs share no question with a defined {metric}")
    unshared = set.union(*(set(v) for v in va + vb)) - set(keys)
    na, da = _arrays(va, keys)
    nb, db = _arrays(vb, keys)
    per_seed = na.sum(1) / da.sum(1) - nb.sum(1) / db.sum(1)  # (seeds,)
    idx = np.random.default_rng(seed).integers(0, len(keys), size=(n_boot, len(keys)))
    boot = (na[:, idx].sum(2) / da[:, idx].sum(2) - nb[:, idx].sum(2) / db[:, idx].sum(2)).mean(0)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    t_lo, t_hi = seed_t_interval(per_seed, level)
    # Two-level: per resample b, seeds drawn with replacement, then the question resample idx[b].
    per_seed_boot = na[:, idx].sum(2) / da[:, idx].sum(2) - nb[:, idx].sum(2) / db[:, idx].sum(2)  # (S, B)
    sidx = np.random.default_rng(seed + 1).integers(0, len(per_seed), size=(n_boot, len(per_seed)))
    boot2 = per_seed_boot[sidx, np.arange(n_boot)[:, None]].mean(1)
    b2_lo, b2_hi = np.quantile(boot2, [(1 - level) / 2, (1 + level) / 2])
    return PairedDiff(
        metric=metric,
        n_questions=len(keys),
        n_unshared=len(unshared),
        per_seed=tuple(float(x) for x in per_seed),
        diff=float(per_seed.mean()),
        ci_low=float(lo),
        ci_high=float(hi),
        level=level,
        p_not_above_0=float((boot <= 0).mean()),
        seed_t_low=t_lo,
        seed_t_high=t_hi,
        seed_boot_low=float(b2_lo),
        seed_boot_high=float(b2_hi),
    )


def seed_t_interval(per_seed: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """mean ± t_{(1+level)/2, S−1} · sd/√S over S per-seed differences (sd with S − 1); NaN for S < 2.

    >>> [round(x, 4) for x in seed_t_interval([0.1, 0.3])]  # 0.2 ± 12.7062 × 0.1414/√2
    [-1.0706, 1.4706]
    """
    from scipy.stats import t

    x = np.asarray(per_seed, dtype=np.float64)
    if x.size < 2:
        return float("nan"), float("nan")
    half = float(t.ppf((1 + level) / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return float(x.mean() - half), float(x.mean() + half)
