"""The typed ``gta:`` node of the recipe YAML, which lives in this folder (``gta_grpo.yaml`` …).

verl validates its own nodes (``actor_rollout_ref``, ``algorithm``, ``reward`` …) against
dataclasses and rejects unknown keys, so every gta-verl setting lives under one new
top-level ``gta:`` node. :meth:`GTAConfig.from_trainer_config` reads it from the trainer's
OmegaConf config in any process (driver, agent-loop workers, reward workers); unknown keys
raise with the valid keys listed (:mod:`gta_verl.strict_config`), so a typo in an override
fails at start-up instead of silently training with a default.

Each section is defined next to the code that reads it; this module only composes them:

* ``retriever``: :class:`gta_verl.retrieval.section.RetrieverSection` — where R(q) lives,
  how it is served and the retrieval knobs;
* ``agent``: :class:`gta_verl.agent.config.AgentConfig` — the rollout's action budget B,
  observation cap, opt-in per-turn rewards, and how the loop reaches the retriever;
* ``reward``: :class:`gta_verl.rewards.trajectory.TrajectoryRewardConfig` (eqs 16–17), read by
  the reward managers through :func:`gta_verl.rewards.scoring.reward_config_from_trainer`;
* ``path_router``: :class:`gta_verl.rewards.path_router.PathRouterConfig` (null = off).

The Hydra configs of this folder are found with ``--config-path`` set to it (the recipes and
``gta-verl quickstart`` do so); this package is the folder's Python face.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gta_verl.agent.config import AgentConfig
from gta_verl.retrieval.config import MODES
from gta_verl.retrieval.section import RetrieverSection
from gta_verl.rewards.path_router import PathRouterConfig
from gta_verl.rewards.scoring import reward_config_from_trainer
from gta_verl.rewards.trajectory import TrajectoryRewardConfig
from gta_verl.strict_config import StrictConfig, node_at

__all__ = [
    "RETRIEVER_MODES",
    "AgentConfig",
    "GTAConfig",
    "RetrieverSection",
    "reward_config_from_trainer",
]

#: The retrieval modes ``gta.retriever.mode`` accepts (:data:`gta_verl.retrieval.config.MODES`).
RETRIEVER_MODES = MODES


@dataclass(frozen=True)
class GTAConfig(StrictConfig):
    """The whole ``gta:`` node.

    Attributes:
        retriever: ``gta.retriever``.
        agent: ``gta.agent``.
        reward: ``gta.reward``.
        path_router: ``PathRouterConfig`` when the PathRouter recipe sets ``gta.path_router``, else None.
    """

    WHERE = "gta"

    retriever: RetrieverSection = field(default_factory=RetrieverSection)
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward: TrajectoryRewardConfig = field(default_factory=TrajectoryRewardConfig)
    path_router: PathRouterConfig | None = None

    @classmethod
    def _from_checked(cls, values: dict[str, Any], where: str) -> GTAConfig:
        router = values.get("path_router")
        return cls(
            retriever=RetrieverSection.from_mapping(values.get("retriever")),
            agent=AgentConfig.from_mapping(values.get("agent")),
            reward=TrajectoryRewardConfig.from_mapping(values.get("reward")),
            path_router=None if router is None else PathRouterConfig.from_mapping(router),
        )

    @classmethod
    def from_trainer_config(cls, cfg: Any) -> GTAConfig:
        """Read ``cfg.gta`` from the trainer's OmegaConf/DictConfig (or a plain dict)."""
        return cls.from_mapping(node_at(cfg, "gta"))
