"""The typed ``gta:`` node of the recipe YAML (``gta_verl/config/gta_grpo.yaml``).

verl validates its own nodes (``actor_rollout_ref``, ``algorithm``, ``reward`` …) against
dataclasses and rejects unknown keys, so every gta-verl setting lives under one new
top-level ``gta:`` node. :meth:`GTAConfig.from_trainer_config` reads it from the trainer's
OmegaConf config in any process (driver, agent-loop workers, reward workers); unknown keys
raise with the valid keys listed, so a typo in an override fails at start-up instead of
silently training with a default.

Sections:

* ``retriever``: where the retrieval environment R(q) lives (KB dir, Ray actor name and
  resources, call timeout) and the retrieval knobs (mode, K_g, K_d, α, top-n triples);
  the knobs are :class:`gta_verl.retrieval.config.RetrieverConfig` fields when that module
  is installed.
* ``agent``: :class:`gta_verl.agent.config.AgentConfig` — the rollout's action budget B,
  observation cap, opt-in per-turn rewards, and how the loop reaches the retriever.
* ``reward``: :class:`gta_verl.rewards.trajectory.TrajectoryRewardConfig` (eqs 16–17).
* ``path_router``: :class:`gta_verl.rewards.path_router.PathRouterConfig` (null = off).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gta_verl.agent.config import AgentConfig
from gta_verl.rewards.trajectory import TrajectoryRewardConfig

__all__ = [
    "RETRIEVER_MODES",
    "AgentConfig",
    "GTAConfig",
    "RetrieverSection",
    "reward_config_from_trainer",
]

RETRIEVER_MODES = ("hybrid", "graph", "dense")

#: Retrieval knobs and paper defaults (methods.md §1: K_g = K_d = 3, α = 0.5, top-5 triples),
#: used when gta_verl.retrieval.config is not importable.
_FALLBACK_KNOBS: dict[str, Any] = {
    "mode": "hybrid",
    "k_graph": 3,
    "k_dense": 3,
    "alpha": 0.5,
    "top_n_triples": 5,
}


def _retriever_config_cls() -> type | None:
    try:
        from gta_verl.retrieval.config import RetrieverConfig
    except ImportError:
        return None
    return RetrieverConfig


def _path_router_config_cls() -> type | None:
    try:
        from gta_verl.rewards.path_router import PathRouterConfig
    except ImportError:
        return None
    return PathRouterConfig


def _reject_unknown(values: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"unknown key(s) {unknown} under {where}; valid keys: {sorted(known)}. "
            "Fix the recipe YAML or the `gta.…=` override."
        )


def _knob_defaults() -> dict[str, Any]:
    cls = _retriever_config_cls()
    if cls is None or not dataclasses.is_dataclass(cls):
        return dict(_FALLBACK_KNOBS)
    try:
        default = cls()
    except TypeError:  # a RetrieverConfig with required fields: only its names are known
        return {f.name: None for f in fields(cls)}
    return {f.name: getattr(default, f.name) for f in fields(cls)}


@dataclass(frozen=True)
class RetrieverSection:
    """``gta.retriever``: the retrieval environment of the rollouts."""

    kb_dir: str | None = None
    """KB directory built by ``gta-verl build-kb`` (required to train; None only for config checks)."""
    actor_name: str = "gta_verl_graph_retriever"
    """Ray actor name; created once per job, found by name from every agent-loop worker."""
    timeout_s: float = 30.0
    """Per-call timeout; a timeout becomes an observation the policy sees, not a crash."""
    num_cpus: float = 4.0
    """CPUs reserved for the retriever actor (0 GPUs: verl's placement groups hold them)."""
    num_replicas: int = 1
    """Retriever replicas behind the one named service (agent loops balance over them)."""
    min_replicas: int | None = None
    """Autoscaling lower bound (with ``max_replicas``; None = a fixed ``num_replicas``)."""
    max_replicas: int | None = None
    """Autoscaling upper bound."""
    placement: str = "cpu_nodes"
    """``cpu_nodes`` (nodes without GPUs first), ``resource`` (custom resource ``resource``) or ``any``."""
    resource: str | None = None
    """Custom Ray resource the replicas require when ``placement=resource``."""
    knobs: dict[str, Any] = field(default_factory=_knob_defaults)
    """Retrieval settings (mode, k_graph, k_dense, alpha, top_n_triples, …); written flat in YAML."""

    SERVICE_KEYS = ("kb_dir", "actor_name", "timeout_s", "num_cpus", "num_replicas", "min_replicas",
                    "max_replicas", "placement", "resource")

    def __post_init__(self) -> None:
        if not self.actor_name:
            raise ValueError("gta.retriever.actor_name must be a non-empty Ray actor name")
        if not (math.isfinite(float(self.timeout_s)) and float(self.timeout_s) > 0):
            raise ValueError(f"gta.retriever.timeout_s={self.timeout_s} must be > 0 seconds")
        if float(self.num_cpus) < 0:
            raise ValueError(f"gta.retriever.num_cpus={self.num_cpus} must be >= 0")
        mode = self.knobs.get("mode")
        if mode is not None and mode not in RETRIEVER_MODES:
            raise ValueError(f"gta.retriever.mode={mode!r}; use one of {RETRIEVER_MODES} (dense = w/o graph)")
        if _retriever_config_cls() is not None:
            self.retriever_config()  # validates the knobs with the retrieval module's own checks
            self.serving_config()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> RetrieverSection:
        values = dict(values or {})
        knobs = _knob_defaults()
        _reject_unknown(values, set(cls.SERVICE_KEYS) | set(knobs), "gta.retriever")
        service = {k: values.pop(k) for k in cls.SERVICE_KEYS if k in values}
        knobs.update(values)
        return cls(knobs=knobs, **service)

    def retriever_config(self) -> Any:
        """The :class:`gta_verl.retrieval.config.RetrieverConfig` of these knobs.

        Raises:
            ImportError: when the retrieval module is not installed.
        """
        cls = _retriever_config_cls()
        if cls is None:
            raise ImportError("gta_verl.retrieval.config is not available in this build")
        return cls(**self.knobs)

    def serving_config(self) -> Any:
        """The :class:`gta_verl.retrieval.config.ServingConfig` of the replica keys."""
        from gta_verl.retrieval.serving.config import ServingConfig

        return ServingConfig(num_replicas=int(self.num_replicas), min_replicas=self.min_replicas,
                             max_replicas=self.max_replicas, placement=self.placement,
                             resource=self.resource, num_cpus=float(self.num_cpus))

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.SERVICE_KEYS}, **self.knobs}


