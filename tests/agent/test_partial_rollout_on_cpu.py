"""Provenance through partial rollouts: a trajectory aborted mid-turn and resumed on new weights.

In ``colocate_async`` / ``separate_async`` verl aborts in-flight generations at each weight
update and verl's ``FullyAsyncLLMServerClient.generate`` resumes them on the new policy
(``llm_server.py``: it re-sends prompt + tokens so far until the stop reason is not
"aborted"), so the agent loop sees one finished turn made of pieces from two policy versions.
Everything here is verl's code except the rollout server, which aborts on purpose:

1. ``gta_search_agent`` runs through ``FullyAsyncLLMServerClient``; the server aborts turns 1
   and 2 after a few tokens (weight versions 3→4 and 4→5);
2. verl's ``AgentLoopWorkerTQ._agent_loop_postprocess`` scores the output through a reward
   worker handle whose ``compute_score`` is ``RewardLoopWorker.compute_score``'s body
   (``reward_manager.run_single``) with our ``trajectory_guided`` manager, and captures what
   it would put into the TransferQueue.

Checks: the reward sees each search turn's doc ids exactly once (and the retriever was called
once per query, not again on resume), the loss mask is 1 on exactly the generated tokens, the
log-probs are the two policies' pieces in order, and the tags carry the version span.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from omegaconf import OmegaConf

from gta_verl.agent.runner import make_trainer_config, row_to_kwargs, run_agent_rollouts
from gta_verl.data.schema import EF_TURN_DOC_IDS, make_verl_row
from gta_verl.data.types import QAExample, RetrievalHit
from gta_verl.protocol import format_observation
from gta_verl.rewards.managers import TrajectoryGuidedRewardManager
from gta_verl.verl_compat import FullyAsyncLLMServerClient, TokenOutput
from tests.support.in_process_actors import OneServerLoadBalancer, Remote

agent_loop_tq = pytest.importorskip("verl.trainer.ppo.v1.agent_loop_tq")

QUESTION = QAExample(
    "q1", "Who directed the film that won the award?", ("Nolan",), ("d:film", "d:award"), 2, "toy"
)
TURNS = ["I need the film. <search> film </search>", " <search> award </search>", " <answer> Nolan </answer>"]
ABORT_AFTER = {0: 3, 1: 2}  # turn → tokens generated before the abort
OLD_LP, NEW_LP = -0.25, -0.5  # log-prob reported before / after a weight update


class AbortingServer:
    """A rollout server whose weights are updated while turns 1 and 2 are being generated."""

    def __init__(self, tokenizer: Any) -> None:
        self.turns = [list(tokenizer.encode(t, add_special_tokens=False)) for t in TURNS]
        self.version, self.turn, self.partial = 3, 0, None
        self.prompts: list[list[int]] = []

        async def generate(request_id, prompt_ids, sampling_params, image_data=None, video_data=None, **kw):
            self.prompts.append(list(prompt_ids))
            return self._next(list(prompt_ids))

        self.generate = Remote(generate)

    def _next(self, prompt_ids: list[int]) -> TokenOutput:
        tokens = self.turns[self.turn]
        if self.partial is None and self.turn in ABORT_AFTER:
            self.partial = tokens[: ABORT_AFTER[self.turn]]
            out = TokenOutput(
                token_ids=self.partial,
                log_probs=[OLD_LP] * len(self.partial),
                stop_reason="aborted",
                extra_fields={"global_steps": self.version},
            )
            self.version += 1  # the trainer syncs new weights before generation resumes
            return out
        done = len(self.partial) if self.partial is not None else 0
        if done:
            assert prompt_ids[-done:] == self.partial, "the resume must re-send the aborted tokens"
        rest = tokens[done:]
        self.partial, self.turn = None, self.turn + 1
        return TokenOutput(
            token_ids=rest,
            log_probs=[NEW_LP] * len(rest),
            stop_reason="completed",
            extra_fields={"global_steps": self.version},
        )


def _trainer_config():
    cfg = make_trainer_config(prompt_length=1024, response_length=512)
    cfg.actor_rollout_ref.rollout.name = "vllm"
    cfg.reward = OmegaConf.create(
        {"custom_reward_function": {"path": None}, "reward_model": {"enable": False}}
    )
    return cfg


def _score_and_capture(rollout, cfg, tokenizer, monkeypatch) -> dict[str, Any]:
    """verl's worker postprocess with our reward manager behind the reward worker handle."""
    manager = TrajectoryGuidedRewardManager(config=cfg, tokenizer=tokenizer)
    handle = type("RewardWorker", (), {"compute_score": Remote(manager.run_single)})()
    captured: dict[str, Any] = {}

    async def put(keys, fields, tags, partition_id):
        captured.update(keys=keys, fields=fields, tags=tags)

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", put)
    worker = object.__new__(agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__)
    worker.reward_loop_worker_handles, worker.processor, worker.distillation_enabled = [handle], None, False
    worker.mm_processor_kwargs = None  # what __init__ sets for a text-only model
    kwargs = {**row_to_kwargs(rollout.row), "uid": "u0", "session_id": 0, "global_steps": 6}
    asyncio.run(worker._agent_loop_postprocess(rollout.output, False, **kwargs))
    return captured


