"""Signal before compute: does a policy give GRPO groups whose rewards differ?

GRPO scores a group G of rollouts of one question against its own mean. With Dr. GRPO (no division by the
group's standard deviation, ``algorithm.norm_adv_by_std_in_grpo=false``) the advantage of rollout i is

    A_i = r_i − (1/|G|) Σ_{j∈G} r_j,

and with verl's default GRPO it is ``(r_i − mean) / (std + ε)`` (unbiased std, ε = 10⁻⁶). Either way a group
whose rewards are all equal has A_i = 0 for every rollout and adds nothing to the policy gradient. Before a
learning run spends hours, sample the warm start at the training temperature, ``n`` rollouts per training
question, and measure:

* the per-question pass rate of the answer (EM) and of each part of the trajectory-guided reward: answered,
  at least one target document shown, every target document shown (complete chain);
* for each reward the run could use — (a) answer-only R_EM (eq 19), (b) trajectory-guided R_traj (eqs
  15–18), (e) R_traj with the coverage bonus over turns — the share of groups whose rewards are not all equal
  and the mean |A_i| over all rollouts;
* for the binary answer reward, the share of groups of size g expected to differ given each question's pass
  rate p: 1 − p^g − (1 − p)^g (plug-in estimate from the n samples);
* a pass-rate window: the questions with lo ≤ p ≤ hi, a training pool whose answer reward differs within
  groups. Choosing a pool on the same samples that measured it overstates its share; measure the pool again
  with another sampling seed (``gta-verl signal --seed 1`` on the pool's parquet) before quoting it.

Everything here is pure: :func:`outcome_from_record` reads one evaluation record (the rollout as the policy
saw it: ``turn_doc_ids`` holds only the documents shown), the rest aggregates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gta_verl.rewards.trajectory import TrajectoryRewardConfig, em_reward, trajectory_reward

__all__ = [
    "REWARDS",
    "QuestionSignal",
    "RewardSignal",
    "RolloutOutcome",
    "SignalReport",
    "advantages",
    "binary_differ_probability",
    "outcome_from_record",
    "pass_rate_window",
    "render_markdown",
    "rewards_differ",
    "signal_report",
]

#: The rewards measured, by the learning campaign's condition letters: (a) answer-only, (b) trajectory-guided,
#: (e) trajectory-guided with the coverage bonus over turns.
REWARDS: dict[str, str] = {
    "a": "answer-only R_EM (eq 19)",
    "b": "trajectory-guided R_traj (eqs 15-18)",
    "e": "R_traj, coverage bonus over turns",
}
_COVERAGE_BONUS = TrajectoryRewardConfig(step_shaping="coverage_bonus")


@dataclass(frozen=True)
class RolloutOutcome:
    """One rollout, reduced to what the signal needs."""

    group: str
    """The question's key (``data_source/qid``): GRPO's group."""
    em: float
    answered: bool
    hit_any: bool
    """At least one target document was shown."""
    complete_chain: bool
    """Every target document was shown (vacuously true without targets)."""
    searches: int
    rewards: Mapping[str, float]
    """Reward of each :data:`REWARDS` key."""


def _plain_list(value: Any) -> list[Any]:
    # parquet hands back numpy arrays (nested for list-of-lists columns); None is an empty list
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value)


def outcome_from_record(
    record: Mapping[str, Any], config: TrajectoryRewardConfig | None = None
) -> RolloutOutcome:
    """Score one evaluation record (``gta_verl.eval.records`` columns) with every reward of :data:`REWARDS`.

    Raises:
        KeyError: a column the rewards need is missing (names it).
    """
    for col in ("qid", "turn_doc_ids", "target_doc_ids", "gold_answers"):
        if col not in record:
            raise KeyError(f"evaluation record without {col!r}: not a gta_verl.eval.records row")
    cfg = config or TrajectoryRewardConfig()
    turns = [[str(d) for d in _plain_list(t)] for t in _plain_list(record["turn_doc_ids"])]
    targets = [str(d) for d in _plain_list(record["target_doc_ids"])]
    golds = [str(g) for g in _plain_list(record["gold_answers"])]
    answer = record.get("answer")
    b = trajectory_reward(turns, targets, answer, golds, cfg)
    e = trajectory_reward(turns, targets, answer, golds, _COVERAGE_BONUS)
    return RolloutOutcome(
        group=f"{record.get('data_source', '')}/{record['qid']}",
        em=b.em,
        answered=answer is not None and bool(str(answer).strip()),
        hit_any=b.target_doc_cov > 0 if b.has_targets else False,
        complete_chain=b.complete_chain,
        searches=b.num_searches,
        rewards={"a": em_reward(answer, golds), "b": b.total, "e": e.total},
    )


def advantages(rewards: Sequence[float], std_norm: bool = False, eps: float = 1e-6) -> list[float]:
    """GRPO's advantages of one group: r_i − mean (Dr. GRPO) or (r_i − mean)/(std + ε) (verl's default,
    unbiased std; a group of one has std 0 there, as in verl, where torch.std of one value is NaN → 0).

    >>> advantages([1.0, 0.0, 0.0, 0.0])
    [0.75, -0.25, -0.25, -0.25]
    """
    n = len(rewards)
    if n == 0:
        return []
    mean = sum(rewards) / n
    centred = [r - mean for r in rewards]
    if not std_norm:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / (n - 1)) if n > 1 else 0.0
    return [c / (std + eps) for c in centred]


def rewards_differ(rewards: Sequence[float], tol: float = 1e-9) -> bool:
    """Whether a group's rewards are not all equal (a group of one never differs)."""
    return bool(rewards) and (max(rewards) - min(rewards)) > tol


