"""verl reward-manager inputs built from a reward case (:class:`~gta_verl.testing.reward_cases.Case`).

:func:`make_reward_data` builds one agent-loop output as verl's ``AgentLoopWorker._compute_score``
hands it to a reward manager; :func:`make_reward_manager` builds a registered manager from a
minimal config. ``tests/rewards/test_managers_on_cpu.py`` and ``benchmarks/kb/reliability_batch.py``
use both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from gta_verl.data.schema import (
    EF_ANSWER,
    EF_INVALID_ACTIONS,
    EF_NUM_SEARCHES,
    EF_RETRIEVAL_ERRORS,
    EF_TURN_DOC_IDS,
    make_ground_truth,
)
from gta_verl.testing.reward_cases import Case
from gta_verl.verl_compat import DataProto, get_reward_manager_cls


def make_reward_data(
    tok: Any,
    prompt_ids: list[int],
    case: Case,
    pad: int = 0,
    as_numpy: bool = False,
    recorded: Any = ...,
) -> DataProto:
    """One agent-loop output as verl's AgentLoopWorker._compute_score builds it.

    Args:
        tok: The Qwen2.5 tokenizer (:func:`gta_verl.agent.tokenizer.load_qwen_tokenizer`).
        prompt_ids: The prompt's token ids.
        case: The rollout: its response, retrieved doc ids and gold.
        pad: Padding tokens after the response (masked out by the attention mask).
        as_numpy: Hand the ground truth and the per-turn ids back as numpy object arrays, as
            parquet → RLHFDataset does.
        recorded: The loop's ``gta/answer``; left out by default, so the response is re-parsed.

    Returns:
        A one-row DataProto.
    """
    resp = tok.encode(case.response + "<|im_end|>", add_special_tokens=False)
    responses = torch.tensor([resp + [tok.pad_token_id] * pad])
    attention = torch.tensor([[1] * (len(prompt_ids) + len(resp)) + [0] * pad])
    gt: dict[str, Any] = make_ground_truth(case.answers, case.targets)
    if as_numpy:  # what parquet → RLHFDataset hands back
        gt = {k: np.array(v, dtype=object) for k, v in gt.items()}
    turns = [list(t) for t in case.turn_doc_ids]
    fields: dict[str, Any] = {
        EF_TURN_DOC_IDS: [np.array(t, dtype=object) for t in turns] if as_numpy else turns,
        EF_NUM_SEARCHES: len(turns),
        EF_INVALID_ACTIONS: 0,
        EF_RETRIEVAL_ERRORS: sum(1 for t in turns if not t),
    }
    if recorded is not ...:
        fields[EF_ANSWER] = recorded
    return DataProto.from_single_dict(
        {
            "prompts": torch.tensor([prompt_ids]),
            "responses": responses,
            "attention_mask": attention,
            "input_ids": torch.cat([torch.tensor([prompt_ids]), responses], dim=1),
            "data_source": np.array(["gta_synth"], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": gt}], dtype=object),
            "extra_info": np.array([{"index": 0, "split": "train"}], dtype=object),
            "tool_extra_fields": np.array([fields], dtype=object),
            "__num_turns__": np.array([2 * len(turns) + 2]),
        }
    )


def make_reward_manager(
    name: str, tok: Any, gta: dict[str, Any] | None = None, reward: dict[str, Any] | None = None
) -> Any:
    """A registered verl reward manager, built as verl's reward loop builds it.

    Args:
        name: The registry name (``trajectory_guided``, ``exact_match``, ``path_router``).
        tok: The tokenizer.
        gta: The config's ``gta`` section.
        reward: The config's ``reward`` section.

    Returns:
        The manager instance (score a row with ``await manager.run_single(data)``).
    """
    cfg = OmegaConf.create({"gta": gta or {}, "reward": reward or {}})
    cls = get_reward_manager_cls(name)
    return cls(
        config=cfg, tokenizer=tok, compute_score=None, reward_router_address=None, reward_model_tokenizer=None
    )
