"""Run the real ``gta_search_agent`` loop outside verl's trainer.

verl's ``AgentLoopWorker`` builds one agent loop per trajectory with
``hydra.utils.instantiate(trainer_config=DictConfigWrap(cfg), server_manager=…,
tokenizer=…, processor=…, dataset_cls=…, data_config=DictConfigWrap(cfg.data))``
and calls ``await loop.run(sampling_params, **row)``, where ``row`` is an
``RLHFDataset`` item (every parquet column plus ``raw_prompt`` = the ``prompt``
messages and ``index`` = ``extra_info.index``). :func:`run_agent_rollouts` does
the same, with any object that has verl's ``generate`` call as the server
manager (:mod:`gta_verl.agent.backends`), so evaluation and the tests run
exactly the code the trainer runs. :func:`ascore_rollout` then scores a rollout
with a verl reward manager the way ``AgentLoopWorker._compute_score`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gta_verl.agent.loop import GTAAgentLoopOutput, GTASearchAgentLoop
from gta_verl.data.schema import EF_REWARD_EXTRA_INFO, plain_value
from gta_verl.retrieval.base import AsyncRetriever
from gta_verl.verl_compat import DataProto, DictConfigWrap, RLHFDataset


@dataclass
class AgentRollout:
    """One finished rollout of :func:`run_agent_rollouts`.

    Attributes:
        row_index, sample_index: Which input row / which of its ``n_samples``.
        prompt_ids: Chat-templated prompt tokens.
        response_ids, response_mask, response_logprobs: [L] each (mask 1 = generated).
        extra_fields: The loop's ``gta/…`` fields (+ ``reward_extra_info`` once scored).
        response_text: ``decode(response_ids)`` with special tokens kept.
        output: The :class:`GTAAgentLoopOutput` (``as_dict()`` gives verl's tensors).
        reward: Set by :func:`ascore_rollout`.
    """

    row_index: int
    sample_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    extra_fields: dict[str, Any]
    response_text: str
    output: GTAAgentLoopOutput
    reward: float | None = None
    row: Mapping[str, Any] = field(default_factory=dict, repr=False)


def make_trainer_config(
    prompt_length: int = 1024,
    response_length: int = 1024,
    gta: Mapping[str, Any] | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = -1,
    calculate_log_probs: bool = True,
) -> DictConfig:
    """The slice of verl's trainer config the agent loop and gta reward managers read."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": int(prompt_length),
                    "response_length": int(response_length),
                    "temperature": float(temperature),
                    "top_p": float(top_p),
                    "top_k": int(top_k),
                    "calculate_log_probs": bool(calculate_log_probs),
                    "val_kwargs": {"temperature": 0.0, "top_p": 1.0, "top_k": -1},
                }
            },
            "data": {},
            "reward": {},
            "gta": dict(gta or {}),
        }
    )


def sampling_params_from_config(trainer_config: Any, validate: bool = False) -> dict[str, Any]:
    """The sampling params ``AgentLoopWorker.generate_sequences`` passes to agent loops."""
    rollout = trainer_config.actor_rollout_ref.rollout
    src = rollout.val_kwargs if validate else rollout
    return {
        "temperature": float(src.temperature),
        "top_p": float(src.top_p),
        "top_k": int(src.top_k),
        "repetition_penalty": 1.0,
        "logprobs": bool(rollout.get("calculate_log_probs", True)),
    }


def row_to_kwargs(row: Mapping[str, Any]) -> dict[str, Any]:
    """A parquet row as the agent loop's ``**kwargs`` (what ``RLHFDataset.__getitem__`` adds)."""
    if "prompt" not in row:
        raise ValueError(f"verl row has no 'prompt' column (keys: {sorted(row)})")
    kwargs = dict(row)
    kwargs["raw_prompt"] = [dict(m) for m in plain_value(row["prompt"])]
    extra = dict(row.get("extra_info") or {})
    kwargs["extra_info"] = extra
    kwargs["index"] = extra.get("index", 0)
    return kwargs


def build_agent_loop(
    trainer_config: DictConfig, server_manager: Any, tokenizer: Any, retriever_client: AsyncRetriever | None
) -> GTASearchAgentLoop:
    """Construct the agent loop as verl's worker does (text-only: ``processor=None``)."""
    return GTASearchAgentLoop(
        trainer_config=DictConfigWrap(trainer_config),
        server_manager=server_manager,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(trainer_config.get("data") or OmegaConf.create({})),
        hf_model_type="qwen2",
        retriever_client=retriever_client,
    )


