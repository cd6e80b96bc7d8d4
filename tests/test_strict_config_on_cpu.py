"""The one strict config idiom: OmegaConf or plain input, unknown keys named with the valid ones."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from gta_verl.agent.config import AgentConfig
from gta_verl.config import GTAConfig
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.section import RetrieverSection
from gta_verl.retrieval.serving.config import ServingConfig
from gta_verl.rewards.path_router import PathRouterConfig, PathRouterKLConfig
from gta_verl.rewards.trajectory import TrajectoryRewardConfig
from gta_verl.strict_config import StrictConfig, node_at, to_plain, value_at

BUILDERS = (
    AgentConfig,
    GTAConfig,
    PathRouterConfig,
    PathRouterKLConfig,
    RetrieverConfig,
    RetrieverSection,
    ServingConfig,
    TrajectoryRewardConfig,
)


@pytest.mark.parametrize("cls", BUILDERS)
def test_every_config_builder_is_the_strict_one(cls: type) -> None:
    assert issubclass(cls, StrictConfig) and dataclasses.is_dataclass(cls)
    assert cls.from_mapping(None) == cls() == cls.from_mapping(OmegaConf.create({}))
    message = r"unknown key\(s\) \['no_such_key'\] under .*; valid keys: \["
    with pytest.raises(ValueError, match=message) as err:
        cls.from_mapping({"no_such_key": 1})
    assert all(repr(k) in str(err.value) for k in sorted(cls.known_keys())[:3])


def test_omegaconf_nodes_are_converted_once_and_resolved() -> None:
    cfg = OmegaConf.create({"k": 5, "gta": {"agent": {"max_actions": "${k}"}}})
    assert to_plain(cfg.gta) == {"agent": {"max_actions": 5}}
    assert node_at(cfg, "gta", "agent", "max_actions") == 5
    assert node_at(cfg, "gta", "missing", "x") is None and node_at(None, "gta") is None
    assert AgentConfig.from_mapping(node_at(cfg, "gta", "agent")).max_actions == 5
    with pytest.raises(TypeError, match="gta.agent must be a mapping"):
        AgentConfig.from_mapping([1, 2])


@dataclasses.dataclass
class _Model:  # an object read by attribute (verl's model config is a dataclass)
    path: str = "/m"
    trust_remote_code: bool = False
    local_path: str | None = None


def test_value_at_reads_a_dotted_path_with_a_default() -> None:
    cfg = OmegaConf.create(
        {
            "k": "gta_sync",
            "trainer": {"use_v1": False, "seed": 0, "v1": {"trainer_mode": "${k}"}, "name": None},
            "hydra": {"job": {"config_name": "gta_grpo"}},
        }
    )
    OmegaConf.set_struct(cfg, True)  # a composed Hydra config: absent keys still read as the default
    assert value_at(cfg, "trainer.v1.trainer_mode", "sync") == "gta_sync"  # interpolation resolved
    assert value_at(cfg, "hydra.job.config_name", "this recipe") == "gta_grpo"
    assert value_at(cfg, "trainer.use_v1", True) is False  # falsy values are kept
    assert value_at(cfg, "trainer.seed", 7) == 0
    assert value_at(cfg, "trainer.name", "x") == "x"  # None reads as the default
    assert value_at(cfg, "trainer.missing", 64) == 64
    assert value_at(cfg, "gta.agent.place_turn_rewards", False) is False  # absent section
    assert value_at(cfg, "trainer.use_v1.deeper", "d") == "d"  # a leaf is not a node
    assert value_at(None, "trainer", 3) == 3 and value_at(cfg, "trainer.missing") is None
    plain = {"trainer": {"v1": {"trainer_mode": "gta_path_router_sync"}}}
    assert value_at(plain, "trainer.v1.trainer_mode", "sync") == "gta_path_router_sync"
    model = _Model()
    assert value_at(model, "path") == "/m" and value_at(model, "local_path") is None
    assert value_at(model, "trust_remote_code", True) is False
    assert value_at(model, "revision", "main") == "main"


def test_from_dict_is_a_deprecated_alias() -> None:
    with pytest.warns(DeprecationWarning, match="from_mapping"):
        assert RetrieverConfig.from_dict({"k_graph": 4}) == RetrieverConfig(k_graph=4)


def test_retriever_section_is_composed_of_the_serving_and_retriever_configs() -> None:
    section = RetrieverSection.from_mapping({"kb_dir": "/kb", "max_batch": 32, "k_dense": 4})
    assert section.serving == ServingConfig(num_cpus=4.0, max_batch=32)  # the section's num_cpus default
    assert section.retrieval == RetrieverConfig(k_dense=4)
    assert RetrieverSection().serving.num_cpus == 4.0 and ServingConfig().num_cpus == 1.0
    assert RetrieverSection.from_mapping(section.to_dict()) == section
    with pytest.warns(DeprecationWarning, match="RetrieverSection.serving.num_cpus"):
        assert section.num_cpus == 4.0
