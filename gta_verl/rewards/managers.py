"""verl 0.9.1 reward-loop managers: ``trajectory_guided`` (Stage I) and ``exact_match`` (Stage II).

Registered in verl's reward-loop registry when ``import verl`` loads the ``verl.plugins``
entry point (:mod:`gta_verl.verl_plugins`); select one with::

    reward.reward_manager.source=register reward.reward_manager.name=trajectory_guided

verl builds the manager in each ``RewardLoopWorker`` with
``cls(config=<full trainer config>, tokenizer=..., compute_score=..., reward_router_address=...,
reward_model_tokenizer=...)`` and calls ``await run_single(data)`` once per finished rollout,
inside the agent loop (before ``AgentLoopOutput.as_dict``). The return value
``{"reward_score": float, "reward_extra_info": {...}}`` becomes the trajectory's scalar
reward (placed on the last response token) and ``extra_fields["reward_extra_info"]``.

These classes only translate: :func:`gta_verl.rewards.scoring.scoring_request_from_data`
turns the ``DataProto`` into plain data and the pure functions of
:mod:`gta_verl.rewards.scoring` score it. Reward values come from ``gta.reward``
(overridable per key through ``reward.reward_kwargs``); verl's ``compute_score`` argument is
accepted and ignored (these managers define the reward themselves).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from gta_verl.data.schema import RI_REWARD_ERROR
from gta_verl.rewards.scoring import (
    ScoringRequest,
    reward_config_from_trainer,
    score_exact_match,
    score_trajectory_guided,
    scoring_request_from_data,
)
from gta_verl.verl_compat import RewardManagerBase, register_reward_manager, retry_plugin_registration

__all__ = ["ExactMatchRewardManager", "GTARewardManager", "REWARD_ERROR_KEY", "TrajectoryGuidedRewardManager"]

logger = logging.getLogger(__name__)
#: 1.0 on a row that could not be scored (scored 0), else 0.0; its batch mean is the error rate metric, and
#: gta's trainers give such a row advantage 0 and leave it out of its group's mean and std
#: (:class:`gta_verl.algos.advantages.AdvantageContext`; metric ``gta/reward_error_rows``).
REWARD_ERROR_KEY = RI_REWARD_ERROR


class GTARewardManager(RewardManagerBase):
    """Shared plumbing of the gta managers; subclasses implement :meth:`score`."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Any = None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)
        # Read once per worker: a bad gta.reward value fails here, at start-up.
        self.reward_config = reward_config_from_trainer(config)
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer
        self.read_settings(config)

    def read_settings(self, config: Any) -> None:
        """A subclass's own settings from the trainer config, read once per reward worker (so a bad
        value fails at start-up); verl's constructor signature stays this class's alone."""

    def score(self, request: ScoringRequest) -> tuple[float, dict[str, Any]]:
        """Return (reward, reward_extra_info) for one rollout."""
        raise NotImplementedError

    async def run_single(self, data: Any) -> dict[str, Any]:
        """Score one finished rollout (``data``: the DataProto verl passes, 1 row per output).

        A malformed row (bad ground truth, NaN counters, …) scores 0 with ``reward_error`` = 1 instead of
        raising: verl gathers the batch's rewards without ``return_exceptions``, so one raise would fail every
        rollout of the step. The 0 is a placeholder, not a reward: gta's trainers give the row advantage 0 and
        compute its group's mean and std without it (a 0 among rewards of −1 would otherwise shift every other
        rollout's advantage). Every row carries the same ``reward_extra_info`` keys (verl takes the key set
        from the first row, ``agent_loop.py:1109``).
        """
        try:
            request = scoring_request_from_data(data, self.tokenizer)
            reward, info = self.score(request)
            if not math.isfinite(float(reward)):
                raise ValueError(f"reward {reward!r} is not finite")
            return {"reward_score": float(reward), "reward_extra_info": {**info, REWARD_ERROR_KEY: 0.0}}
        except Exception as exc:  # one bad row must not fail the batch
            logger.warning("gta reward: row scored 0 as an error: %s: %s", type(exc).__name__, exc)
            _, info = self.score(ScoringRequest(response_text="", answers=("",)))
            neutral = {k: (0.0 if isinstance(v, (int, float)) else v) for k, v in info.items()}
            return {"reward_score": 0.0, "reward_extra_info": {**neutral, REWARD_ERROR_KEY: 1.0}}


@register_reward_manager("trajectory_guided")
class TrajectoryGuidedRewardManager(GTARewardManager):
    """Stage I: R_traj = Σ_t r_search_t + r_ans (GTA-RAG eqs 15–18)."""

    def score(self, request: ScoringRequest) -> tuple[float, dict[str, Any]]:
        return score_trajectory_guided(request, self.reward_config)


@register_reward_manager("exact_match")
class ExactMatchRewardManager(GTARewardManager):
    """Stage II: R_EM = 1[EM(ŷ, y*) = 1] (GTA-RAG eq 19), with the same evidence metrics."""

    def score(self, request: ScoringRequest) -> tuple[float, dict[str, Any]]:
        return score_exact_match(request, self.reward_config)


# Plugin modules that import names from this one may have waited on it (verl imported first from here).
retry_plugin_registration()