@dataclass(frozen=True)
class GTAConfig:
    """The whole ``gta:`` node."""

    retriever: RetrieverSection = field(default_factory=RetrieverSection)
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward: TrajectoryRewardConfig = field(default_factory=TrajectoryRewardConfig)
    path_router: Any = None
    """``PathRouterConfig`` when the PathRouter recipe sets ``gta.path_router``, else None."""

    SECTIONS = ("retriever", "agent", "reward", "path_router")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> GTAConfig:
        """Build and validate from a plain dict (``None`` or ``{}`` → all defaults).

        Raises:
            ValueError: on an unknown key (the message lists the valid ones) or a bad value.
        """
        values = dict(values or {})
        _reject_unknown(values, set(cls.SECTIONS), "gta")
        return cls(
            retriever=RetrieverSection.from_dict(values.get("retriever")),
            agent=AgentConfig.from_mapping(values.get("agent")),
            reward=TrajectoryRewardConfig.from_mapping(values.get("reward"), where="gta.reward"),
            path_router=_path_router_from(values.get("path_router")),
        )

    @classmethod
    def from_trainer_config(cls, cfg: Any) -> GTAConfig:
        """Read ``cfg.gta`` from the trainer's OmegaConf/DictConfig (or a plain dict)."""
        node = _get(cfg, "gta")
        return cls.from_dict(_to_plain(node))


def _path_router_from(node: Any) -> Any:
    if node is None:
        return None
    cls = _path_router_config_cls()
    if cls is None:
        raise ValueError(
            "gta.path_router is set but gta_verl.rewards.path_router is not importable; "
            "set gta.path_router=null or install the full gta-verl package"
        )
    return cls.from_mapping(node)


def _get(cfg: Any, key: str) -> Any:
    if cfg is None:
        return None
    if hasattr(cfg, "get"):
        return cfg.get(key)
    return getattr(cfg, key, None)


def _to_plain(node: Any) -> Any:
    """OmegaConf node → plain dict/list (resolving interpolations); plain data unchanged."""
    if node is None:
        return None
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf ships with hydra/verl
        return node
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def reward_config_from_trainer(cfg: Any) -> TrajectoryRewardConfig:
    """Reward values for the reward managers: ``gta.reward``, overridden by any
    ``reward.reward_kwargs`` key that names a :class:`TrajectoryRewardConfig` field.

    ``reward.reward_kwargs`` is verl's free-form manager-settings node, so keys meant for
    other managers are ignored rather than rejected there.
    """
    base = TrajectoryRewardConfig.from_mapping(_to_plain(_get(_get(cfg, "gta"), "reward")))
    kwargs = _to_plain(_get(_get(cfg, "reward"), "reward_kwargs")) or {}
    names = {f.name for f in fields(TrajectoryRewardConfig)}
    overrides = {k: v for k, v in dict(kwargs).items() if k in names}
    return dataclasses.replace(base, **overrides) if overrides else base
