"""Reference-replay policy: the agent text that executes a synthesized trajectory τ*.

Replaying τ* through the *real* agent loop and retriever is the oracle row of an
evaluation report on Stage-I data: it shows what the evidence metrics read when
every search turn issues the reference query, and it checks end to end that the
trajectories synthesis kept are executable by the deployed retriever (a validated
τ* must reach TargetDocCov = CompleteTrajCov = 1 under the same retriever config).
It is not a learned policy and is labelled as such in reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gta_verl.data.schema import plain_value
from gta_verl.protocol import ANSWER_CLOSE, ANSWER_OPEN, QUERY_SEPARATOR, SEARCH_CLOSE, SEARCH_OPEN


def reference_script(row: Mapping[str, Any]) -> list[str]:
    """Generation-call texts (one per turn) that replay a Stage-I row's τ*.

    Args:
        row: A verl parquet row written by ``gta_verl.synth.writer`` (its
            ``extra_info.reference_trajectory`` holds τ*).

    Returns:
        ``["<think>r_1</think>\\n<search> q_1 </search>", …, "<think>…</think>\\n<answer> y* </answer>"]``;
        turns marked ``with_previous`` join the previous action as ``<search> q_1 ## q_2 </search>``
        (replay those with ``gta.agent.max_queries_per_turn`` > 1).

    Raises:
        ValueError: If the row has no reference trajectory (natural QA rows have none).
    """
    ref = plain_value((row.get("extra_info") or {}).get("reference_trajectory"))
    if not isinstance(ref, Mapping) or not ref:
        raise ValueError("row has no extra_info.reference_trajectory (only Stage-I synthetic rows do)")
    actions: list[tuple[list[str], list[str]]] = []  # (reasonings, queries) per search action
    turns = ref.get("turns")
    for turn in [] if turns is None else plain_value(turns):
        reasoning = str(turn.get("reasoning") or "").strip()
        if turn.get("with_previous") and actions:
            actions[-1][0].append(reasoning)
            actions[-1][1].append(str(turn["query"]))
        else:
            actions.append(([reasoning], [str(turn["query"])]))
    texts = [
        f"<think>{' '.join(r for r in reasonings if r)}</think>\n"
        f"{SEARCH_OPEN} {f' {QUERY_SEPARATOR} '.join(queries)} {SEARCH_CLOSE}"
        for reasonings, queries in actions
    ]
    final = str(ref.get("final_reasoning") or "").strip()
    texts.append(f"<think>{final}</think>\n{ANSWER_OPEN} {ref['answer']} {ANSWER_CLOSE}")
    return texts


def reference_scripts(rows: Sequence[Mapping[str, Any]], n_samples: int = 1) -> list[list[str]]:
    """One script per rollout, in the runner's order (row-major, ``n_samples`` per row)."""
    return [reference_script(row) for row in rows for _ in range(n_samples)]
