"""The CPU recipe's knobs for async modes and verl's tool agent, checked up to where Ray starts.

``recipes/cpu/run.sh`` is run with ``DRY_RUN=1``; its ``main_ppo`` argv is composed with the
Hydra node, the recipe YAML's callbacks (preflight, recipe guard) run as ``@hydra.main`` runs them, and then
verl's ``main_ppo.main`` body (``run_ppo`` replaced) and the names the job resolves after Ray
starts are checked, as in ``test_validate_config_on_cpu.py``.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from tests.recipes.test_validate_config_on_cpu import (
    CPU_RUN,
    dry_run,
    resolve_job_names,
    run_main_ppo_until_ray,
)


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins and resolvers register)


def _launch(recipe: str, *overrides: str, **env: str):
    """The job config ``main_ppo`` would receive, after the recipe's Hydra callbacks ran."""
    from hydra._internal.callbacks import Callbacks

    (argv,) = dry_run(CPU_RUN, recipe, *overrides, **env)
    config_dir = argv[argv.index("--config-path") + 1]
    name = argv[argv.index("--config-name") + 1]
    args = [a for a in argv[argv.index("--config-name") + 2 :] if not a.startswith("--")]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name=name, overrides=args, return_hydra_config=True)
    callbacks = Callbacks(cfg)  # the preflight, then the recipe guard, in Hydra's order
    callbacks.on_run_start(config=cfg, config_name=name)
    callbacks.on_job_start(config=cfg, task_function=None)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


@pytest.mark.parametrize(
    ("recipe", "trainer"),
    [("gta_stage1", "gta_colocate_async"), ("path_router", "gta_path_router_colocate_async")],
)
def test_colocate_async_knob(recipe, trainer, monkeypatch):
    cfg = _launch(recipe, "trainer.v1.trainer_mode=colocate_async")
    assert cfg.trainer.v1.trainer_mode == trainer
    assert "TaskRunnerV1" in run_main_ppo_until_ray(cfg, monkeypatch)
    resolve_job_names(cfg)


def test_separate_async_on_cpu_stops_in_one_line():
    with pytest.raises(SystemExit, match=r"^gta_verl: trainer.v1.trainer_mode=separate_async cannot run: "):
        _launch("gta_stage1", "trainer.v1.trainer_mode=separate_async")


def test_tool_agent_knob(monkeypatch):
    from gta_verl.agent.chat_templates import QWEN25_TOOL_CHAT_TEMPLATE

    cfg = _launch("gta_stage1", AGENT="tool_agent")
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.agent.default_agent_loop == "tool_agent"
    assert rollout.multi_turn.tool_config_path.endswith("gta_verl/config/tools/graph_search.yaml")
    assert rollout.multi_turn.format == "hermes" and rollout.multi_turn.max_assistant_turns == 5
    assert cfg.data.max_prompt_length == 512  # the tool list in the system prompt
    assert cfg.actor_rollout_ref.model.custom_chat_template == QWEN25_TOOL_CHAT_TEMPLATE
    assert "TaskRunnerV1" in run_main_ppo_until_ray(cfg, monkeypatch)
    resolve_job_names(cfg)


def test_tool_agent_with_path_router_stops_in_one_line():
    with pytest.raises(SystemExit, match="^gta_verl: PathRouter needs .*gta_search_agent"):
        _launch("path_router", AGENT="tool_agent")


@pytest.mark.parametrize("backend", ["dense", "bm25"])
def test_retriever_backend_override(backend, monkeypatch):
    """``gta.retriever.backend=…`` (no ``+``: the YAML declares the key) reaches the service spec."""
    from gta_verl.agent.retriever_access import retriever_section

    cfg = _launch("gta_stage1", f"gta.retriever.backend={backend}")
    spec = retriever_section(cfg).spec()
    assert spec.config.backend == backend and spec.kb_dir.startswith("/")
    assert "TaskRunnerV1" in run_main_ppo_until_ray(cfg, monkeypatch)  # verl's validate_config passes


@pytest.mark.parametrize(("dtype", "expected"), [(None, "float32"), ("bfloat16", "bfloat16")])
def test_vllm_rollout_dtype_knob(dtype, expected):
    env = {"ROLLOUT": "vllm"} | ({"ROLLOUT_DTYPE": dtype} if dtype else {})
    cfg = _launch("gta_stage1", **env)
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.actor_rollout_ref.rollout.dtype == expected


def test_vllm_rollout_dtype_knob_refuses_other_values():
    import subprocess

    proc = subprocess.run(
        ["bash", str(CPU_RUN), "gta_stage1"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", "ROLLOUT": "vllm", "ROLLOUT_DTYPE": "fp16"},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "ROLLOUT_DTYPE=fp16: expected float32 or bfloat16" in proc.stderr
