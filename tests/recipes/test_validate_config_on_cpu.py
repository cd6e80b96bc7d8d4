"""Every recipe's config passes what verl's ``main_ppo`` runs before Ray starts.

Each launch script is run for real with ``DRY_RUN=1`` (``recipes/lib.sh``'s ``run`` prints
the final ``main_ppo`` command, one argument per line, then ``----``): GTA-RAG (3B and 7B),
PathRouter (3B and 7B × ``path_router`` / ``gta_path_router`` × every ``ABLATION``), the
PathRouter GPU check and the CPU recipes (``recipes/cpu/run.sh <recipe>``). The printed
overrides are composed under Hydra against the packaged YAML exactly as ``--config-path`` /
``--config-name`` would, and handed to ``verl.trainer.main_ppo.main`` itself (the function
under ``@hydra.main``) with only ``run_ppo`` — the part that starts Ray — replaced by a
recorder. So ``auto_set_device``, ``validate_config(config, need_reference_policy(config),
need_critic(config))`` and the V1/classic dispatch are verl's own code.

Afterwards the names the job resolves once Ray is up are resolved here too: the V1 trainer
mode, the reward manager, the agent loop, the agent-loop manager class and, with
distillation on, the distillation loss (verl's ``DistillationConfig`` dataclass).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import gta_verl
from gta_verl.bundled import CPU_RUN_SH
from gta_verl.config import GTAConfig
from tests.support.dry_run import command_blocks

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = Path(gta_verl.__file__).parent / "config"
GTA_RAG_SCRIPTS = (
    "stage1_trajectory_guided.sh",
    "stage2_em.sh",
    "run_two_stage.sh",
    "baseline_em_only.sh",
    "baseline_no_graph.sh",
    "baseline_no_validation.sh",
    "gpu_smoke.sh",
)
PATH_ROUTER_SCRIPTS = ("run_qwen2_5_3b_fsdp.sh", "run_qwen2_5_7b_fsdp.sh")
ABLATIONS = (
    "full",
    "no_route_scaling",
    "answer_only",
    "path_only",
    "no_kl",
    "uniform_kl",
    "constant_lambda",
    "bag_overlap",
)
CPU_RUN = CPU_RUN_SH  # the copy the wheel ships; recipes/cpu/run.sh in a checkout links to it
CPU_RECIPES = ("gta_stage1", "gta_stage2", "path_router", "gta_path_router", "turn_grpo")

#: Keys the environment must not leak into a dry run (they are recipe knobs).
_KNOBS = (
    "STAGE",
    "RUN_NAME",
    "MODEL",
    "RETRIEVER",
    "ABLATION",
    "CONFIG_NAME",
    "PRESET",
    "TRAIN_",
    "VAL_",
    "KB_DIR",
    "DRY_RUN",
)


def dry_run(script: Path, *args: str, **env: str) -> list[list[str]]:
    """The argv of every ``main_ppo`` command ``script`` would launch (``DRY_RUN=1``)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(_KNOBS)}
    full_env.update(
        DRY_RUN="1", PYTHON=sys.executable, GTA_CONFIG_DIR=str(CONFIG_DIR), HOME="/home/user", **env
    )
    proc = subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, env=full_env, timeout=120, check=False
    )
    assert proc.returncode == 0, f"{script.name} {args} {env}: {proc.stderr}"
    blocks = command_blocks(proc.stdout)
    launches = [b for b in blocks if b[1:3] == ["-m", "verl.trainer.main_ppo"]]
    assert launches, f"{script.name} printed no main_ppo command: {blocks}"
    return launches


@functools.cache
def _compose(config_dir: str, name: str, overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def compose_argv(argv: list[str]):
    """Compose ``python -m verl.trainer.main_ppo --config-path D --config-name N k=v ...``."""
    config_dir = argv[argv.index("--config-path") + 1]
    name = argv[argv.index("--config-name") + 1]
    overrides = [a for a in argv[argv.index("--config-name") + 2 :] if not a.startswith("--")]
    return _compose(config_dir, name, tuple(overrides)).copy()


def run_main_ppo_until_ray(cfg, monkeypatch) -> str:
    """verl's ``main_ppo.main`` body on ``cfg``; returns the task runner it would start."""
    from verl.trainer import main_ppo

    started: list[str] = []
    monkeypatch.setattr(
        main_ppo, "run_ppo", lambda config, task_runner_class: started.append(str(task_runner_class))
    )
    main_ppo.main.__wrapped__(cfg)
    assert len(started) == 1
    return started[0]


def resolve_job_names(cfg) -> None:
    """What the TaskRunner resolves after Ray starts, checked here without Ray."""
    from verl.trainer.ppo.reward import resolve_reward_manager_cls
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.import_utils import load_class_from_fqn

    from gta_verl.verl_compat import AGENT_LOOP_REGISTRY, get_trainer_cls

    if cfg.trainer.use_v1:
        get_trainer_cls(cfg.trainer.v1.trainer_mode)
    resolve_reward_manager_cls(cfg)
    agent = cfg.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop in AGENT_LOOP_REGISTRY, agent.default_agent_loop
    manager = agent.get("agent_loop_manager_class")
    if manager:
        load_class_from_fqn(manager, "AgentLoopManager")
    if cfg.get("distillation") is not None and cfg.distillation.enabled:
        omega_conf_to_dataclass(cfg.distillation)  # resolves distillation_loss.loss_mode
    GTAConfig.from_trainer_config(cfg)


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    pytest.importorskip("verl")
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins register)


