"""The only module of gta-verl that imports verl internals.

verl's ``experimental/*`` and V1-trainer APIs move between releases (0.8 → 0.9 →
0.10.dev). Every touch-point lives here so a verl upgrade is a one-file change;
the rest of the package imports these names from ``gta_verl.verl_compat``.
Pinned: ``verl[verl-core]==0.9.1``.
"""

from __future__ import annotations

from verl import DataProto
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    _agent_loop_registry as AGENT_LOOP_REGISTRY,
)
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.experimental.reward_loop.reward_manager.registry import (
    get_reward_manager_cls,
)
from verl.experimental.reward_loop.reward_manager.registry import (
    register as register_reward_manager,
)
from verl.trainer.distillation.losses import (
    DistillationLossSettings,
    get_distillation_loss_fn,
    get_distillation_loss_settings,
    register_distillation_loss,
)
from verl.trainer.ppo.core_algos import (
    agg_loss,
    compute_grpo_outcome_advantage,
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
)
from verl.workers.rollout.replica import TokenOutput

VERL_VERSION_PINNED = "0.9.1"

__all__ = [
    "AGENT_LOOP_REGISTRY",
    "AgentLoopBase",
    "AgentLoopOutput",
    "DataProto",
    "DistillationLossSettings",
    "RewardManagerBase",
    "TokenOutput",
    "VERL_VERSION_PINNED",
    "agg_loss",
    "compute_grpo_outcome_advantage",
    "get_adv_estimator_fn",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "get_policy_loss_fn",
    "get_reward_manager_cls",
    "register_adv_est",
    "register_agent_loop",
    "register_distillation_loss",
    "register_reward_manager",
]
