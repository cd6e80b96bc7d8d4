"""How the agent loop reaches the retriever: injection, in-process from gta.retriever, errors."""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf

from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.config import AgentConfig
from gta_verl.agent.retriever_access import (
    clear_retriever_cache,
    get_retriever_client,
    set_process_retriever_client,
)
from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
from gta_verl.data import schema
from gta_verl.data.schema import make_verl_row
from gta_verl.data.types import QAExample


@pytest.fixture(autouse=True)
def _clean():
    clear_retriever_cache()
    yield
    clear_retriever_cache()


def test_injected_client_wins(fake_retriever) -> None:
    set_process_retriever_client(fake_retriever)
    assert get_retriever_client(OmegaConf.create({}), AgentConfig()) is fake_retriever


def test_loop_uses_the_process_client_when_none_is_passed(qwen_tokenizer, fake_retriever) -> None:
    set_process_retriever_client(fake_retriever)
    row = make_verl_row(QAExample("q", "Who?", ("a",)), 0)
    manager = ScriptedServerManager(qwen_tokenizer, [["<search> x </search>", "<answer> a </answer>"]])
    (out,) = run_agent_rollouts([row], manager, qwen_tokenizer, None, make_trainer_config())
    assert out.extra_fields[schema.EF_TURN_DOC_IDS] == [["d:x"]] and fake_retriever.queries == ["x"]
    # the prompt is the chat-templated dataset prompt, as verl's worker builds it
    expected = qwen_tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    assert qwen_tokenizer.decode(out.prompt_ids) == expected


def test_missing_kb_dir_is_an_actionable_error() -> None:
    with pytest.raises(ValueError, match=r"gta\.retriever\.kb_dir is not set"):
        get_retriever_client(OmegaConf.create({"gta": {}}), AgentConfig(retriever_transport="inprocess"))


def test_missing_kb_dir_becomes_an_error_observation(qwen_tokenizer) -> None:
    # inside a rollout a broken retriever setup must not kill the trajectory
    row = make_verl_row(QAExample("q", "Who?", ("a",)), 0)
    manager = ScriptedServerManager(qwen_tokenizer, [["<search> x </search>", "<answer> a </answer>"]])
    cfg = make_trainer_config(gta={"agent": {"retriever_transport": "inprocess"}})
    (out,) = run_agent_rollouts([row], manager, qwen_tokenizer, None, cfg)
    assert out.extra_fields[schema.EF_RETRIEVAL_ERRORS] == 1
    assert "kb_dir is not set" in qwen_tokenizer.decode(out.response_ids)


def test_in_process_from_gta_retriever_is_cached(musique_kb_dir, embedder) -> None:
    cfg = OmegaConf.create(
        {"gta": {"retriever": {"kb_dir": str(musique_kb_dir), "k_graph": 2, "k_dense": 1}}}
    )
    agent = AgentConfig(retriever_transport="auto")  # Ray is not initialised → in-process
    client = get_retriever_client(cfg, agent)
    assert get_retriever_client(cfg, agent) is client
    (res,) = asyncio.run(client.aretrieve(["Who founded the university?"]))
    assert res.ok and 1 <= len(res.hits) <= 3
