"""Every ``gta_search_agent`` output carries int ``min/max_global_steps``: verl's trainer needs them.

Driven end to end through verl's own code, no re-implementation:

1. verl's ``LLMServerClient.generate`` (the server manager every agent loop gets) stamps
   ``global_steps`` → ``min/max_global_steps`` on each generation; the "replica" behind it
   reports a weight version per call, as a rollout server does.
2. verl's ``AgentLoopWorkerTQ._agent_loop_postprocess`` turns the loop's output into
   TransferQueue fields and per-sample tags (``tq.async_kv_batch_put`` is captured).
3. verl's ``PPOTrainer._compute_metrics`` reads those tags (``np.array(..., dtype=int)``)
   and the captured fields (``tq.kv_batch_get``) and computes the staleness metrics.

A loop that drops the stamps leaves ``None`` in the tags, and step 3 raises
``TypeError: int() argument must be ... not 'NoneType'``.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.loop import MAX_GLOBAL_STEPS, MIN_GLOBAL_STEPS, merge_global_steps
from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
from gta_verl.data.schema import make_verl_row
from gta_verl.data.types import QAExample
from tests.support.in_process_actors import OneServerLoadBalancer, Remote

llm_server = pytest.importorskip("verl.workers.rollout.llm_server")
agent_loop_tq = pytest.importorskip("verl.trainer.ppo.v1.agent_loop_tq")
trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")

QUESTION = QAExample("q1", "Who directed the film that won?", ("Nolan",), ("dA", "dB"), 2, "toy")


class _Replica:
    """A rollout server: scripted tokens, one weight version per ``generate`` call."""

    def __init__(self, scripted: ScriptedServerManager, versions: dict[str, list[int]]) -> None:
        self.scripted, self.versions = scripted, versions

        async def generate(request_id, prompt_ids, sampling_params, image_data=None, video_data=None, **kw):
            out = await self.scripted.generate(
                request_id, prompt_ids=prompt_ids, sampling_params=sampling_params
            )
            out.extra_fields["global_steps"] = self.versions[request_id].pop(0)
            return out

        self.generate = Remote(generate)


def test_merge_global_steps_is_min_max_over_turns():
    pair = (None, None)
    for stamp in ({"global_steps": 4}, {"min_global_steps": 3, "max_global_steps": 3}, {}, None):
        pair = merge_global_steps(pair, stamp)
    # turns stamped 4 and 3 (and two unstamped): min(4, 3) = 3, max(4, 3) = 4
    assert pair == (3, 4)
    assert merge_global_steps((None, None), {}) == (None, None)


def _rollout_through_llm_server_client(tokenizer, fake_retriever, scripts, versions):
    cfg = make_trainer_config(prompt_length=1024, response_length=512)
    # full_determinism: verl passes our request id through to the server (sticky scripts).
    cfg.actor_rollout_ref.rollout.name = "vllm"
    cfg.actor_rollout_ref.rollout.full_determinism = True
    replica = _Replica(ScriptedServerManager(tokenizer, scripts), {})
    client = llm_server.LLMServerClient(cfg, load_balancer_handle=OneServerLoadBalancer(replica))
    rows = [make_verl_row(QUESTION, 0)]
    # The runner creates one request id per rollout; map each to its version list in call order.
    ids: list[str] = []
    original = replica.scripted.generate

    async def record(request_id, **kw):
        if request_id not in ids:
            ids.append(request_id)
            replica.versions[request_id] = versions[len(ids) - 1]
        return await original(request_id, **kw)

    replica.scripted.generate = record
    return run_agent_rollouts(rows, client, tokenizer, fake_retriever, cfg, n_samples=2, concurrency=1)


def _postprocess_into_tags(outputs, global_steps: int, monkeypatch):
    """verl's V1 worker postprocess; returns the (keys, fields, tags) it puts into TQ."""
    captured: dict[str, Any] = {}

    async def put(keys, fields, tags, partition_id):
        captured.setdefault("keys", []).extend(keys)
        captured.setdefault("fields", []).append(fields)
        captured.setdefault("tags", []).extend(tags)

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", put)
    worker = object.__new__(agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__)
    worker.reward_loop_worker_handles, worker.processor, worker.distillation_enabled = None, None, False
    for session_id, rollout in enumerate(outputs):
        rollout.output.reward_score = float(session_id)
        asyncio.run(
            worker._agent_loop_postprocess(
                rollout.output, False, uid="u0", session_id=session_id, global_steps=global_steps
            )
        )
    return captured


