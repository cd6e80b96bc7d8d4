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
from gta_verl.strict_config import StrictConfig, node_at, to_plain

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
