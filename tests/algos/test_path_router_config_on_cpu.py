"""PathRouter plugin names, Hydra composition of the YAMLs and recipes against verl 0.9.1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import verl  # noqa: F401  (loads the verl.plugins entry point → gta_verl.verl_plugins)
from omegaconf import OmegaConf

from tests.support.dry_run import command_blocks

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes" / "path_router"
CONFIG_DIR = REPO / "gta_verl" / "config"
REQUIRED = [
    "data.train_files=t.parquet",
    "data.val_files=v.parquet",
    "actor_rollout_ref.model.path=/m",
    "gta.retriever.kb_dir=/kb",
]


def compose(name: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(config_name=name, overrides=overrides)


def flat(cfg) -> dict[str, object]:
    out: dict[str, object] = {}

    def walk(node, prefix):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return out


def test_plugin_names_resolve_after_import_verl():
    from verl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls
    from verl.trainer.distillation.losses import get_distillation_loss_settings
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from gta_verl.verl_plugins import LOADED

    assert LOADED["gta_verl.rewards.path_router_manager"] and LOADED["gta_verl.algos.distill_loss"]
    assert LOADED["gta_verl.algos.trainer"]
    assert get_reward_manager_cls("path_router").__name__ == "PathRouterRewardManager"
    assert get_distillation_loss_settings("gta_selective_topk_kl").use_topk
    assert get_trainer_cls("gta_path_router_sync").__name__ == "GTAPathRouterTrainer"


@pytest.mark.parametrize("name", ["path_router", "gta_path_router"])
def test_yaml_composes_and_builds_verl_dataclasses(name):
    from verl.utils.config import omega_conf_to_dataclass

    from gta_verl.config import GTAConfig

    cfg = compose(name, REQUIRED)
    assert cfg.trainer.v1.trainer_mode == "gta_path_router_sync"
    assert cfg.reward.reward_manager.name == "path_router"
    assert (
        cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class
        == "gta_verl.algos.teacher.GTAAgentLoopManagerTQ"
    )
    assert cfg.distillation.teacher_models.teacher_model.model_path == "/m"  # same checkpoint as the actor
    dist = omega_conf_to_dataclass(cfg.distillation)
    assert dist.enabled and dist.distillation_loss.loss_settings.use_topk
    assert dist.distillation_loss.topk == 32 and dist.distillation_loss.log_prob_min_clamp is None
    assert omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout).agent.agent_loop_manager_class
    pr = GTAConfig.from_trainer_config(cfg).path_router
    assert pr.base_reward == ("trajectory_guided" if name == "gta_path_router" else "path_router")


@pytest.mark.parametrize(
    ("override", "check"),
    [
        ("gta.path_router.route_scaling=false", lambda pr, c: pr.effective_weights == (1.0, 1.0, 1.0, 1.0)),
        ("gta.path_router.routing=answer_only", lambda pr, c: pr.routing == "answer_only"),
        ("gta.path_router.routing=path_only", lambda pr, c: pr.routing == "path_only"),
        (
            "gta.path_router.kl.enabled=false",
            lambda pr, c: not pr.kl.enabled and c.distillation.enabled is False,
        ),
        ("gta.path_router.kl.selective=false", lambda pr, c: not pr.kl.selective),
        ("gta.path_router.kl.schedule=constant", lambda pr, c: pr.kl.schedule == "constant"),
        ("gta.path_router.kl.topk=16", lambda pr, c: c.distillation.distillation_loss.topk == 16),
        ("gta.path_router.overlap=bag", lambda pr, c: pr.overlap == "bag" and pr.theta_p == 0.4),
    ],
)
def test_ablation_overrides(override, check):
    from gta_verl.rewards.path_router import path_router_config_from_trainer

    cfg = compose("path_router", REQUIRED + [override])
    assert check(path_router_config_from_trainer(cfg), cfg)


def test_combination_differs_only_in_reward_and_name():
    a, b = flat(compose("path_router", REQUIRED)), flat(compose("gta_path_router", REQUIRED))
    diff = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    # β·KL to the reference: off in PathRouter's faithful config (its loss has none), on in the
    # combination (GTA-RAG eq 21)
    kl = "actor_rollout_ref.actor.use_kl_loss"
    assert diff == {"gta.path_router.base_reward", "trainer.experiment_name", kl}
    assert a[kl] is False and b[kl] is True
    for name in ("path_router", "gta_path_router", "gta_grpo"):  # explicit: the papers' per-trajectory mean
        assert flat(compose(name, REQUIRED))["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"


def test_rollout_settings_mirror_gta_grpo():
    """path_router.yaml copies gta_grpo.yaml's rollout/agent/retriever keys (it cannot include it)."""
    pr, gta = flat(compose("path_router", REQUIRED)), flat(compose("gta_grpo", REQUIRED))
    prefixes = (
        "data.",
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.rollout.name",
        "actor_rollout_ref.rollout.mode",
        "actor_rollout_ref.rollout.agent.default_agent_loop",
        "gta.retriever.",
        "gta.agent.",
        "gta.reward.",
    )
    keys = [k for k in gta if k.startswith(prefixes)]
    assert keys
    mismatched = {k: (pr.get(k), gta[k]) for k in keys if pr.get(k) != gta[k]}
    assert not mismatched


