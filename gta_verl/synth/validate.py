"""Retriever-based and rule-based validation of synthetic trajectories (GTA-RAG §3.4).

An example (x, y*, S(x), τ*) is kept only if, at every search turn t, its
designated document d*_t is in R(q_t), the evidence the *deployed* retriever
returns for the turn's query — any :class:`gta_verl.retrieval.base.Retriever`
(an in-process backend of :mod:`gta_verl.retrieval.backends` or the Ray client) with the
training config.
Cheap rule checks run first; only rule-passing examples cost retrieval calls.

Every rejection carries one reason code (the first failing check):

====================================  ==============================================
``rule:unknown_doc``                  a path document is not in the KB
``rule:turns_ne_hops``                number of search turns ≠ H
``rule:target_order``                 turn t does not target path document t
``rule:empty_query``                  a turn has an empty search query
``rule:duplicate_queries``            two turns have the same (normalized) query
``rule:empty_answer``                 the answer normalizes to nothing
``rule:long_answer``                  answer longer than the configured limit
``rule:answer_in_question``           normalized answer occurs in the question
``rule:answer_not_in_last_doc``       answer not a normalized substring of d*_H
``rule:pasted_document_text``         question shares a long word n-gram with a path doc
``retrieval:error``                   the retriever failed on one of the queries
``retrieval:miss_turn_<t>``           d*_t ∉ R(q_t) (first missing turn, 1-based)
====================================  ==============================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gta_verl.data.types import Passage, Trajectory
from gta_verl.retrieval.base import Retriever
from gta_verl.synth.text import contains_phrase, longest_shared_ngram, normalize_answer


@dataclass(frozen=True)
class ValidationConfig:
    """Thresholds of the rule checks.

    Attributes:
        max_answer_words: Longest accepted answer, in words (short-answer QA, EM-scored).
        max_answer_chars: Longest accepted answer, in characters.
        paste_ngram: Reject a question sharing a run of this many words with a path
            document (the generator copied text instead of asking).
        check_retrieval: Run the retriever check; ``False`` is the
            "w/o trajectory validation" ablation (rules only).
        batch_size: Queries per ``retrieve`` call.
    """

    max_answer_words: int = 8
    max_answer_chars: int = 80
    paste_ngram: int = 10
    check_retrieval: bool = True
    batch_size: int = 64

    def __post_init__(self) -> None:
        for name in ("max_answer_words", "max_answer_chars", "paste_ngram", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ValidationConfig.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class ValidationReport:
    """Verdict on one trajectory."""

    trajectory: Trajectory
    reason: str | None = None
    """First failing check, ``None`` when the trajectory is kept."""
    rules_ok: bool = True
    turn_hits: tuple[bool, ...] = ()
    """Per turn, d*_t ∈ R(q_t) (empty when retrieval did not run)."""
    turn_doc_ids: tuple[tuple[str, ...], ...] = ()
    """Per turn, the ids R(q_t) returned."""

    @property
    def ok(self) -> bool:
        return self.reason is None


def _is_comparison(traj: Trajectory) -> bool:
    """A yes/no comparison of parallel sub-questions: its answer is a verdict, not document text."""
    return any(t.with_previous for t in traj.turns) and normalize_answer(traj.answer) in ("yes", "no")


def check_rules(
    traj: Trajectory, passages: Mapping[str, Passage], config: ValidationConfig | None = None
) -> str | None:
    """Return the first failing rule's reason code, or ``None`` if all pass."""
    config = config or ValidationConfig()
    if any(d not in passages for d in traj.path_doc_ids):
        return "rule:unknown_doc"
    if len(traj.turns) != traj.hops:
        return "rule:turns_ne_hops"
    if tuple(t.target_doc_id for t in traj.turns) != traj.path_doc_ids:
        return "rule:target_order"
    queries = [normalize_answer(t.query) for t in traj.turns]
    if not all(queries):
        return "rule:empty_query"
    if len(set(queries)) != len(queries):
        return "rule:duplicate_queries"
    answer = normalize_answer(traj.answer)
    if not answer:
        return "rule:empty_answer"
    if len(answer.split()) > config.max_answer_words or len(traj.answer) > config.max_answer_chars:
        return "rule:long_answer"
    if contains_phrase(traj.question, traj.answer):
        return "rule:answer_in_question"
    last = passages[traj.path_doc_ids[-1]].contents
    in_last = any(contains_phrase(last, a) for a in (traj.answer, *traj.answer_aliases))
    if not in_last and not _is_comparison(traj):
        return "rule:answer_not_in_last_doc"
    for d in traj.path_doc_ids:
        if longest_shared_ngram(traj.question, passages[d].text) >= config.paste_ngram:
            return "rule:pasted_document_text"
    return None


def validate_trajectories(
    trajectories: Sequence[Trajectory],
    retriever: Retriever | None,
    passages: Mapping[str, Passage],
    config: ValidationConfig | None = None,
) -> list[ValidationReport]:
    """Validate trajectories: rule checks, then one retrieval per search turn.

    Implements the keep condition of eq. 14: for every turn t, d*_t ∈ R(q_t).

    Args:
        trajectories: Candidate trajectories.
        retriever: The deployed retriever (same config as training); may be
            ``None`` only when ``config.check_retrieval`` is ``False``.
        passages: ``doc_id`` → passage of the KB.
        config: Rule thresholds and the retrieval switch.

    Returns:
        One report per trajectory, in order.
    """
    config = config or ValidationConfig()
    if config.check_retrieval and retriever is None:
        raise ValueError("validate_trajectories: a retriever is required when check_retrieval=True")
    reasons = [check_rules(t, passages, config) for t in trajectories]
    if not config.check_retrieval:
        return [
            ValidationReport(t, r, rules_ok=r is None) for t, r in zip(trajectories, reasons, strict=True)
        ]
    todo = [i for i, r in enumerate(reasons) if r is None]
    queries = [turn.query for i in todo for turn in trajectories[i].turns]
    results = []
    for start in range(0, len(queries), config.batch_size):
        chunk = queries[start : start + config.batch_size]
        got = retriever.retrieve(chunk)
        if len(got) != len(chunk):
            raise RuntimeError(f"retriever returned {len(got)} results for {len(chunk)} queries")
        results.extend(got)
    reports: list[ValidationReport | None] = [
        None if r is None else ValidationReport(t, r, rules_ok=False)
        for t, r in zip(trajectories, reasons, strict=True)
    ]
    pos = 0
    for i in todo:
        traj = trajectories[i]
        res = results[pos : pos + len(traj.turns)]
        pos += len(traj.turns)
        hits = tuple(turn.target_doc_id in r.doc_ids for turn, r in zip(traj.turns, res, strict=True))
        reason = None
        if any(not r.ok for r in res):
            reason = "retrieval:error"
        elif not all(hits):
            reason = f"retrieval:miss_turn_{hits.index(False) + 1}"
        reports[i] = ValidationReport(
            traj, reason, rules_ok=True, turn_hits=hits, turn_doc_ids=tuple(tuple(r.doc_ids) for r in res)
        )
    return [r for r in reports if r is not None]
