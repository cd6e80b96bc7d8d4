"""Typed settings of the GTA search agent loop (the ``gta.agent`` config node).

:class:`gta_verl.config.GTAConfig` embeds :class:`AgentConfig` as its ``agent``
section; the agent loop reads it from the trainer config with
:func:`agent_config_from_trainer_config`, so a recipe sets e.g.
``+gta.agent.max_actions=4`` and every agent-loop worker sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gta_verl.protocol import checked_max_queries
from gta_verl.strict_config import StrictConfig, node_at

RetrieverTransport = Literal["auto", "ray", "inprocess", "http"]
RETRIEVER_TRANSPORTS = ("auto", "ray", "inprocess", "http")


@dataclass(frozen=True)
class AgentConfig(StrictConfig):
    """Algorithm 1 knobs (``gta.agent``) and how the agent loop reaches the retriever.

    The retriever service itself (KB dir, Ray actor name, call timeout, K's) is
    ``gta.retriever`` (:class:`gta_verl.retrieval.section.RetrieverSection`); this section only
    says which transport the rollout uses to reach it.

    Attributes:
        max_actions: Action budget B: the loop stops after B actions (searches,
            answers or invalid actions) without an answer. Our default 5 (GTA-RAG names B
            but does not give its value).
        max_obs_tokens: Cap on one ``<info> … </info>`` observation in tokens, like
            Search-R1's ``max_obs_length=500``. A longer observation is fitted by cutting
            every passage to the same token budget, so all passages are shown
            (:mod:`gta_verl.agent.observation`); only passages that are shown are recorded
            for the rewards. 512 does NOT fit K_g + K_d = 6 MuSiQue paragraphs: they average
            121 Qwen tokens with their header (median 107, p90 207), a random 6 is > 512 in 95%
            of draws (median 724), so most observations show ~70 tokens of each passage.
        place_turn_rewards: Opt-in (beyond the paper): spread R_traj over the response,
            each search reward on its query's last token (see
            :mod:`gta_verl.rewards.placement`). Off = the paper's trajectory-level scalar.
        retriever_transport: ``auto`` = the named Ray actor when Ray is initialised
            (created with ``get_if_exists`` if missing), else an in-process retriever;
            or force ``ray`` / ``inprocess`` / ``http``.
        retriever_url: Base URL of a retriever server (``http`` transport only).
        max_queries_per_turn: K, the most queries one ``<search>`` action may carry,
            separated by ``##`` (:func:`gta_verl.protocol.split_queries`). Default 1 = one
            query per search (the paper). Above 1 (opt-in, ParallelSearch-style) a turn's
            queries go to the retriever in one batched call and the observation shows the
            union of their passages; every reward counts that union as the turn's R(q_t).
            Build the parquet prompts with the same K (``build_messages(q, K)``) so the
            policy is told.
    """

    WHERE = "gta.agent"

    max_actions: int = 5
    max_obs_tokens: int = 512
    place_turn_rewards: bool = False
    retriever_transport: RetrieverTransport = "auto"
    retriever_url: str | None = None
    max_queries_per_turn: int = 1

    def __post_init__(self) -> None:
        checked_max_queries(self.max_queries_per_turn)
        if int(self.max_actions) < 1:
            raise ValueError(
                f"gta.agent.max_actions must be >= 1 (the action budget B), got {self.max_actions}"
            )
        if int(self.max_obs_tokens) < 16:
            raise ValueError(
                f"gta.agent.max_obs_tokens must be >= 16 to fit '<info>…</info>', got {self.max_obs_tokens}"
            )
        if not isinstance(self.place_turn_rewards, bool):
            raise TypeError(
                f"gta.agent.place_turn_rewards must be true/false, got {self.place_turn_rewards!r}"
            )
        if self.retriever_transport not in RETRIEVER_TRANSPORTS:
            raise ValueError(
                f"gta.agent.retriever_transport={self.retriever_transport!r}; "
                f"expected one of {RETRIEVER_TRANSPORTS}"
            )
        if self.retriever_transport == "http" and not self.retriever_url:
            raise ValueError("gta.agent.retriever_transport=http needs gta.agent.retriever_url")


def agent_config_from_trainer_config(trainer_config: Any) -> AgentConfig:
    """Return the ``gta.agent`` section of a full trainer config (defaults if absent)."""
    return AgentConfig.from_mapping(node_at(trainer_config, "gta", "agent"))