def binary_differ_probability(p: float, g: int) -> float:
    """P(a group of g rollouts with a 0/1 reward of success rate p holds both values) = 1 − p^g − (1 − p)^g.

    >>> round(binary_differ_probability(0.2, 8), 4)  # 1 − 0.2⁸ − 0.8⁸ = 1 − 0.00000256 − 0.16777216
    0.8322
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a pass rate is in [0, 1], got {p}")
    if g < 1:
        raise ValueError(f"a group has at least one rollout, got {g}")
    return 1.0 - p**g - (1.0 - p) ** g


@dataclass(frozen=True)
class QuestionSignal:
    """One question's n rollouts."""

    group: str
    n: int
    pass_rate: float
    answered: float
    hit_any: float
    complete_chain: float
    searches: float
    reward_mean: Mapping[str, float]
    differs: Mapping[str, bool]


@dataclass(frozen=True)
class RewardSignal:
    """One reward over every group."""

    key: str
    mean: float
    share_differ: float
    """Share of groups whose rewards are not all equal."""
    mean_abs_adv: float
    """Mean |A_i| over all rollouts, Dr. GRPO (no std division)."""
    mean_abs_adv_std: float
    """Mean |A_i| over all rollouts with verl's std normalisation."""


@dataclass(frozen=True)
class SignalReport:
    questions: tuple[QuestionSignal, ...]
    rewards: tuple[RewardSignal, ...]
    rollouts: int
    group_size: int
    """The smallest group's size (every group has it when the sampling finished)."""

    @property
    def pass_rate(self) -> float:
        """EM over all rollouts."""
        return _weighted(self.questions, lambda q: q.pass_rate)

    def term_rates(self) -> dict[str, float]:
        """Share of rollouts in which each part of the reward fires."""
        return {
            "EM": self.pass_rate,
            "answered": _weighted(self.questions, lambda q: q.answered),
            "≥ 1 target shown": _weighted(self.questions, lambda q: q.hit_any),
            "complete chain": _weighted(self.questions, lambda q: q.complete_chain),
            "searches / rollout": _weighted(self.questions, lambda q: q.searches),
        }

    def pass_rate_histogram(self) -> dict[str, int]:
        """Questions never answered, sometimes, always."""
        rates = [q.pass_rate for q in self.questions]
        return {
            "p = 0": sum(1 for p in rates if p == 0.0),
            "0 < p < 1": sum(1 for p in rates if 0.0 < p < 1.0),
            "p = 1": sum(1 for p in rates if p == 1.0),
        }

    def summary(self, sizes: Sequence[int] = (4, 8, 16)) -> dict[str, Any]:
        """The report's aggregates, JSON-ready (the per-question rows are :attr:`questions`)."""
        return {
            "rollouts": self.rollouts,
            "group_size": self.group_size,
            "terms": self.term_rates(),
            "pass_rate_histogram": self.pass_rate_histogram(),
            "rewards": [vars(r) for r in self.rewards],
            "expected_share_differ": {g: self.expected_share_differ(g) for g in sizes},
        }

    def expected_share_differ(self, g: int) -> float:
        """Share of answer-reward groups of size g expected to differ: mean over questions of
        :func:`binary_differ_probability` at each question's pass rate."""
        if not self.questions:
            return 0.0
        return sum(binary_differ_probability(q.pass_rate, g) for q in self.questions) / len(self.questions)


