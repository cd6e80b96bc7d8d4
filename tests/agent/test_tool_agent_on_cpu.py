"""verl's own ``tool_agent`` loop with our ``GraphSearchTool``, scored by our reward manager unchanged.

verl's code throughout, as its ``AgentLoopWorker`` runs it: the tools come from our YAML through
``load_all_tools`` (``multi_turn.tool_config_path``), the loop is instantiated from verl's
registry entry ``tool_agent`` with ``hydra.utils.instantiate``, the model's turns are Qwen2.5
native tool calls (``<tool_call>`` JSON, the ``hermes`` parser) rendered by Qwen2.5's tool
chat template, and ``AgentLoopWorkerTQ._agent_loop_postprocess`` scores the output through a
reward worker handle running our ``trajectory_guided`` manager's ``run_single``. Only the
model (scripted turns) and the retriever (one deterministic hit per query) are stand-ins.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import hydra
import pytest
from hydra import compose, initialize_config_dir

import gta_verl
from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.chat_templates import QWEN25_TOOL_CHAT_TEMPLATE
from gta_verl.agent.retriever_access import clear_retriever_cache, set_process_retriever_client
from gta_verl.agent.runner import row_to_kwargs, sampling_params_from_config
from gta_verl.agent.tool import GraphSearchTool, ToolSettings
from gta_verl.data import schema
from gta_verl.data.types import QAExample
from gta_verl.rewards.managers import TrajectoryGuidedRewardManager
from gta_verl.verl_compat import (
    AGENT_LOOP_REGISTRY,
    DictConfigWrap,
    RLHFDataset,
    ToolListWrap,
    load_all_tools,
)
from tests.support.in_process_actors import Remote

agent_loop_tq = pytest.importorskip("verl.trainer.ppo.v1.agent_loop_tq")

CONFIG_DIR = Path(gta_verl.__file__).parent / "config"
TOOLS_YAML = CONFIG_DIR / "tools" / "graph_search.yaml"
QUESTION = QAExample(
    "q1", "Who directed the film that won the award?", ("Nolan",), ("d:film", "d:award"), 2, "toy"
)


def _call(query: str) -> str:
    return f'\n<tool_call>\n{{"name": "search", "arguments": {{"query": "{query}"}}}}\n</tool_call>'


TURNS = ["I need the film." + _call("film"), "Now the award." + _call("award"), "<answer> Nolan </answer>"]


@pytest.fixture()
def tool_tokenizer(qwen_tokenizer):
    tok = copy.deepcopy(qwen_tokenizer)
    tok.chat_template = QWEN25_TOOL_CHAT_TEMPLATE  # what a Qwen2.5-Instruct checkpoint ships
    return tok


@pytest.fixture()
def retriever(fake_retriever):
    set_process_retriever_client(fake_retriever)  # what the job's Ray actor client would be
    yield fake_retriever
    clear_retriever_cache()


def _config(response_length: int = 1024):
    overrides = [
        "data.train_files=t.parquet",
        "data.val_files=v.parquet",
        "actor_rollout_ref.model.path=m",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOLS_YAML}",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=2048",
        "actor_rollout_ref.rollout.prompt_length=1024",
        f"actor_rollout_ref.rollout.response_length={response_length}",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose("gta_grpo", overrides)


def _run_tool_agent(cfg, tokenizer, row):
    server = ScriptedServerManager(tokenizer, [TURNS])
    tools = load_all_tools(cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path, None)

    async def one():  # built inside the event loop, as in verl's worker (the loop keeps it)
        loop = hydra.utils.instantiate(
            config=AGENT_LOOP_REGISTRY["tool_agent"],
            trainer_config=DictConfigWrap(config=cfg),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type="qwen2",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            tools=ToolListWrap(tools),
        )
        return await loop.run(sampling_params_from_config(cfg), **row_to_kwargs(row))

    return tools, asyncio.run(one())


def _postprocess(output, row, cfg, tokenizer, monkeypatch) -> dict[str, Any]:
    manager = TrajectoryGuidedRewardManager(config=cfg, tokenizer=tokenizer)
    handle = type("RewardWorker", (), {"compute_score": Remote(manager.run_single)})()
    captured: dict[str, Any] = {}

    async def put(keys, fields, tags, partition_id):
        captured.update(fields=fields, tags=tags)

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", put)
    worker = object.__new__(agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__)
    worker.reward_loop_worker_handles, worker.processor, worker.distillation_enabled = [handle], None, False
    worker.mm_processor_kwargs = None
    kwargs = {**row_to_kwargs(row), "uid": "u0", "session_id": 0, "global_steps": 1}
    asyncio.run(worker._agent_loop_postprocess(output, False, **kwargs))
    return captured


def test_tool_agent_trains_on_our_reward(tool_tokenizer, retriever, monkeypatch):
    cfg = _config()
    row = schema.tool_agent_row(schema.make_verl_row(QUESTION, 0))
    assert row["agent_name"] == "tool_agent" and "search tool" in row["prompt"][0]["content"]
    tools, output = _run_tool_agent(cfg, tool_tokenizer, row)
    assert [type(t) for t in tools] == [GraphSearchTool]
    assert tools[0].name == "search" and tools[0].settings == ToolSettings()  # the YAML's values = defaults
    assert retriever.queries == ["film", "award"]

    # Our tool wrote the search turns into the trajectory's extra_fields, in the loop's contract.
    extra = output.extra_fields
    assert extra[schema.EF_TURN_QUERIES] == ["film", "award"]
    assert extra[schema.EF_TURN_DOC_IDS] == [["d:film"], ["d:award"]]
    assert extra[schema.EF_TURN_TEXTS] == [["T film\ntext about film"], ["T award\ntext about award"]]
    assert (extra[schema.EF_NUM_SEARCHES], extra[schema.EF_RETRIEVAL_ERRORS]) == (2, 0)

    captured = _postprocess(output, row, cfg, tool_tokenizer, monkeypatch)
    info = captured["fields"]["extra_fields"][0]["reward_extra_info"]
    # Unchanged manager: +0.25 per search showing a new target (eq 16), +2 for the right
    # answer with the chain complete (eq 17): R = 0.25 + 0.25 + 2 = 2.5; the answer is read
    # from the response text (tool_agent records no gta/answer).
    assert output.reward_score == pytest.approx(2.5)
    assert info["acc"] == 1.0 and info["target_doc_cov"] == 1.0
    assert json.loads(info["turn_rewards_json"]) == [0.25, 0.25]

    # Loss mask: 1 on exactly the scripted (policy) tokens, in order; the tool responses are 0.
    ids, mask = output.response_ids, output.response_mask
    policy = [t for t, m in zip(ids, mask, strict=True) if m == 1]
    generated = [t for turn in TURNS for t in tool_tokenizer.encode(turn, add_special_tokens=False)]
    assert policy == generated
    observed = tool_tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
    assert observed.count("<tool_response>") == 2 and "Doc 1(Title: T film) text about film" in observed
    assert captured["fields"]["loss_mask"][0].tolist() == list(mask)


def test_tool_records_only_shown_passages_and_invalid_calls(retriever):
    from types import SimpleNamespace

    tool = load_all_tools(str(TOOLS_YAML), None)[0]
    data = SimpleNamespace(extra_fields={})
    resp, reward, metrics = asyncio.run(tool.execute("i", {"query": "  "}, agent_data=data))
    assert (
        data.extra_fields[schema.EF_INVALID_ACTIONS] == 1 and data.extra_fields[schema.EF_NUM_SEARCHES] == 0
    )
    resp, reward, metrics = asyncio.run(tool.execute("i", {"query": "film"}, agent_data=data))
    assert resp.text == "<info>Doc 1(Title: T film) text about film</info>"
    assert (reward, metrics) == (0.0, {"num_docs": 1})
    assert (
        data.extra_fields[schema.EF_TURN_DOC_IDS] == [["d:film"]]
        and data.extra_fields[schema.EF_NUM_SEARCHES] == 1
    )
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['topk'\] under GraphSearchTool config"):
        ToolSettings.from_tool_config({"type": "native", "topk": 3})


def _blocks(mask) -> list[tuple[int, int]]:
    """[start, end) of every run of 0s (tool responses) in a response mask."""
    runs, start = [], None
    for i, m in enumerate([*mask, 1]):
        if m == 0 and start is None:
            start = i
        elif m == 1 and start is not None:
            runs.append((start, i))
            start = None
    return runs


def test_a_tool_response_cut_by_the_budget_is_not_credited(tool_tokenizer, retriever, monkeypatch):
    # The full rollout (budget 1024) shows the two tool responses at mask-0 blocks b1, b2.
    row = schema.tool_agent_row(schema.make_verl_row(QUESTION, 0))
    _, full = _run_tool_agent(_config(), tool_tokenizer, row)
    (_, _), (second_start, second_end) = _blocks(full.response_mask)
    # A budget 3 tokens into the second tool response: the second call runs (its doc id is
    # recorded), but verl ends the rollout without appending the response, so the policy saw
    # only d:film, and never answered.
    budget = second_start + 3
    assert second_end - second_start > 3
    cfg = _config(budget)
    _, output = _run_tool_agent(cfg, tool_tokenizer, row)
    assert retriever.queries[-2:] == ["film", "award"]
    assert len(output.response_ids) == second_start  # the second response was not appended
    info = _postprocess(output, row, cfg, tool_tokenizer, monkeypatch)["fields"]["extra_fields"][0][
        "reward_extra_info"
    ]
    # Turn 1 showed d:film: +0.25; turn 2 showed nothing: a miss, −0.10; no answer: −1 (eq 17).
    # R = 0.25 − 0.10 − 1 = −0.85 (crediting the unseen d:award gave 0.25 + 0.25 − 1 = −0.5).
    assert output.reward_score == pytest.approx(0.25 - 0.10 - 1)
    assert json.loads(info["turn_rewards_json"]) == pytest.approx([0.25, -0.10])
    # Coverage 1 of 2 targets; the chain is incomplete.
    assert info["target_doc_cov"] == 1 / 2 and info["complete_chain"] == 0.0
    assert info["num_searches"] == 2 and info["zero_target_turns"] == 1


@pytest.mark.parametrize(
    "arguments",
    [
        ["film"],
        "film",
        3,
        None,
        {"query": ["film"]},
        {"query": {"q": "film"}},
        {"query": True},
        {"q": "film"},
    ],
    ids=[
        "list-args",
        "string-args",
        "number-args",
        "null-args",
        "list-query",
        "dict-query",
        "bool-query",
        "no-query",
    ],
)
def test_arguments_without_a_string_query_are_a_counted_invalid_action(retriever, arguments):
    from types import SimpleNamespace

    tool = load_all_tools(str(TOOLS_YAML), None)[0]
    data = SimpleNamespace(extra_fields={}, response_mask=[1] * 5)
    resp, _, metrics = asyncio.run(tool.execute("i", arguments, agent_data=data))
    # One invalid action, nothing searched or recorded; the policy sees the protocol's message.
    assert data.extra_fields[schema.EF_INVALID_ACTIONS] == 1 and metrics == {"invalid": 1}
    assert data.extra_fields[schema.EF_NUM_SEARCHES] == 0 and retriever.queries == []
    assert resp.text == "My action is invalid. Let me rethink."


def test_a_huge_query_is_cut_to_the_retrievers_limit(retriever):
    from types import SimpleNamespace

    tool = load_all_tools(str(TOOLS_YAML), None)[0]
    data = SimpleNamespace(extra_fields={}, response_mask=[1] * 7)
    asyncio.run(tool.execute("i", {"query": "x" * 1_000_000}, agent_data=data))
    # The retriever cuts queries at 2,000 characters; the tool searches and records that cut.
    assert data.extra_fields[schema.EF_TURN_QUERIES] == ["x" * 2000] and retriever.queries == ["x" * 2000]
    # The call's response would start after the 7 response tokens so far.
    assert data.extra_fields[schema.EF_TURN_OBS_START] == [7]
