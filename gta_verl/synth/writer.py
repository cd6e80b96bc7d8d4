"""Stage-I dataset writer (verl parquet) and the synthesis statistics tables.

One row per trajectory, laid out by :func:`gta_verl.data.schema.make_verl_row`:

* ``prompt``: the rollout prompt shared with the agent loop (``gta_verl.protocol``);
* ``reward_model.ground_truth``: answers ``[y*, aliases…]``, ``target_doc_ids`` = S(x)
  (path documents in order) and their ``support_texts``;
* ``extra_info``: the reference trajectory τ* (``reference_trajectory``), ``hops``,
  ``path_doc_ids``, ``bridge_entities``, ``generator``, ``validated``;
* ``agent_name`` = ``"gta_search_agent"``, ``data_source`` = ``"gta_synth"``.

The file is written atomically (temp file + rename) and carries
``gta_verl.schema_version`` in its parquet key-value metadata.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl import SCHEMA_VERSION
from gta_verl.data.io import write_table_atomic
from gta_verl.data.schema import DEFAULT_AGENT_NAME, make_verl_row
from gta_verl.data.types import Passage, QAExample, Trajectory, TrajectoryTurn

DATA_SOURCE = "gta_synth"
STATS_HOPS = (2, 3, 4)


def _turn_dict(turn: TrajectoryTurn) -> dict[str, Any]:
    out: dict[str, Any] = {
        "reasoning": turn.reasoning,
        "query": turn.query,
        "target_doc_id": turn.target_doc_id,
    }
    if turn.with_previous:  # only parallel turns carry the key: one-query rows stay as they were
        out["with_previous"] = True
    return out


def trajectory_to_dict(traj: Trajectory) -> dict[str, Any]:
    """τ* as plain JSON-able data (tuples → lists)."""
    return {
        "question": traj.question,
        "answer": traj.answer,
        "answer_aliases": list(traj.answer_aliases),
        "turns": [_turn_dict(t) for t in traj.turns],
        "final_reasoning": traj.final_reasoning,
        "path_doc_ids": list(traj.path_doc_ids),
        "bridge_entities": [list(b) for b in traj.bridge_entities],
        "generator": traj.generator,
    }


def trajectory_to_row(
    traj: Trajectory,
    index: int,
    passages: Mapping[str, Passage],
    validated: bool = True,
    split: str = "train",
    max_queries_per_turn: int = 1,
) -> dict[str, Any]:
    """One verl parquet row for one trajectory (see module docstring).

    ``max_queries_per_turn`` is the K the rows will be trained with
    (``gta.agent.max_queries_per_turn``); above 1 the prompt says how to search several at once.
    """
    example = QAExample(
        qid=f"{DATA_SOURCE}-{index:06d}",
        question=traj.question,
        answers=(traj.answer, *traj.answer_aliases),
        supporting_doc_ids=traj.path_doc_ids,
        hops=traj.hops,
        data_source=DATA_SOURCE,
        split=split,
        supporting_texts=tuple(passages[d].contents for d in traj.path_doc_ids),
    )
    extra = {
        "reference_trajectory": trajectory_to_dict(traj),
        "path_doc_ids": list(traj.path_doc_ids),
        "bridge_entities": [list(b) for b in traj.bridge_entities],
        "generator": traj.generator,
        "validated": bool(validated),
    }
    return make_verl_row(
        example,
        index,
        agent_name=DEFAULT_AGENT_NAME,
        extra_info=extra,
        max_queries_per_turn=max_queries_per_turn,
    )


def write_stage1_parquet(
    trajectories: Sequence[Trajectory],
    out_path: str | Path,
    passages: Mapping[str, Passage],
    validated: bool = True,
    metadata: Mapping[str, Any] | None = None,
    max_queries_per_turn: int = 1,
) -> Path:
    """Write the Stage-I parquet atomically.

    Args:
        trajectories: Trajectories to write (row ``index`` = position).
        out_path: Destination ``.parquet`` path (parent directories are created).
        passages: ``doc_id`` → passage, for ``support_texts``.
        validated: Value of ``extra_info.validated`` (``False`` for the ablation set).
        metadata: Extra JSON-able file metadata (e.g. the funnel), stored under
            ``gta_verl.synth``.
        max_queries_per_turn: K of the prompts (:func:`trajectory_to_row`).

    Returns:
        The written path.
    """
    import pyarrow as pa

    if not trajectories:
        raise ValueError(f"write_stage1_parquet({out_path}): no trajectories to write")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        trajectory_to_row(t, i, passages, validated, max_queries_per_turn=max_queries_per_turn)
        for i, t in enumerate(trajectories)
    ]
    table = pa.Table.from_pylist(rows)
    meta = {b"gta_verl.schema_version": str(SCHEMA_VERSION).encode()}
    if metadata:
        meta[b"gta_verl.synth"] = json.dumps(metadata, default=str).encode()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    write_table_atomic(table, out)
    return out


def table4_stats(trajectories: Sequence[Trajectory], max_sampled_docs: int) -> dict[str, int]:
    """Counts in the layout of GTA-RAG Table 4 (validated trajectories and hop split)."""
    stats = {"validated_trajectories": len(trajectories)}
    for h in STATS_HOPS:
        stats[f"{h}_hop_trajectories"] = sum(t.hops == h for t in trajectories)
    other = sum(t.hops not in STATS_HOPS for t in trajectories)
    if other:
        stats["other_hop_trajectories"] = other
    stats["max_sampled_document_nodes_per_path"] = int(max_sampled_docs)
    return stats


def stats_markdown(stats: Mapping[str, int], funnel: Mapping[str, Any] | None = None) -> str:
    """Markdown of the Table-4 stats and, if given, the yield funnel with rejection reasons."""
    labels = {
        "validated_trajectories": "Validated trajectories",
        "max_sampled_document_nodes_per_path": "Maximum sampled document nodes per path",
    }
    lines = ["| Statistic | Value |", "|---|---:|"]
    for key, value in stats.items():
        label = labels.get(key, key.replace("_", " ").replace(" hop", "-hop").capitalize())
        lines.append(f"| {label} | {value:,} |")
    if funnel:
        lines += ["", "| Stage | Count | Rejected | Reasons |", "|---|---:|---:|---|"]
        for stage in funnel.get("stages", []):
            reasons = ", ".join(
                f"{k}: {v}" for k, v in sorted(stage["reasons"].items(), key=lambda kv: -kv[1])
            )
            lines.append(f"| {stage['name']} | {stage['count']:,} | {stage['rejected']:,} | {reasons} |")
    return "\n".join(lines) + "\n"