def _weighted(questions: Sequence[QuestionSignal], value: Any) -> float:
    total = sum(q.n for q in questions)
    return sum(value(q) * q.n for q in questions) / total if total else 0.0


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0


def signal_report(outcomes: Sequence[RolloutOutcome]) -> SignalReport:
    """Group the rollouts by question and measure every reward's signal.

    Raises:
        ValueError: no rollouts.
    """
    if not outcomes:
        raise ValueError("no rollouts to measure: the evaluation produced no records")
    groups: dict[str, list[RolloutOutcome]] = {}
    for o in outcomes:
        groups.setdefault(o.group, []).append(o)
    keys = list(REWARDS)
    questions = tuple(
        QuestionSignal(
            group=g,
            n=len(rs),
            pass_rate=_mean(r.em for r in rs),
            answered=_mean(float(r.answered) for r in rs),
            hit_any=_mean(float(r.hit_any) for r in rs),
            complete_chain=_mean(float(r.complete_chain) for r in rs),
            searches=_mean(float(r.searches) for r in rs),
            reward_mean={k: _mean(r.rewards[k] for r in rs) for k in keys},
            differs={k: rewards_differ([r.rewards[k] for r in rs]) for k in keys},
        )
        for g, rs in groups.items()
    )
    rewards = []
    for k in keys:
        per_group = [[r.rewards[k] for r in rs] for rs in groups.values()]
        adv = [abs(a) for rs in per_group for a in advantages(rs)]
        adv_std = [abs(a) for rs in per_group for a in advantages(rs, std_norm=True)]
        rewards.append(
            RewardSignal(
                key=k,
                mean=_mean(r for rs in per_group for r in rs),
                share_differ=_mean(float(rewards_differ(rs)) for rs in per_group),
                mean_abs_adv=_mean(adv),
                mean_abs_adv_std=_mean(adv_std),
            )
        )
    return SignalReport(
        questions=questions,
        rewards=tuple(rewards),
        rollouts=len(outcomes),
        group_size=min(q.n for q in questions),
    )


def pass_rate_window(report: SignalReport, lo: float, hi: float) -> list[str]:
    """The questions (group keys, in the report's order) whose answer pass rate p has lo ≤ p ≤ hi.

    Raises:
        ValueError: not 0 ≤ lo ≤ hi ≤ 1.
    """
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"a pass-rate window needs 0 <= lo <= hi <= 1, got [{lo}, {hi}]")
    return [q.group for q in report.questions if lo <= q.pass_rate <= hi]


def render_markdown(report: SignalReport, sizes: Sequence[int] = (4, 8, 16)) -> str:
    """Three tables: the reward terms' rates, each reward's groups, the expected share by group size."""
    lines = [
        f"{len(report.questions)} questions × {report.group_size} rollouts ({report.rollouts} in all); "
        + ", ".join(f"{k}: {v}" for k, v in report.pass_rate_histogram().items()),
        "",
        "| term | rate per rollout |",
        "|---|---:|",
        *(f"| {k} | {v:.3f} |" for k, v in report.term_rates().items()),
        "",
        f"| reward | mean | groups of {report.group_size} whose rewards differ "
        "| mean abs advantage (Dr. GRPO) | mean abs advantage (std-normalised) |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| ({r.key}) {REWARDS[r.key]} | {r.mean:.3f} | {r.share_differ:.3f} | {r.mean_abs_adv:.3f} "
            f"| {r.mean_abs_adv_std:.3f} |"
            for r in report.rewards
        ),
        "",
        "| answer-reward group size g | expected share of groups that differ, mean of 1 − p^g − (1 − p)^g |",
        "|---:|---:|",
        *(f"| {g} | {report.expected_share_differ(g):.3f} |" for g in sizes),
    ]
    return "\n".join(lines) + "\n"