def _check_script(script: Path, monkeypatch, *args: str, **env: str) -> list:
    cfgs = []
    for argv in dry_run(script, *args, **env):
        cfg = compose_argv(argv)
        runner = run_main_ppo_until_ray(cfg, monkeypatch)
        assert "TaskRunner" in runner
        resolve_job_names(cfg)
        cfgs.append(cfg)
    return cfgs


@pytest.mark.parametrize("model", ["3b", "7b"])
@pytest.mark.parametrize("script", GTA_RAG_SCRIPTS)
def test_gta_rag_recipes_pass_main_ppo_checks(script, model, monkeypatch):
    _check_script(REPO / "recipes" / "gta_rag" / script, monkeypatch, MODEL=model)


@pytest.mark.parametrize("ablation", ABLATIONS)
@pytest.mark.parametrize("config_name", ["path_router", "gta_path_router"])
@pytest.mark.parametrize("script", PATH_ROUTER_SCRIPTS)
def test_path_router_recipes_pass_main_ppo_checks(script, config_name, ablation, monkeypatch):
    (cfg,) = _check_script(
        REPO / "recipes" / "path_router" / script, monkeypatch, CONFIG_NAME=config_name, ABLATION=ablation
    )
    assert cfg.trainer.v1.trainer_mode == "gta_path_router_sync"
    assert bool(cfg.distillation.enabled) == (ablation != "no_kl")


@pytest.mark.parametrize("config_name", ["path_router", "gta_path_router"])
def test_path_router_paper_preset_passes_main_ppo_checks(config_name, monkeypatch):
    """PRESET=paper: the GPU recipe composes with +preset=path_router_paper, passes verl's own checks, and
    the job runs with Table 5's values (the recipe's explicit knobs default to them too)."""
    (cfg,) = _check_script(
        REPO / "recipes" / "path_router" / "run_qwen2_5_3b_fsdp.sh",
        monkeypatch,
        CONFIG_NAME=config_name,
        PRESET="paper",
    )
    pr = GTAConfig.from_trainer_config(cfg).path_router
    assert (pr.alpha, pr.theta_c, pr.theta_p, pr.overlap) == (0.5, 0.5, 0.1, "bag")
    assert (pr.exploration_bonus, pr.lazy_penalty, pr.timeout_penalty, pr.redundancy_penalty) == (
        0.2,
        -0.25,
        -0.5,
        -0.1,
    )
    assert (pr.exploration_rule, pr.lazy_rule, pr.redundancy_rule) == (
        "multi_turn_correct",
        "single_search_low_coverage",
        "covered_evidence",
    )
    assert pr.no_answer_reward == -1.0 and pr.route_weights == (1.0, 0.5, 0.3, 1.0)
    assert pr.kl.topk == 128 and cfg.distillation.distillation_loss.topk == 128
    assert cfg.actor_rollout_ref.rollout.n == 32
    assert cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.actor.kl_loss_coef == 0.01
    assert cfg.trainer.experiment_name == f"{config_name}_3b_full_paper"
    # Which reward R is paid is the recipe's own: the GTA + PathRouter combination keeps R_traj.
    assert pr.base_reward == ("trajectory_guided" if config_name == "gta_path_router" else "path_router")


@pytest.mark.parametrize("config_name", ["path_router", "gta_path_router"])
def test_path_router_gpu_check_passes_main_ppo_checks(config_name, monkeypatch):
    _check_script(REPO / "recipes" / "path_router" / "gpu_check.sh", monkeypatch, CONFIG_NAME=config_name)


@pytest.mark.parametrize("recipe", CPU_RECIPES)
def test_cpu_recipes_pass_main_ppo_checks(recipe, monkeypatch):
    _check_script(CPU_RUN, monkeypatch, recipe)


def test_validate_config_catches_a_missing_micro_batch(monkeypatch):
    """The check is live: dropping the rollout's log-prob micro batch fails in main_ppo."""
    (argv,) = dry_run(REPO / "recipes" / "path_router" / "run_qwen2_5_3b_fsdp.sh")
    cfg = compose_argv(argv)
    cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu = None
    with pytest.raises(ValueError, match="actor_rollout_ref.rollout"):
        run_main_ppo_until_ray(cfg, monkeypatch)


def test_cpu_val_only_passes_main_ppo_checks(monkeypatch):
    """``recipes/cpu/val_only.sh``: verl's validation-only run (dump for ``gta-verl eval``)."""
    (cfg,) = _check_script(REPO / "recipes" / "cpu" / "val_only.sh", monkeypatch, "gta_stage2")
    assert cfg.trainer.val_only and cfg.trainer.val_before_train and cfg.trainer.validation_data_dir
    assert cfg.actor_rollout_ref.rollout.val_kwargs.n == 1
