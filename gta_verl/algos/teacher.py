"""PathRouter's frozen gold-evidence teacher on top of verl's on-policy distillation.

Paper: PathRouter §3.3 — π_ref(· | q, G, S_gt, r_<t): the same frozen base checkpoint as
the student's reference, prompted with the question **plus the gold evidence S_gt**,
scoring the student's own response r. verl 0.9.1's teacher always sees the student's
exact context, so this module:

* builds the evidence-conditioned teacher prompt (:func:`build_teacher_prompt`, pure): S_gt before the
  question, so the teacher's context ends where the student's does;
* asks verl's teacher server for top-K log-probs of ``teacher_prompt + response``;
* realigns them onto the student's ``prompt + response`` rows
  (:func:`realign_teacher_topk`, pure): student rows [P−1, P+R−1) ← teacher rows
  [T−1, T+R−1) (row j holds the distribution of token j+1), every other row dummy;
* skips the teacher (uniform dummy rows) during validation and for trajectories the
  ``path_router`` reward manager did not select (``distill_select`` = 0, evidence-rich),
  so every sample still carries the same TransferQueue fields.

Wire it with
``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=gta_verl.algos.teacher.GTAAgentLoopManagerTQ``.
It needs the rule-based reward to run inside the agent loop (the default without a
colocated reward model), because the routing decision is read before the teacher call.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import ray
import torch

from gta_verl.algos.teacher_prompt import build_teacher_prompt
from gta_verl.data.schema import (
    EF_REWARD_EXTRA_INFO,
    RI_DISTILL_SELECT,
    distill_select,
    parse_ground_truth,
    plain_value,
)
from gta_verl.recipe_guard import classic_trainer_refusal
from gta_verl.verl_compat import (
    AgentLoopManagerTQ,
    AgentLoopWorker,
    AgentLoopWorkerTQ,
    normalize_token_ids,
    tq,
)

logger = logging.getLogger(__name__)

__all__ = [
    "GTAAgentLoopManagerTQ",
    "GTAAgentLoopWorkerTQ",
    "build_teacher_prompt",
    "dummy_teacher_topk",
    "realign_teacher_topk",
]


def dummy_teacher_topk(length: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform placeholder rows: ids ``0..K-1`` (int32) and log-probs ``-log K`` (float32), [length, K]."""
    ids = torch.arange(k, dtype=torch.int32).unsqueeze(0).expand(length, k).contiguous()
    logprobs = torch.full((length, k), -math.log(k), dtype=torch.float32)
    return ids, logprobs


