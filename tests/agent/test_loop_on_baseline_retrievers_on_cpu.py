"""gta_search_agent on the ``dense`` and ``bm25`` backends: per-turn doc ids, metrics and the reward.

The loop, its extra fields and the trajectory-guided reward read only ``RetrievalResult.doc_ids``,
so a baseline retriever needs nothing of its own: the same scripted rollout as
``test_loop_on_cpu.py`` on the bundled MuSiQue KB, served by each baseline in process.
"""

from __future__ import annotations

import asyncio

import pytest

from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.retriever_access import in_process_client
from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
from gta_verl.data import schema
from gta_verl.data.schema import make_verl_row
from gta_verl.retrieval.backends import open_kb_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.rewards.trajectory import trajectory_reward


@pytest.mark.parametrize("backend", ["dense", "bm25"])
def test_rollout_records_the_backends_doc_ids(
    backend, qwen_tokenizer, musique_kb, embedder, musique_qa
) -> None:
    client = in_process_client(open_kb_retriever(musique_kb, RetrieverConfig(backend=backend), embedder))
    ex = next(q for q in musique_qa if len(q.supporting_texts) == 2 and len(q.supporting_doc_ids) == 2)
    titles = [t.split("\n", 1)[0] for t in ex.supporting_texts]
    script = [
        f"<search> {titles[0]} </search>",
        f"<search> {titles[1]} </search>",
        f"<answer> {ex.answers[0]} </answer>",
    ]
    manager = ScriptedServerManager(qwen_tokenizer, [script])
    cfg = make_trainer_config(
        prompt_length=1024, response_length=4096, gta={"agent": {"max_obs_tokens": 2048}}
    )
    (out,) = run_agent_rollouts([make_verl_row(ex, 0)], manager, qwen_tokenizer, client, cfg, n_samples=1)
    ef = out.extra_fields
    expected = asyncio.run(client.aretrieve(titles))
    assert ef[schema.EF_TURN_DOC_IDS] == [r.doc_ids for r in expected]
    assert [len(ids) for ids in ef[schema.EF_TURN_DOC_IDS]] == [3, 3]  # k_dense per turn
    assert ef[schema.EF_NUM_SEARCHES] == 2 and ef[schema.EF_RETRIEVAL_ERRORS] == 0
    # each gold passage is found by its own title, so both turns score a hit and the chain is complete
    assert all(g in ids for g, ids in zip(ex.supporting_doc_ids, ef[schema.EF_TURN_DOC_IDS], strict=True))
    r = trajectory_reward(ef[schema.EF_TURN_DOC_IDS], ex.supporting_doc_ids, ef[schema.EF_ANSWER], ex.answers)
    assert r.complete_chain and r.answer_reward == 2.0 and r.total == 2.5  # 0.25 + 0.25 + 2
