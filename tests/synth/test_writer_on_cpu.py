"""Stage-I parquet: schema, atomic write, Table-4 stats, and loading with verl's RLHFDataset."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from gta_verl import SCHEMA_VERSION
from gta_verl.data.schema import parse_ground_truth
from gta_verl.data.types import Trajectory, TrajectoryTurn
from gta_verl.synth.writer import stats_markdown, table4_stats, trajectory_to_row, write_stage1_parquet


def _traj(kb, hops: int = 2) -> Trajectory:
    docs = kb.passages[:hops]
    return Trajectory(
        question="What is the entity that (the entity that Barack Obama born in) capital of?",
        answer="Hawaii",
        turns=tuple(TrajectoryTurn(f"r{i}", f"q{i}", d.doc_id) for i, d in enumerate(docs)),
        path_doc_ids=tuple(d.doc_id for d in docs),
        bridge_entities=(("honolulu",),) * (hops - 1),
        generator="template",
        final_reasoning="so Hawaii",
        answer_aliases=("State of Hawaii",),
    )


def test_row_layout(tiny_kb):
    passages = {p.doc_id: p for p in tiny_kb.passages}
    row = trajectory_to_row(_traj(tiny_kb), 3, passages)
    assert row["data_source"] == "gta_synth" and row["agent_name"] == "gta_search_agent"
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"].endswith("capital of?\n")
    answers, doc_ids, texts = parse_ground_truth(row["reward_model"]["ground_truth"])
    assert answers == ["Hawaii", "State of Hawaii"]
    assert doc_ids == [p.doc_id for p in tiny_kb.passages[:2]]
    assert texts[0] == tiny_kb.passages[0].contents
    info = row["extra_info"]
    assert info["index"] == 3 and info["hops"] == 2 and info["generator"] == "template"
    assert info["reference_trajectory"]["turns"][1] == {
        "reasoning": "r1",
        "query": "q1",
        "target_doc_id": tiny_kb.passages[1].doc_id,
    }
    json.dumps(row)  # plain JSON-able data


def test_parquet_is_atomic_and_versioned(tiny_kb, tmp_path):
    passages = {p.doc_id: p for p in tiny_kb.passages}
    out = write_stage1_parquet(
        [_traj(tiny_kb, 2), _traj(tiny_kb, 3)],
        tmp_path / "a" / "s1.parquet",
        passages,
        metadata={"funnel": {"sampled": 2}},
    )
    assert sorted(p.name for p in out.parent.iterdir()) == ["s1.parquet"]  # no temp file left
    table = pq.read_table(out)
    meta = table.schema.metadata
    assert meta[b"gta_verl.schema_version"] == str(SCHEMA_VERSION).encode()
    assert json.loads(meta[b"gta_verl.synth"])["funnel"]["sampled"] == 2
    assert table.num_rows == 2 and table.column("extra_info").to_pylist()[1]["hops"] == 3
    with pytest.raises(ValueError, match="no trajectories"):
        write_stage1_parquet([], tmp_path / "empty.parquet", passages)


def test_table4_layout(tiny_kb):
    trajs = [_traj(tiny_kb, 2)] * 3 + [_traj(tiny_kb, 3)] + [_traj(tiny_kb, 4)]
    stats = table4_stats(trajs, max_sampled_docs=10)
    assert stats == {
        "validated_trajectories": 5,
        "2_hop_trajectories": 3,
        "3_hop_trajectories": 1,
        "4_hop_trajectories": 1,
        "max_sampled_document_nodes_per_path": 10,
    }
    md = stats_markdown(
        stats,
        {
            "stages": [
                {"name": "validated", "count": 5, "rejected": 2, "reasons": {"retrieval:miss_turn_2": 2}}
            ]
        },
    )
    assert "| Validated trajectories | 5 |" in md and "| 2-hop trajectories | 3 |" in md
    assert "| validated | 5 | 2 | retrieval:miss_turn_2: 2 |" in md


def test_parquet_loads_with_verl_rlhf_dataset(musique_kb, musique_synthesis, tmp_path):
    from omegaconf import OmegaConf

    from gta_verl.agent.tokenizer import load_qwen_tokenizer
    from gta_verl.verl_compat import RLHFDataset

    passages = {p.doc_id: p for p in musique_kb.passages}
    out = write_stage1_parquet(musique_synthesis.validated, tmp_path / "stage1.parquet", passages)
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": 1024,
            "filter_overlong_prompts": True,
            "cache_dir": str(tmp_path / "cache"),
            "filter_overlong_prompts_workers": 1,
        }
    )
    ds = RLHFDataset(str(out), load_qwen_tokenizer(), config)
    assert len(ds) == len(musique_synthesis.validated)
    item = ds[0]
    assert item["raw_prompt"][0]["role"] == "user"
    assert item["agent_name"] == "gta_search_agent" and item["data_source"] == "gta_synth"
    gt = item["reward_model"]["ground_truth"]
    assert list(gt["target_doc_ids"]) == list(musique_synthesis.validated[0].path_doc_ids)
    assert item["extra_info"]["reference_trajectory"]["answer"] == musique_synthesis.validated[0].answer
