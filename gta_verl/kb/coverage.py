"""Does a KB hold the gold paragraphs of a QA set? (Stage II must not train against a corpus that lacks them.)

Per question, coverage = |gold ids present in the KB| / |gold ids|, with gold ids from
``reward_model.ground_truth.target_doc_ids`` (ids are content hashes of title + text, so a paragraph in the KB
matches whatever file it came from). Questions with no gold ids are counted apart, never as covered:
the mean is over questions with gold ids, and a set whose questions are mostly without gold ids fails
the ``kb check-coverage`` gate unless the user allows it (one covered question among 99 without gold
ids would otherwise read 1.0).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CoverageReport:
    """Gold-paragraph coverage of one QA set by one KB."""

    n_questions: int
    n_without_gold: int
    mean_coverage: float  # over questions with gold ids
    n_fully_covered: int
    n_uncovered: int  # questions with gold ids of which none is in the KB

    @property
    def mostly_without_gold(self) -> bool:
        """True when more than half of the questions have no gold ids (the mean speaks for a minority)."""
        return 2 * self.n_without_gold > self.n_questions

    def markdown(self, name: str = "") -> str:
        n = self.n_questions - self.n_without_gold
        return "\n".join(
            [
                "| QA set | questions | with gold ids | mean gold coverage | fully covered | none covered |",
                "|---|---:|---:|---:|---:|---:|",
                f"| {name} | {self.n_questions} | {n} | {self.mean_coverage:.3f} | {self.n_fully_covered} | "
                f"{self.n_uncovered} |",
            ]
        )


def gold_coverage(gold_ids: Sequence[Sequence[str]], kb_ids: Collection[str]) -> CoverageReport:
    """Coverage of each question's gold ids by ``kb_ids``.

    Examples:
        Question 1 has both gold paragraphs, question 2 one of two, question 3 none, question 4 no gold:
        mean = (1 + 0.5 + 0) / 3 = 0.5.

        >>> r = gold_coverage([["a", "b"], ["a", "x"], ["y"], []], {"a", "b"})
        >>> (r.mean_coverage, r.n_fully_covered, r.n_uncovered, r.n_without_gold)
        (0.5, 1, 1, 1)
    """
    fracs = []
    for ids in gold_ids:
        uniq = set(ids)
        if uniq:
            fracs.append(len(uniq & set(kb_ids)) / len(uniq))
    return CoverageReport(
        n_questions=len(gold_ids),
        n_without_gold=len(gold_ids) - len(fracs),
        mean_coverage=sum(fracs) / len(fracs) if fracs else 0.0,
        n_fully_covered=sum(f == 1.0 for f in fracs),
        n_uncovered=sum(f == 0.0 for f in fracs),
    )
