"""Answer scoring: SQuAD normalization, exact match, token F1, and verl's score function.

Pure Python (no torch, no verl), so it pickles into Ray reward workers and is shared
by the reward managers, the evaluation runner and the synthesis validator. The answer ŷ is
read with the agent loop's own parser, :func:`gta_verl.protocol.final_answer`.

Paper: GTA-RAG §4 (EM and token F1 with SQuAD normalization, eqs 22–23 report them);
the normalization is the SQuAD v1.1 evaluation script's (lower-case, drop punctuation,
drop English articles, collapse whitespace).
"""

from __future__ import annotations

import logging
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gta_verl.data.schema import parse_ground_truth
from gta_verl.protocol import final_answer

__all__ = ["compute_score", "exact_match", "f1", "normalize_answer"]

logger = logging.getLogger(__name__)

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 answer normalization.

    Examples:
        >>> normalize_answer("The  Eiffel Tower!")
        'eiffel tower'
        >>> normalize_answer("An apple, a day")
        'apple day'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold_answers: Iterable[str] | str) -> list[str]:
    if isinstance(gold_answers, str):
        return [gold_answers]
    return [str(g) for g in gold_answers]


def _is_empty(prediction: str | None) -> bool:
    return prediction is None or not str(prediction).strip()


def exact_match(prediction: str | None, gold_answers: Iterable[str] | str) -> float:
    """1.0 if the normalized prediction equals any normalized gold alias, else 0.0.

    A missing (``None``) or blank prediction scores 0 — "no answer counts as wrong" (eq 17).
    Unlike the SQuAD script, a prediction that normalizes to nothing ("the", "!") never
    matches, so a policy cannot earn EM for an empty answer against an article-only alias.

    Examples:
        >>> exact_match("the Beatles", ["Beatles", "The Fab Four"])
        1.0
        >>> exact_match("Fab Four!", ["Beatles", "The Fab Four"])
        1.0
        >>> exact_match(None, ["Beatles"])
        0.0
    """
    if _is_empty(prediction):
        return 0.0
    pred = normalize_answer(str(prediction))
    if not pred:
        return 0.0
    return float(any(pred == normalize_answer(g) for g in _golds(gold_answers)))


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str | None, gold_answers: Iterable[str] | str) -> float:
    """SQuAD token F1 of the prediction, maximised over gold aliases.

    Examples:
        >>> round(f1("Paris France", ["Paris"]), 4)
        0.6667
        >>> f1("", ["Paris"])
        0.0
    """
    if _is_empty(prediction):
        return 0.0
    pred_tokens = normalize_answer(str(prediction)).split()
    best = 0.0
    for gold in _golds(gold_answers):
        best = max(best, _token_f1(pred_tokens, normalize_answer(gold).split()))
    return best


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Mapping[str, Any] | list[str] | str,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """verl custom score function (``reward.custom_reward_function.path=pkg://gta_verl.rewards.qa``).

    Stage-II style answer reward for use with verl's stock ``naive`` manager:
    ``score = acc = EM``, plus token ``f1``. ``solution_str`` must be the decoded response
    (verl's managers decode the response only); ŷ is :func:`gta_verl.protocol.final_answer`
    of it. ``data_source``/``extra_info``/``kwargs`` are accepted for signature
    compatibility and ignored.

    A row that cannot be scored (a malformed ground truth such as ``[NaN]``, a solution that
    is not a string) scores 0 with ``reward_error`` = 1 instead of raising, as the gta
    managers do: verl gathers a batch's scores without ``return_exceptions``, so one raise
    would fail every rollout of the step. Every row carries the same four keys.

    Examples:
        >>> compute_score("hotpotqa", "<answer> The Beatles </answer>", {"target": ["Beatles"]})
        {'score': 1.0, 'acc': 1.0, 'f1': 1.0, 'reward_error': 0.0}
    """
    try:
        if not isinstance(solution_str, str):
            raise TypeError(f"solution_str must be the decoded response, got {type(solution_str).__name__}")
        answers, _, _ = parse_ground_truth(ground_truth)
        prediction = final_answer(solution_str)
        em = exact_match(prediction, answers)
        return {"score": em, "acc": em, "f1": f1(prediction, answers), "reward_error": 0.0}
    except Exception as exc:  # one bad row must not fail the batch
        logger.warning("gta compute_score: row scored 0 as an error: %s: %s", type(exc).__name__, exc)
        return {"score": 0.0, "acc": 0.0, "f1": 0.0, "reward_error": 1.0}
