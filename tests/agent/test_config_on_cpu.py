"""AgentConfig (gta.agent) validation."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from gta_verl.agent.config import AgentConfig, agent_config_from_trainer_config


def test_defaults_are_the_paper_values() -> None:
    cfg = AgentConfig()
    assert (cfg.max_actions, cfg.place_turn_rewards, cfg.retriever_transport) == (5, False, "auto")


def test_from_trainer_config() -> None:
    cfg = OmegaConf.create({"gta": {"agent": {"max_actions": 3, "place_turn_rewards": True}}})
    agent = agent_config_from_trainer_config(cfg)
    assert agent.max_actions == 3 and agent.place_turn_rewards is True
    assert agent_config_from_trainer_config(OmegaConf.create({})) == AgentConfig()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_actions": 0}, "max_actions"),
        ({"max_obs_tokens": 4}, "max_obs_tokens"),
        ({"retriever_transport": "grpc"}, "retriever_transport"),
        ({"retriever_transport": "http"}, "retriever_url"),
        ({"max_action": 5}, "unknown gta.agent keys"),
    ],
)
def test_bad_values(values, message) -> None:
    with pytest.raises(ValueError, match=message):
        AgentConfig.from_mapping(values)


def test_bad_types() -> None:
    with pytest.raises(TypeError, match="true/false"):
        AgentConfig(place_turn_rewards="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mapping"):
        AgentConfig.from_mapping(["max_actions", 3])  # type: ignore[arg-type]
