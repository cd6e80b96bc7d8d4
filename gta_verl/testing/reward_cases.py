"""The shape of a hand-computed trajectory-guided reward case, and its loader.

The table itself is data of the test suite: ``tests/rewards/reward_cases.yaml`` (each case one
rollout: the generated response text, R(q_t) per search turn, S(x), the gold aliases, and the
values worked out by hand from eqs 15–19 with the paper's rewards; ``total`` is R_traj, ``em``
also R_EM (eq 19)). The reward tests load it through ``tests/rewards/cases.py``,
``benchmarks/kb/reliability_batch.py`` with :func:`load_cases`; the manager inputs are built by
:mod:`gta_verl.testing.reward_data`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class Case:
    """One rollout and its hand-computed reward values.

    Attributes:
        name: The test id.
        response: The generated response text (no prompt, no end-of-turn token).
        turn_doc_ids: The doc ids retrieved in each search turn (R(q_t)).
        targets: The supporting doc ids S(x).
        answers: The gold answer aliases.
        total: R_traj.
        search_rewards: The per-turn search rewards.
        answer_reward: The answer term (+2, +1 or −1).
        em: Exact match of the final answer (also R_EM).
        complete: Whether the turns retrieved every target (C_T ⊇ S).
        cov: The fraction of targets retrieved.
        zero_turns: The number of search turns that found no new target.
    """

    name: str
    response: str
    turn_doc_ids: tuple[tuple[str, ...], ...]
    targets: tuple[str, ...]
    answers: tuple[str, ...]
    total: float
    search_rewards: tuple[float, ...]
    answer_reward: float
    em: float
    complete: bool
    cov: float
    zero_turns: int


def load_cases(path: Path) -> tuple[Case, ...]:
    """The cases of a YAML table (a list of mappings with exactly :class:`Case`'s fields).

    Args:
        path: The table, e.g. ``tests/rewards/reward_cases.yaml``.

    Returns:
        The cases in file order, sequences as tuples.

    Raises:
        ValueError: A case lacks a field or has one :class:`Case` does not.
    """
    import yaml

    names = [f.name for f in fields(Case)]
    cases = []
    for i, row in enumerate(yaml.safe_load(path.read_text(encoding="utf-8"))):
        if sorted(row) != sorted(names):
            raise ValueError(f"{path}: case {i} has fields {sorted(row)}, expected {sorted(names)}")
        row["turn_doc_ids"] = tuple(tuple(t) for t in row["turn_doc_ids"])
        for key in ("targets", "answers", "search_rewards"):
            row[key] = tuple(row[key])
        cases.append(Case(**row))
    return tuple(cases)
