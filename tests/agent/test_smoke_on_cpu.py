"""The CPU end-to-end RL smoke and its CLI."""

from __future__ import annotations

import argparse

import pytest

from gta_verl.agent.smoke import guide_plan, reference_queries
from gta_verl.data.schema import make_verl_row


@pytest.fixture(scope="module")
def smoke_parquet(tmp_path_factory, musique_qa):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [make_verl_row(q, i) for i, q in enumerate(musique_qa[:6])]
    path = tmp_path_factory.mktemp("smoke") / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_guide_plan_schedule(musique_qa) -> None:
    ex = next(q for q in musique_qa if len(q.supporting_doc_ids) == 2)
    row = make_verl_row(ex, 0)
    titles = [t.split("\n", 1)[0] for t in ex.supporting_texts]
    assert reference_queries(row) == titles
    assert guide_plan(row, 0, 4) == []
    assert guide_plan(row, 1, 4) == [f" <search> {titles[0]} </search>", " <answer> I do not know </answer>"]
    assert guide_plan(row, 3, 4)[-1] == f" <answer> {ex.answers[0]} </answer>"
    assert len(guide_plan(row, 3, 4)) == 3
    row["extra_info"]["reference_trajectory"] = {"turns": [{"query": "q one"}, {"query": "q two"}]}
    assert reference_queries(row) == ["q one", "q two"]


def test_smoke_end_to_end(musique_kb_dir, smoke_parquet, musique_retriever_client) -> None:
    from gta_verl.agent.smoke import run_smoke

    rep = run_smoke(
        musique_kb_dir,
        smoke_parquet,
        n_questions=2,
        group=3,
        seed=0,
        retriever_client=musique_retriever_client,
    )
    assert rep.max_abs_grad_on_masked == 0.0  # observation / invalid / padding tokens get no gradient
    assert rep.generated_tokens_with_grad > 0 and rep.grad_norm > 0
    assert rep.masked_tokens > 0 and rep.generated_tokens + rep.masked_tokens == rep.response_tokens
    for q in range(2):
        assert rep.acc[q][0] == 0.0 and rep.rewards[q][0] == -1.0  # free rollout: no answer
        assert rep.acc[q][2] == 1.0  # the gold answer is forced on the last rollout
        assert rep.searches[q][2] == rep.forced_searches[q][2] >= 1
        assert abs(sum(rep.advantages[q])) < 1e-4  # GRPO advantages are centred per group
        assert rep.rewards[q][2] > rep.rewards[q][0]
    assert abs(rep.ppo_kl) < 1e-4  # on-policy: backend log-probs = training forward
    text = rep.markdown()
    assert "max |dL/dlogp| on mask-0 tokens = 0.0e+00" in text and "not learning" in text


def test_cli_registers_smoke(tmp_path, capsys) -> None:
    from gta_verl.agent.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["smoke", "--kb", str(tmp_path), "--data", str(tmp_path / "missing.parquet")])
    assert (args.n_questions, args.group, args.seed, args.json) == (4, 4, 0, False)
    assert args.func(args) == 2
    assert "does not exist" in capsys.readouterr().err