async def arun_agent_rollouts(
    rows: Sequence[Mapping[str, Any]],
    server_manager: Any,
    tokenizer: Any,
    retriever_client: AsyncRetriever | None,
    trainer_config: DictConfig,
    n_samples: int = 1,
    concurrency: int = 8,
    validate: bool = False,
) -> list[AgentRollout]:
    """Async :func:`run_agent_rollouts` (use inside a running event loop)."""
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    params = sampling_params_from_config(trainer_config, validate)
    gate = asyncio.Semaphore(max(1, int(concurrency)))

    async def one(i: int, s: int) -> AgentRollout:
        manager = server_manager
        if hasattr(server_manager, "for_rollout"):
            manager = server_manager.for_rollout(i, s, n_samples)
        async with gate:
            loop = build_agent_loop(trainer_config, manager, tokenizer, retriever_client)
            out = await loop.run(dict(params), **row_to_kwargs(rows[i]))
        return AgentRollout(
            row_index=i,
            sample_index=s,
            prompt_ids=list(out.prompt_ids),
            response_ids=list(out.response_ids),
            response_mask=list(out.response_mask),
            response_logprobs=None if out.response_logprobs is None else list(out.response_logprobs),
            extra_fields=out.extra_fields,
            response_text=tokenizer.decode(out.response_ids, skip_special_tokens=False),
            output=out,  # type: ignore[arg-type]
            row=rows[i],
        )

    tasks = [one(i, s) for i in range(len(rows)) for s in range(n_samples)]
    return list(await asyncio.gather(*tasks))


def run_agent_rollouts(
    rows: Sequence[Mapping[str, Any]],
    server_manager: Any,
    tokenizer: Any,
    retriever_client: AsyncRetriever | None,
    trainer_config: DictConfig,
    n_samples: int = 1,
    concurrency: int = 8,
    validate: bool = False,
) -> list[AgentRollout]:
    """Run ``n_samples`` rollouts of the real agent loop per verl parquet row.

    Args:
        rows: verl parquet rows (:func:`gta_verl.data.schema.make_verl_row` layout).
        server_manager: Anything with verl's ``async generate(request_id, *, prompt_ids,
            sampling_params, ...) -> TokenOutput``; if it has ``for_rollout(row, sample,
            n_samples)`` each rollout gets its own view (see :mod:`gta_verl.agent.backends`).
        tokenizer: The policy tokenizer (e.g. :func:`gta_verl.agent.tokenizer.load_qwen_tokenizer`).
        retriever_client: An ``AsyncRetriever``; None = the process-wide client from ``gta.retriever``.
        trainer_config: :func:`make_trainer_config` or a full verl config (rollout lengths + ``gta``).
        n_samples: Rollouts per row (GRPO group size G).
        concurrency: Rollouts in flight at once.
        validate: Use ``rollout.val_kwargs`` sampling (greedy by default).

    Returns:
        Rollouts ordered row-major: ``[(row 0, s 0), (row 0, s 1), …]``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(
            arun_agent_rollouts(
                rows,
                server_manager,
                tokenizer,
                retriever_client,
                trainer_config,
                n_samples,
                concurrency,
                validate,
            )
        )
    raise RuntimeError(
        "run_agent_rollouts called inside a running event loop; await arun_agent_rollouts instead"
    )


def rollout_data_proto(rollout: AgentRollout) -> DataProto:
    """The one-row ``DataProto`` verl's ``_compute_score`` hands to ``run_single``."""
    import numpy as np
    import torch

    prompts = torch.tensor(rollout.prompt_ids, dtype=torch.int64)
    responses = torch.tensor(rollout.response_ids, dtype=torch.int64)
    input_ids = torch.cat([prompts, responses])
    attention_mask = torch.ones_like(input_ids)
    tensors = {
        "prompts": prompts[None],
        "responses": responses[None],
        "input_ids": input_ids[None],
        "attention_mask": attention_mask[None],
        "position_ids": torch.arange(input_ids.numel())[None],
    }
    kwargs = row_to_kwargs(rollout.row)
    non_tensor: dict[str, Any] = {}
    for key, value in kwargs.items():
        arr = np.empty(1, dtype=object)
        arr[0] = value
        non_tensor[key] = arr
    extra = np.empty(1, dtype=object)
    extra[0] = rollout.extra_fields
    non_tensor.update(
        tool_extra_fields=extra,
        __num_turns__=np.array([rollout.output.num_turns]),
        prompt_len=np.array([len(rollout.prompt_ids)]),
        response_len=np.array([len(rollout.response_ids)]),
    )
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensor)


async def ascore_rollout(reward_manager: Any, rollout: AgentRollout) -> float:
    """Score with a verl reward manager and store the result as verl does.

    Sets ``rollout.reward``, ``output.reward_score`` and
    ``extra_fields["reward_extra_info"]`` (so ``output.as_dict()`` then places
    rewards and the distillation mask exactly as in the V1 trainer).
    """
    result = await reward_manager.run_single(rollout_data_proto(rollout))
    rollout.reward = float(result["reward_score"])
    rollout.output.reward_score = rollout.reward
    rollout.extra_fields[EF_REWARD_EXTRA_INFO] = dict(result.get("reward_extra_info") or {})
    return rollout.reward
