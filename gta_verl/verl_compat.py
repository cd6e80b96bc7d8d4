"""The only module of gta-verl that imports verl internals.

verl's ``experimental/*`` and V1-trainer APIs move between releases (0.8 → 0.9 →
0.10.dev). Every touch-point lives here so a verl upgrade is a one-file change;
the rest of the package imports these names from ``gta_verl.verl_compat``.
Pinned: ``verl[verl-core]==0.9.1``.
"""

from __future__ import annotations

# One sorted block; what each group is for:
# - PathRouter: the V1 trainers (sync, and verl's asynchronous ones that gta's trainers mix into,
#   gta_verl/algos/trainer.py), TransferQueue, the teacher worker, the loss helpers.
# - The client async modes hand agent loops (LLMServerClient, FullyAsyncLLMServerClient): the latter
#   resumes an aborted generation on the new weights.
# - verl's native tool-calling loop (tool_agent) and its tool contract (gta_verl/agent/tool.py).
import transfer_queue as tq  # verl's TransferQueue client: kv_batch_get / kv_batch_put
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,  # agent runner
    AgentLoopOutput,
    AgentLoopWorker,  # plain base of AgentLoopWorkerTQ (teacher worker)
    DictConfigWrap,  # agent runner
    ToolListWrap,
)
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry as AGENT_LOOP_REGISTRY
from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls
from verl.experimental.reward_loop.reward_manager.registry import register as register_reward_manager
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.tools.tool_registry import load_all_tools  # how AgentLoopWorker loads tools
from verl.trainer.distillation.losses import (
    DistillationLossSettings,
    get_distillation_loss_fn,
    get_distillation_loss_settings,
    register_distillation_loss,
)
from verl.trainer.ppo.core_algos import (
    agg_loss,
    compute_grpo_outcome_advantage,
    compute_policy_loss_vanilla,  # what get_policy_loss_fn("vanilla") returns (masked-loss test)
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
)
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls, register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils  # get_non_tensor_data
from verl.utils.dataset.rl_dataset import RLHFDataset  # dataset_cls for AgentLoopBase outside the worker
from verl.utils.tokenizer import normalize_token_ids

# --- CPU backend (gta_verl/cpu/rollout.py) ----------------------------------------------------
# The HF-generate rollout registers through verl's public RolloutReplicaRegistry; the in-worker
# adapter table _ROLLOUT_REGISTRY has no register function in 0.9.1, so its entry is added to the
# dict itself (upstream fix: a `register_rollout(name, mode, fqdn)` helper). The CPU *platform*
# and its two wraps live in gta_verl/verl_compat_cpu.py (import order, see that module).
from verl.workers.rollout.base import _ROLLOUT_REGISTRY as ROLLOUT_ADAPTER_REGISTRY
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput
from verl.workers.utils.padding import (
    no_padding_2_padding,
    response_from_nested,
    response_to_nested,
)

VERL_VERSION_PINNED = "0.9.1"

__all__ = [
    "retry_plugin_registration",
    "BaseRollout",
    "ROLLOUT_ADAPTER_REGISTRY",
    "RolloutReplica",
    "RolloutReplicaRegistry",
    "AGENT_LOOP_REGISTRY",
    "AgentLoopBase",
    "AgentLoopOutput",
    "AgentLoopMetrics",
    "DictConfigWrap",
    "RLHFDataset",
    "DataProto",
    "DistillationLossSettings",
    "RewardManagerBase",
    "TokenOutput",
    "VERL_VERSION_PINNED",
    "agg_loss",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss_vanilla",
    "get_adv_estimator_fn",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "get_policy_loss_fn",
    "get_reward_manager_cls",
    "register_adv_est",
    "register_agent_loop",
    "register_distillation_loss",
    "register_reward_manager",
    "AgentLoopManagerTQ",
    "AgentLoopWorker",
    "AgentLoopWorkerTQ",
    "PPOTrainerSync",
    "PPOTrainerColocateAsync",
    "PPOTrainerSeparateAsync",
    "FullyAsyncLLMServerClient",
    "LLMServerClient",
    "BaseTool",
    "OpenAIFunctionToolSchema",
    "ToolResponse",
    "ToolListWrap",
    "load_all_tools",
    "get_trainer_cls",
    "no_padding_2_padding",
    "normalize_token_ids",
    "register_trainer",
    "response_from_nested",
    "response_to_nested",
    "tensordict_utils",
    "tq",
    "allow_topk_teacher_engine",
]


