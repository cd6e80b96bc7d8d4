"""GTAConfig: the typed gta: node (defaults, unknown keys, section delegation)."""

from __future__ import annotations

import pickle

import pytest
from omegaconf import OmegaConf

from gta_verl.config import GTAConfig, RetrieverSection, reward_config_from_trainer
from gta_verl.rewards.trajectory import TrajectoryRewardConfig


def test_defaults_are_the_paper_values():
    cfg = GTAConfig.from_dict(None)
    assert cfg.agent.max_actions == 5 and cfg.agent.place_turn_rewards is False
    assert cfg.reward == TrajectoryRewardConfig(0.25, -0.10, -1.0, 1.0, 2.0)
    knobs = cfg.retriever.knobs
    assert (knobs["mode"], knobs["k_graph"], knobs["k_dense"], knobs["alpha"], knobs["top_n_triples"]) == (
        "hybrid",
        3,
        3,
        0.5,
        5,
    )
    assert cfg.retriever.actor_name == "gta_verl_graph_retriever"
    assert cfg.path_router is None


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"agnt": {}}, r"unknown key\(s\) \['agnt'\] under gta;"),
        ({"retriever": {"k_grph": 2}}, r"under gta.retriever; valid keys: \[.*'k_graph'"),
        ({"retriever": {"mode": "bm25"}}, "gta.retriever.mode='bm25'"),
        ({"retriever": {"timeout_s": 0}}, "timeout_s"),
        ({"agent": {"max_actions": 0}}, "max_actions"),
        ({"reward": {"hit": 1}}, "under gta.reward"),
        ({"path_router": {"theta_x": 1}}, "theta_x"),
    ],
)
def test_rejects_with_actionable_message(values, match):
    with pytest.raises(ValueError, match=match):
        GTAConfig.from_dict(values)


def test_from_trainer_config_and_retriever_config():
    cfg = OmegaConf.create({"gta": {"retriever": {"kb_dir": "/kb", "mode": "dense", "fusion": "rrf"}}})
    gta = GTAConfig.from_trainer_config(cfg)
    assert gta.retriever.kb_dir == "/kb"
    rc = gta.retriever.retriever_config()
    assert rc.mode == "dense" and rc.fusion == "rrf"
    assert GTAConfig.from_trainer_config(OmegaConf.create({})) == GTAConfig()
    assert pickle.loads(pickle.dumps(gta)) == gta  # shipped to Ray workers


def test_path_router_section():
    gta = GTAConfig.from_dict({"path_router": {"theta_p": 0.2}})
    assert gta.path_router.theta_p == 0.2


def test_retriever_section_round_trip():
    section = RetrieverSection.from_dict({"kb_dir": "/kb", "k_dense": 5})
    assert RetrieverSection.from_dict(section.to_dict()) == section


def test_reward_kwargs_override_gta_reward():
    cfg = OmegaConf.create(
        {"gta": {"reward": {"miss": -0.2}}, "reward": {"reward_kwargs": {"wrong": -2.0, "max_resp_len": 10}}}
    )
    rc = reward_config_from_trainer(cfg)
    assert (rc.miss, rc.wrong, rc.hit_per_doc) == (-0.2, -2.0, 0.25)
    assert reward_config_from_trainer(OmegaConf.create({})) == TrajectoryRewardConfig()