# ----------------------------------------------------------------------------- recipes
def dry_run(script: str, **env) -> list[list[str]]:
    run_env = {
        **os.environ,
        "DRY_RUN": "1",
        "PYTHON": str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else "python3",
        **env,
    }
    out = subprocess.run(
        ["bash", str(RECIPES / script)], env=run_env, capture_output=True, text=True, check=True
    )
    return command_blocks(out.stdout)


def _hydra_args(cmd: list[str]) -> tuple[str, list[str]]:
    i = cmd.index("--config-name")
    return cmd[i + 1], cmd[i + 2 :]


@pytest.mark.parametrize(
    ("script", "env"),
    [
        ("run_qwen2_5_3b_fsdp.sh", {}),
        ("run_qwen2_5_7b_fsdp.sh", {"ABLATION": "no_kl"}),
        ("run_qwen2_5_3b_fsdp.sh", {"ABLATION": "uniform_kl", "CONFIG_NAME": "gta_path_router"}),
        ("run_qwen2_5_3b_fsdp.sh", {"ABLATION": "answer_only"}),
        ("gpu_check.sh", {}),
    ],
)
def test_recipe_overrides_compose(script, env):
    from gta_verl.rewards.path_router import path_router_config_from_trainer

    (cmd,) = dry_run(script, **env)
    name, overrides = _hydra_args(cmd)
    cfg = compose(name, overrides)
    pr = path_router_config_from_trainer(cfg)
    assert cfg.distillation.teacher_models.teacher_model.model_path == cfg.actor_rollout_ref.model.path
    if env.get("ABLATION") == "no_kl":
        assert cfg.distillation.enabled is False
    if env.get("ABLATION") == "uniform_kl":
        assert not pr.kl.selective and pr.base_reward == "trajectory_guided"
    if script == "gpu_check.sh":
        assert cfg.trainer.total_training_steps == 2 and cfg.trainer.n_gpus_per_node == 1
        assert cfg.distillation.n_gpus_per_node == 1 and pr.kl.schedule == "constant"


def test_unknown_ablation_fails_and_ray_submit_forwards():
    run_env = {**os.environ, "DRY_RUN": "1", "ABLATION": "nope", "GTA_CONFIG_DIR": str(CONFIG_DIR)}
    res = subprocess.run(
        ["bash", str(RECIPES / "run_qwen2_5_3b_fsdp.sh")],
        env=run_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 2 and "unknown ABLATION" in res.stderr
    (cmd,) = dry_run("submit_ray_job.sh", NNODES="2", ABLATION="no_route_scaling")
    assert cmd[:3] == ["ray", "job", "submit"] and cmd[-1].endswith("run_qwen2_5_7b_fsdp.sh")
    assert '"ABLATION": "no_route_scaling"' in cmd[cmd.index("--runtime-env-json") + 1]