def test_aborted_turns_keep_provenance(qwen_tokenizer, fake_retriever, monkeypatch):
    cfg = _trainer_config()
    server = AbortingServer(qwen_tokenizer)
    client = FullyAsyncLLMServerClient(cfg, load_balancer_handle=OneServerLoadBalancer(server))
    rows = [make_verl_row(QUESTION, 0)]
    (rollout,) = run_agent_rollouts(rows, client, qwen_tokenizer, fake_retriever, cfg, n_samples=1)
    assert len(server.prompts) == 5  # 3 turns, 2 of them resumed once

    # The retriever ran once per search, never again for a resumed turn.
    assert fake_retriever.queries == ["film", "award"]
    captured = _score_and_capture(rollout, cfg, qwen_tokenizer, monkeypatch)
    fields, tags = captured["fields"], captured["tags"]
    extra = fields["extra_fields"][0]
    assert extra[EF_TURN_DOC_IDS] == [["d:film"], ["d:award"]]
    info = extra["reward_extra_info"]
    # Each search shows one new target (+0.25 each, eq 16); the answer is right and the chain
    # complete (+2, eq 17): R = 0.25 + 0.25 + 2 = 2.5, over 2 searches with coverage 2/2.
    assert info["num_searches"] == 2 and info["target_doc_cov"] == 1.0
    assert json.loads(info["turn_rewards_json"]) == [0.25, 0.25]
    assert rollout.output.reward_score == pytest.approx(2.5)

    # Token layout: generated turns (mask 1) and observations (mask 0), by hand.
    def obs(q):
        hit = RetrievalHit(f"d:{q}", f"T {q}", f"text about {q}", 0.5, "graph")
        return list(qwen_tokenizer.encode(format_observation([hit]), add_special_tokens=False))

    t1, t2, t3 = server.turns
    layout = [(t1, 1), (obs("film"), 0), (t2, 1), (obs("award"), 0), (t3, 1)]
    expected_ids = [i for ids, _ in layout for i in ids]
    expected_mask = [m for ids, m in layout for _ in ids]
    assert fields["responses"][0].tolist() == expected_ids
    assert fields["response_mask"][0].tolist() == expected_mask
    assert fields["loss_mask"][0].tolist() == expected_mask
    # Log-probs: the aborted piece from the old policy, the rest from the new one, 0 on observations.
    pieces = [
        [OLD_LP] * 3 + [NEW_LP] * (len(t1) - 3),
        [0.0] * len(obs("film")),
        [OLD_LP] * 2 + [NEW_LP] * (len(t2) - 2),
        [0.0] * len(obs("award")),
        [NEW_LP] * len(t3),
    ]
    assert fields["rollout_log_probs"][0].tolist() == pytest.approx([x for p in pieces for x in p])
    # Weight versions: first generation on 3, last on 5 (two updates during the trajectory).
    assert (tags[0]["min_global_steps"], tags[0]["max_global_steps"], tags[0]["global_steps"]) == (3, 5, 6)