def allow_topk_teacher_engine(engine_name: str) -> None:
    """Let verl's distillation config accept ``engine_name`` as a top-K teacher engine.

    verl 0.9.1's ``DistillationTeacherModelConfig._validate_topk_logprobs``
    (``workers/config/distillation.py:194-217``) knows only vllm (``max_logprobs``) and sglang
    and raises ``NotImplementedError`` for any other registered rollout engine, although the
    teacher is served through ``RolloutReplicaRegistry`` like any rollout. Our CPU engine
    (``hf_cpu``) answers ``prompt_logprobs`` requests with any K, so for it only the
    ``topk`` presence check is kept; every other engine still goes to verl's check. Active
    only when the config names the engine (the CPU switch). Upstream change that removes this
    wrap: a per-engine hook (e.g. on the replica class) instead of the hard-coded match.
    """
    from verl.workers.config.distillation import DistillationTeacherModelConfig

    current = DistillationTeacherModelConfig._validate_topk_logprobs
    engines = getattr(current, "_gta_extra_engines", None)
    if engines is not None:
        engines.add(engine_name)
        return

    def _validate_topk_logprobs(self, use_topk, topk):  # verl's signature
        if self.inference.name in _validate_topk_logprobs._gta_extra_engines:
            if use_topk and topk is None:
                raise ValueError("topk must be specified when use_topk is True.")
            return None
        return current(self, use_topk, topk)

    _validate_topk_logprobs._gta_extra_engines = {engine_name}  # type: ignore[attr-defined]
    # Patched on the class: verl calls the validator from the dataclass's __post_init__.
    DistillationTeacherModelConfig._validate_topk_logprobs = _validate_topk_logprobs  # type: ignore[method-assign]


def retry_plugin_registration() -> None:
    """Import the plugin modules whose import failed only because a module they need was half-imported.

    When one of our modules is the first importer of verl in a process, verl's ``__init__`` loads our
    ``verl.plugins`` entry point while that module (and this one) are still initialising: e.g.
    ``import gta_verl.rewards.managers`` → this module → verl → plugins → ``path_router_manager``, whose
    ``from gta_verl.rewards.managers import GTARewardManager`` fails on the half-imported ``managers``. This
    module calls the retry at its end (everything here is defined by then); a module that plugins import
    names from calls it at its own end, so what waited on it registers too. A failure that is not such a
    cycle is logged at ERROR as ``verl_plugins`` does; one still waiting is logged at DEBUG and retried at the
    next call (``tests/test_verl_plugins_on_cpu.py`` imports each such module first and checks every name).
    """
    import importlib
    import logging
    import sys

    plugins = sys.modules.get("gta_verl.verl_plugins")
    if plugins is None:
        return
    log = logging.getLogger("gta_verl.verl_plugins")
    for name, ok in list(getattr(plugins, "LOADED", {}).items()):
        if ok:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # log like verl_plugins does, unless its provider retries at its own end
            if isinstance(exc, ImportError) and "partially initialized module" in str(exc):
                log.debug("gta-verl plugin module %s waits on a half-imported module: %s", name, exc)
                continue
            log.error(
                "gta-verl plugin module %s failed to import: the names it registers are missing",
                name,
                exc_info=True,
            )
        else:
            plugins.LOADED[name] = True


retry_plugin_registration()
