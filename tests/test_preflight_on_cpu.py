"""The launch preflight: verl's ``trainer.v1.trainer_mode`` on our recipes, before Ray starts.

The pure resolution is checked against the hand-written table of names; the recipe YAML's
callbacks (the preflight, then the recipe guard) are instantiated with Hydra's own
``Callbacks`` class and notified in Hydra's order (``on_run_start``, ``on_job_start``) on the
composed config; one refusal goes through stock ``python -m verl.trainer.main_ppo`` to show it
stops before ``ray.init``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import gta_verl
from gta_verl.preflight import (
    PreflightError,
    apply_preflight,
    check_agent_loop,
    resolve_trainer_mode,
    trainer_name,
)

CONFIG_DIR = Path(gta_verl.__file__).parent / "config"
#: recipe config → the trainer family its YAML declares
RECIPES = {"gta_grpo": "gta", "path_router": "gta_path_router", "gta_path_router": "gta_path_router"}
REQUIRED = ("data.train_files=t.parquet", "data.val_files=v.parquet", "actor_rollout_ref.model.path=m")

# (family, trainer.v1.trainer_mode) → the trainer that runs, written out by hand.
EXPECTED = {
    ("gta", "sync"): "gta_sync",
    ("gta", "colocate_async"): "gta_colocate_async",
    ("gta", "separate_async"): "gta_separate_async",
    ("gta", "gta_sync"): "gta_sync",
    ("gta", "gta_colocate_async"): "gta_colocate_async",
    ("gta_path_router", "sync"): "gta_path_router_sync",
    ("gta_path_router", "colocate_async"): "gta_path_router_colocate_async",
    ("gta_path_router", "separate_async"): "gta_path_router_separate_async",
    ("gta_path_router", "gta_path_router_sync"): "gta_path_router_sync",
    ("gta_path_router", "gta_path_router_separate_async"): "gta_path_router_separate_async",
}


@pytest.mark.parametrize(("family", "requested"), sorted(EXPECTED))
def test_mode_table(family, requested):
    choice = resolve_trainer_mode(family, requested, rollout_name="vllm")
    assert choice.trainer == EXPECTED[family, requested]
    assert choice.mapped == (requested in ("sync", "colocate_async", "separate_async"))


def test_trainer_name_rejects_unknown():
    assert trainer_name("gta_path_router", "colocate_async") == "gta_path_router_colocate_async"
    with pytest.raises(ValueError):
        trainer_name("gta", "fully_async")


def test_other_family_is_left_to_the_recipe_guard():
    # gta_sync on a PathRouter recipe is not mapped (nor "fixed"): the recipe guard refuses it.
    choice = resolve_trainer_mode("gta_path_router", "gta_sync")
    assert (choice.trainer, choice.mode, choice.mapped) == ("gta_sync", None, False)


def test_separate_async_refused_on_hf_cpu_only():
    with pytest.raises(PreflightError, match=r"trainer_separate_async.py:64-70.*colocate_async$"):
        resolve_trainer_mode("gta", "separate_async", rollout_name="hf_cpu")
    assert (
        resolve_trainer_mode("gta", "colocate_async", rollout_name="hf_cpu").trainer == "gta_colocate_async"
    )
    assert resolve_trainer_mode("gta", "separate_async", rollout_name="vllm").trainer == "gta_separate_async"


def test_unknown_trainer_is_kept():
    choice = resolve_trainer_mode("gta", "my_own_trainer")
    assert (choice.trainer, choice.mode, choice.mapped) == ("my_own_trainer", None, False)


def test_agent_loop_rules():
    check_agent_loop("gta", "tool_agent", place_turn_rewards=False)  # Stage I may use tool_agent
    check_agent_loop("gta_path_router", "gta_search_agent", place_turn_rewards=False)
    with pytest.raises(PreflightError, match="PathRouter needs .*gta_search_agent"):
        check_agent_loop("gta_path_router", "tool_agent", place_turn_rewards=False)
    with pytest.raises(PreflightError, match="place_turn_rewards=true needs"):
        check_agent_loop("gta", "tool_agent", place_turn_rewards=True)


def _compose(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=name, overrides=[*REQUIRED, *overrides], return_hydra_config=True)


def _run_callbacks(cfg) -> None:
    """What ``@hydra.main`` does before the task function: build and notify the callbacks."""
    from hydra._internal.callbacks import Callbacks

    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name="recipe")
    callbacks.on_job_start(config=cfg, task_function=None)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("mode", ["sync", "colocate_async", "separate_async"])
def test_recipe_callback_maps_verl_mode(recipe, mode, capsys):
    cfg = _compose(recipe, f"trainer.v1.trainer_mode={mode}")
    assert cfg.hydra.callbacks.gta_preflight.family == RECIPES[recipe]
    _run_callbacks(cfg)
    assert cfg.trainer.v1.trainer_mode == f"{RECIPES[recipe]}_{mode}"
    assert f"runs {RECIPES[recipe]}_{mode}" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_default_is_unchanged(recipe):
    cfg = _compose(recipe)
    default = cfg.trainer.v1.trainer_mode
    _run_callbacks(cfg)
    assert cfg.trainer.v1.trainer_mode == default == f"{RECIPES[recipe]}_sync"


def test_callbacks_exit_with_one_line():
    cfg = _compose(
        "gta_grpo", "actor_rollout_ref.rollout.name=hf_cpu", "trainer.v1.trainer_mode=separate_async"
    )
    with pytest.raises(SystemExit, match=r"^gta_verl: trainer.v1.trainer_mode=separate_async cannot run: "):
        _run_callbacks(cfg)
    # another family's trainer: the recipe guard's refusal
    cfg = _compose("path_router", "trainer.v1.trainer_mode=gta_sync")
    with pytest.raises(
        SystemExit, match=r"^gta_verl: config .* set trainer.v1.trainer_mode=gta_path_router_sync"
    ):
        _run_callbacks(cfg)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_unknown_gta_key_stops_the_launch_naming_the_valid_ones(recipe):
    cfg = _compose(recipe, "+gta.reward.step_shapping=potential")
    with pytest.raises(SystemExit, match=r"^gta_verl: .*step_shapping.*step_shaping"):
        _run_callbacks(cfg)
    cfg = _compose(recipe, "+gta.rewardd.x=1")
    with pytest.raises(PreflightError, match=r"rewardd"):
        apply_preflight(cfg, RECIPES[recipe])


def test_apply_preflight_on_tool_agent_path_router():
    cfg = _compose("path_router", "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent")
    with pytest.raises(PreflightError, match="PathRouter needs"):
        apply_preflight(cfg, "gta_path_router")


def test_main_ppo_stops_before_ray():
    """Stock ``main_ppo``: the refusal is the last stderr line, exit 1, and Ray never started."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["HF_HUB_OFFLINE"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "--config-path",
        str(CONFIG_DIR),
        "--config-name",
        "gta_grpo",
        *REQUIRED,
        "actor_rollout_ref.rollout.name=hf_cpu",
        "trainer.v1.trainer_mode=separate_async",
        "hydra.run.dir=.",
        "hydra.output_subdir=null",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert lines[-1].startswith("gta_verl: trainer.v1.trainer_mode=separate_async cannot run:"), lines[-5:]
    assert "ray init kwargs" not in proc.stdout  # printed by run_ppo right before ray.init


def test_policy_names_are_resolved_last(monkeypatch, tmp_path):
    """A policy name at a model path becomes its directory; a launch refused first never prepares it."""
    from gta_verl.policies import POLICIES

    calls: list[Path] = []
    monkeypatch.setitem(POLICIES, "gemma-3-270m", lambda: calls.append(tmp_path) or tmp_path)
    refused = _compose(
        "gta_grpo",
        "actor_rollout_ref.model.path=gemma-3-270m",
        "actor_rollout_ref.rollout.name=hf_cpu",
        "trainer.v1.trainer_mode=separate_async",
    )
    with pytest.raises(PreflightError, match="cannot run"):
        apply_preflight(refused, "gta")
    assert calls == [] and refused.actor_rollout_ref.model.path == "gemma-3-270m"
    cfg = _compose("path_router", "actor_rollout_ref.model.path=gemma-3-270m")
    apply_preflight(cfg, "gta_path_router")
    assert (
        cfg.actor_rollout_ref.model.path
        == str(tmp_path)
        == cfg.distillation.teacher_models.teacher_model.model_path
    )
    assert calls == [tmp_path]