def test_trainer_metrics_accept_loop_outputs(qwen_tokenizer, fake_retriever, monkeypatch):
    scripts = [
        ["<search> film </search>", "<answer> Nolan </answer>"],
        ["<search> award </search>", "<answer> x </answer>"],
    ]
    # Rollout 0 spans a weight update (versions 3 then 4); rollout 1 ran on version 4 only.
    rollouts = _rollout_through_llm_server_client(qwen_tokenizer, fake_retriever, scripts, [[3, 4], [4, 4]])
    captured = _postprocess_into_tags(rollouts, global_steps=5, monkeypatch=monkeypatch)
    tags = captured["tags"]

    from tensordict import TensorDict

    samples = captured["fields"]  # one TensorDict (batch 1) per put

    def jagged(name):
        return torch.nested.nested_tensor([f[name][0] for f in samples], layout=torch.jagged)

    def kv_batch_get(keys, partition_id, select_fields):
        # What TransferQueue returns: per-token fields as jagged tensors, scalars stacked.
        out = {k: jagged(k) for k in ("prompts", "responses", "response_mask", "rm_scores")}
        out["num_turns"] = torch.stack([torch.as_tensor(f["num_turns"][0]) for f in samples])
        zeros = torch.nested.nested_tensor(
            [torch.zeros(len(r.output.response_ids)) for r in rollouts], layout=torch.jagged
        )
        for name in ("advantages", "returns", "token_level_rewards"):
            out[name] = zeros
        return TensorDict({k: v for k, v in out.items() if k in select_fields}, batch_size=len(keys))

    monkeypatch.setattr(trainer_base.tq, "kv_batch_get", kv_batch_get)
    trainer = SimpleNamespace(
        config=OmegaConf.create({"actor_rollout_ref": {"rollout": {}, "model": {}}}),
        _rollout_moe_lb_metrics_accumulator=None,
        use_critic=False,
        _get_n_gpus_for_throughput=lambda: 1,
    )
    batch = trainer_base.KVBatchMeta(partition_id="train", keys=captured["keys"], tags=tags)
    metrics: dict[str, Any] = {}
    trainer_base.PPOTrainer._compute_metrics(
        trainer, batch, metrics, {"step": 1.0, "gen": 0.5}, global_steps=5, epoch=0
    )
    assert [(t["min_global_steps"], t["max_global_steps"]) for t in tags] == [(3, 4), (4, 4)]
    # spans = max - min + 1: rollout 0 → 4 - 3 + 1 = 2, rollout 1 → 4 - 4 + 1 = 1
    assert metrics["training/off_policy/trajectory_spans/max"] == 2
    assert metrics["training/off_policy/trajectory_spans/min"] == 1
    # staleness = (global_steps - 1) - max = (5 - 1) - 4 = 0 for both;
    # worst = (5 - 1) - min: rollout 0 → 4 - 3 = 1, rollout 1 → 4 - 4 = 0
    assert metrics["training/off_policy/trajectory_staleness/max"] == 0
    assert metrics["training/off_policy/trajectory_staleness_worst/max"] == 1
    assert metrics["training/off_policy/trajectory_staleness_worst/min"] == 0
    ef = [r.output.extra_fields for r in rollouts]
    assert [(e[MIN_GLOBAL_STEPS], e[MAX_GLOBAL_STEPS]) for e in ef] == [(3, 4), (4, 4)]