def realign_teacher_topk(
    teacher_ids: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    teacher_prompt_len: int,
    student_prompt_len: int,
    response_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Move the teacher's response rows onto the student's sequence layout.

    Row j of verl's teacher output is the distribution of token j+1, so the response
    tokens r_0..r_{R-1} are predicted by teacher rows [T−1, T+R−1) and student rows
    [P−1, P+R−1) (verl's ``no_padding_2_padding`` reads exactly those rows).

    Args:
        teacher_ids: [T+R, K] int ids from ``compute_teacher_logprobs_single``.
        teacher_logprobs: [T+R, K] float log-probs.
        teacher_prompt_len: T (evidence-conditioned prompt length).
        student_prompt_len: P (the student's prompt length).
        response_len: R.

    Returns:
        (ids [P+R, K] int32, logprobs [P+R, K] float32); rows outside [P−1, P+R−1) are
        :func:`dummy_teacher_topk` rows.

    Raises:
        ValueError: on shape mismatches or empty prompts.
    """
    t, p, r = int(teacher_prompt_len), int(student_prompt_len), int(response_len)
    if t < 1 or p < 1:
        raise ValueError(f"prompt lengths must be >= 1 (teacher {t}, student {p})")
    if teacher_ids.shape != teacher_logprobs.shape or teacher_ids.dim() != 2:
        raise ValueError(
            f"teacher ids {tuple(teacher_ids.shape)} and logprobs {tuple(teacher_logprobs.shape)} "
            "must both be [S, K]"
        )
    if teacher_ids.shape[0] != t + r:
        raise ValueError(f"teacher output has {teacher_ids.shape[0]} rows, expected T+R = {t}+{r}")
    ids, logprobs = dummy_teacher_topk(p + r, int(teacher_ids.shape[1]))
    ids[p - 1 : p + r - 1] = teacher_ids[t - 1 : t + r - 1].to(torch.int32)
    logprobs[p - 1 : p + r - 1] = teacher_logprobs[t - 1 : t + r - 1].to(torch.float32)
    return ids, logprobs


def _as_messages(raw_prompt: Any) -> list[dict[str, Any]]:
    return [dict(m) for m in plain_value(raw_prompt)]


class GTAAgentLoopWorkerTQ(AgentLoopWorkerTQ.__ray_actor_class__):
    """``AgentLoopWorkerTQ`` whose teacher sees the gold evidence, only for selected samples."""

    #: Per-passage character cap of the first attempt; halved until the prompt fits.
    max_chars_per_passage: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``AgentLoopWorkerTQ.__init__``'s two statements, without its zero-argument ``super()``.

        ``AgentLoopWorkerTQ``'s module name is bound to Ray's actor wrapper, so cloudpickle
        ships the class by value, and in the Ray worker its ``__init__``'s ``super()`` cell
        is not a base of this subclass ("super(type, obj): obj must be an instance or subtype
        of type", found by the CPU main_ppo run). Calling the plain base explicitly avoids it.
        """
        AgentLoopWorker.__init__(self, *args, **kwargs)
        tq.init()
        self.background_tasks = set()

    async def _compute_teacher_logprobs(
        self,
        output: Any,
        prompt_ids: list[int],
        response_ids: list[int],
        validate: bool,
        sample_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Evidence-conditioned top-K teacher log-probs, realigned to the student layout."""
        if not self.distillation_enabled or validate:
            return
        kwargs = sample_kwargs or {}
        k = int(self.teacher_server_manager.distillation_loss_config.topk)
        total = len(prompt_ids) + len(response_ids)
        reward_info = output.extra_fields.setdefault(EF_REWARD_EXTRA_INFO, {})
        _, _, support = parse_ground_truth(dict(kwargs.get("reward_model") or {}).get("ground_truth", []))
        # One default (schema.DISTILL_SELECT_DEFAULT = 0): a manager that does not select is
        # not distilled; a row without gold evidence never is (nothing to condition on).
        selected = distill_select(reward_info) > 0 and bool(support)
        teacher_prompt_ids = (
            await self._teacher_prompt_ids(kwargs, support, len(response_ids)) if selected else None
        )
        if teacher_prompt_ids is None:
            # Not selected, no evidence, or the evidence would not fit: write 0 so as_dict's
            # distill_mask is zero and the dummy teacher rows are never distilled toward.
            reward_info[RI_DISTILL_SELECT] = 0.0
            ids, logprobs = dummy_teacher_topk(total, k)
        else:
            t_ids, t_logprobs = await self.teacher_server_manager.compute_teacher_logprobs_single(
                sequence_ids=teacher_prompt_ids + list(response_ids),
                routing_key=self._routing_key(kwargs),
            )
            ids, logprobs = realign_teacher_topk(
                t_ids, t_logprobs, len(teacher_prompt_ids), len(prompt_ids), len(response_ids)
            )
        output.extra_fields["teacher_ids"] = ids
        output.extra_fields["teacher_logprobs"] = logprobs

    def _routing_key(self, kwargs: Mapping[str, Any]) -> Any:
        value = kwargs.get(self.teacher_key)
        return value.item() if hasattr(value, "item") else value

    def _teacher_max_len(self, kwargs: Mapping[str, Any]) -> int:
        manager = self.teacher_server_manager
        cfg = manager.teacher_model_configs[manager._resolve_teacher_key(self._routing_key(kwargs))].inference
        if cfg.max_model_len:
            return int(cfg.max_model_len)
        return int(cfg.prompt_length) + int(cfg.response_length)

    async def _teacher_prompt_ids(
        self, kwargs: Mapping[str, Any], support: Sequence[str], response_len: int
    ) -> list[int] | None:
        """Tokenize the evidence prompt, shrinking passages until T + R fits the teacher."""
        if "raw_prompt" not in kwargs:
            raise KeyError("gold-evidence teacher needs the row's raw_prompt (set data.return_raw_chat=True)")
        messages = _as_messages(kwargs["raw_prompt"])
        budget = self._teacher_max_len(kwargs) - response_len - 1
        template_kwargs = dict(self.config.data.get("apply_chat_template_kwargs", {}) or {})
        cap = self.max_chars_per_passage
        loop = asyncio.get_running_loop()
        for _ in range(8):
            msgs = build_teacher_prompt(messages, support, cap)
            ids = await loop.run_in_executor(
                None,
                lambda m=msgs: normalize_token_ids(
                    self.tokenizer.apply_chat_template(
                        m, add_generation_prompt=True, tokenize=True, **template_kwargs
                    )
                ),
            )
            if len(ids) <= budget:
                return ids
            longest = max(len(str(s)) for s in support)
            cap = max(16, (cap or longest) // 2)
        logger.warning("gold-evidence teacher prompt does not fit (budget %d tokens); sample skipped", budget)
        return None


def _get_mode(config: Any) -> str:
    trainer = config.get("trainer") if config is not None and hasattr(config, "get") else None
    v1 = trainer.get("v1") if trainer is not None else None
    return str((v1.get("trainer_mode") if v1 is not None else None) or "gta_path_router_sync")


class GTAAgentLoopManagerTQ(AgentLoopManagerTQ):
    """``AgentLoopManagerTQ`` that starts :class:`GTAAgentLoopWorkerTQ` workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # verl's classic trainer also instantiates agent_loop_manager_class, and this TransferQueue-only
        # manager would then fail inside verl at step 1; say why instead (the recipe YAML's Hydra guard
        # says it before Ray; this covers launches that bypass Hydra).
        config = kwargs.get("config", args[0] if args else None)
        message = classic_trainer_refusal(
            config or {}, "agent_loop_manager_class=GTAAgentLoopManagerTQ", _get_mode(config)
        )
        if message is not None:
            raise RuntimeError(message)
        super().__init__(*args, **kwargs)
        # AgentLoopManagerTQ.__init__ sets the stock worker class; workers start later in create().
        self.agent_loop_workers_class = ray.remote(GTAAgentLoopWorkerTQ)
