"""Hand-computed trajectory-guided reward cases shared by the reward tests and benchmarks.

Each case is one rollout: the generated response text, R(q_t) per search turn, S(x), the
gold aliases, and the values worked out by hand from eqs 15–19 with the paper's rewards
(+0.25 per new target doc, −0.10 miss, −1 wrong, +1 correct & incomplete, +2 correct &
complete). ``total`` is R_traj; ``em`` is also R_EM (eq 19).

The pure-function tests (``tests/rewards/test_trajectory_on_cpu.py``, ``test_shaping_on_cpu.py``),
the verl reward-manager tests (``test_managers_on_cpu.py``, through
:mod:`gta_verl.testing.reward_data`) and ``benchmarks/reliability_batch.py`` read them.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def _search(q: str, docs: str = "Doc 1(Title: T) text") -> str:
    return f"<think>need {q}</think>\n<search> {q} </search>\n\n<info>{docs}</info>\n\n"


S2 = ("d1", "d2")
PARIS = ("Paris",)

CASES: tuple[Case, ...] = (
    # Shortcut: answers from memory, no search. C_T = ∅ ⊉ S → +1.
    Case(
        "shortcut_correct",
        "<think>I know</think>\n<answer> Paris </answer>",
        (),
        S2,
        PARIS,
        1.0,
        (),
        1.0,
        1.0,
        False,
        0.0,
        0,
    ),
    Case("shortcut_wrong", "<answer> Lyon </answer>", (), S2, PARIS, -1.0, (), -1.0, 0.0, False, 0.0, 0),
    # Full chain, one new target per turn: 0.25 + 0.25 + 2 = 2.5.
    Case(
        "full_chain",
        _search("a") + _search("b") + "<answer> Paris </answer>",
        (("d1", "x"), ("d2", "y")),
        S2,
        PARIS,
        2.5,
        (0.25, 0.25),
        2.0,
        1.0,
        True,
        1.0,
        0,
    ),
    # Both targets in one turn: 0.25·2 + 2 = 2.5.
    Case(
        "both_in_one_turn",
        _search("a") + "<answer> Paris </answer>",
        (("d1", "d2", "x"),),
        S2,
        PARIS,
        2.5,
        (0.5,),
        2.0,
        1.0,
        True,
        1.0,
        0,
    ),
    # Repeated document: the second d1 is in C_2 → miss. 0.25 − 0.1 + 0.25 + 2 = 2.4.
    Case(
        "repeated_doc",
        _search("a") + _search("a again") + _search("b") + "<answer> Paris </answer>",
        (("d1",), ("d1",), ("d2",)),
        S2,
        PARIS,
        2.4,
        (0.25, -0.1, 0.25),
        2.0,
        1.0,
        True,
        1.0,
        1,
    ),
    # Zero-target turns only, correct anyway: −0.1 − 0.1 + 1 = 0.8.
    Case(
        "zero_target_turns",
        _search("a") + _search("b") + "<answer> paris </answer>",
        (("x",), ("y",)),
        S2,
        PARIS,
        0.8,
        (-0.1, -0.1),
        1.0,
        1.0,
        False,
        0.0,
        2,
    ),
    # Partial chain, correct: 0.25 − 0.1 + 1 = 1.15.
    Case(
        "partial_chain",
        _search("a") + _search("b") + "<answer> Paris </answer>",
        (("d1",), ("x",)),
        S2,
        PARIS,
        1.15,
        (0.25, -0.1),
        1.0,
        1.0,
        False,
        0.5,
        1,
    ),
    # No answer (budget exhausted) after the full chain: 0.25 + 0.25 − 1 = −0.5.
    Case(
        "no_answer",
        _search("a") + _search("b") + "<think>still unsure</think>",
        (("d1",), ("d2",)),
        S2,
        PARIS,
        -0.5,
        (0.25, 0.25),
        -1.0,
        0.0,
        True,
        1.0,
        0,
    ),
    # Alias match after SQuAD normalization: 0.5 + 2 = 2.5.
    Case(
        "alias",
        _search("a") + "<answer> the City of Light! </answer>",
        (("d2", "d1"),),
        S2,
        ("Paris", "City of Light"),
        2.5,
        (0.5,),
        2.0,
        1.0,
        True,
        1.0,
        0,
    ),
    # The prompt's "<answer> Beijing </answer>" example must not count (Search-R1 #79):
    # the response has no answer → wrong. 0.25 − 1 = −0.75.
    Case(
        "answer_in_prompt_example_only",
        _search("a") + "<think>hmm</think>",
        (("d1",),),
        S2,
        ("Beijing",),
        -0.75,
        (0.25,),
        -1.0,
        0.0,
        False,
        0.5,
        0,
    ),
    # A stray "<answer>" opener in the first turn's reasoning is not an action: that turn's
    # first closer is </search>, so it is a search, and the final answer is the second
    # turn's (the loop records "Paris"). 0.25·2 + 2 = 2.5. (Before the one parser, the
    # reward read " might be Lyon, let me check … <answer> Paris " → EM 0 → 0.5 − 1.)
    Case(
        "stray_answer_opener_then_right",
        "<think>I think <answer> might be Lyon, let me check</think>\n"
        + _search("a")[len("<think>need a</think>\n") :]
        + "<answer> Paris </answer>",
        (("d1", "d2"),),
        S2,
        PARIS,
        2.5,
        (0.5,),
        2.0,
        1.0,
        True,
        1.0,
        0,
    ),
    # The same with a wrong final answer: 0.25·2 − 1 = −0.5 (the stray "Paris" never counts).
    Case(
        "stray_answer_opener_then_wrong",
        "I guess <answer> Paris maybe <search> a </search>\n\n<info>Doc 1(Title: T) x</info>\n\n"
        + "<answer> London </answer>",
        (("d1", "d2"),),
        S2,
        PARIS,
        -0.5,
        (0.5,),
        -1.0,
        0.0,
        True,
        1.0,
        0,
    ),
    # Wrong answer after the full chain: 0.5 − 1 = −0.5.
    Case(
        "wrong_full_chain",
        _search("a") + _search("b") + "<answer> Lyon </answer>",
        (("d1",), ("d2",)),
        S2,
        PARIS,
        -0.5,
        (0.25, 0.25),
        -1.0,
        0.0,
        True,
        1.0,
        0,
    ),
    # A failed retrieval returns no docs → miss: −0.1 + 0.5 + 2 = 2.4.
    Case(
        "failed_retrieval_turn",
        _search("a", "Search failed: timeout.") + _search("b") + "<answer> Paris </answer>",
        ((), ("d1", "d2")),
        S2,
        PARIS,
        2.4,
        (-0.1, 0.5),
        2.0,
        1.0,
        True,
        1.0,
        1,
    ),
    # Three hops, duplicate id inside one turn counted once: 0.5 + 0.25 + 2 = 2.75.
    Case(
        "three_hop_dup_in_turn",
        _search("a") + _search("b") + "<answer> Paris </answer>",
        (("d1", "d1", "d2"), ("d3",)),
        ("d1", "d2", "d3"),
        PARIS,
        2.75,
        (0.5, 0.25),
        2.0,
        1.0,
        True,
        1.0,
        0,
    ),
    # S(x) = ∅ (natural QA): searches score 0, C_T ⊇ ∅ → +2.
    Case(
        "empty_targets",
        _search("a") + "<answer> Paris </answer>",
        (("x",),),
        (),
        PARIS,
        2.0,
        (0.0,),
        2.0,
        1.0,
        True,
        1.0,
        1,
    ),
    # A retrieved passage containing an answer tag is not the policy's answer: 0.25 − 1.
    Case(
        "answer_leaked_in_observation",
        _search("a", "Doc 1 <answer> Paris </answer>") + "<think>?</think>",
        (("d1",),),
        S2,
        PARIS,
        -0.75,
        (0.25,),
        -1.0,
        0.0,
        False,
        0.5,
        0,
    ),
    # Truncated mid-answer: an unclosed tag is no answer. −0.1 − 1.
    Case(
        "unclosed_answer",
        _search("a") + "<answer> Par",
        (("x",),),
        S2,
        PARIS,
        -1.1,
        (-0.1,),
        -1.0,
        0.0,
        False,
        0.0,
        1,
    ),
)
