"""Every GTA-RAG recipe composes under Hydra against verl 0.9.1 and its gta: keys validate.

The scripts are run with ``DRY_RUN=1``, which prints each ``main_ppo`` command one argument
per line; the printed overrides are composed with Hydra's compose API against the packaged
``gta_grpo.yaml`` and then checked by verl's own ``validate_config`` and by ``GTAConfig``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import gta_verl
from gta_verl.config import GTAConfig
from tests.support.dry_run import command_blocks

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes" / "gta_rag"
CONFIG_DIR = Path(gta_verl.__file__).parent / "config"
LAUNCH_SCRIPTS = sorted(
    p.name for p in RECIPES.glob("*.sh") if p.name not in ("common.sh", "submit_ray_job.sh")
)
#: script → number of main_ppo launches it makes.
N_LAUNCHES = {
    "stage1_trajectory_guided.sh": 1,
    "stage2_em.sh": 1,
    "run_two_stage.sh": 2,
    "baseline_em_only.sh": 2,
    "baseline_no_graph.sh": 2,
    "baseline_no_validation.sh": 2,
    "gpu_smoke.sh": 1,
}


def dry_run(script: str, *args: str, **env: str) -> list[list[str]]:
    """Run a recipe with DRY_RUN=1; return the argv of each ``main_ppo`` command it would launch."""
    return [b for b in dry_run_blocks(script, *args, **env) if b[1:3] == ["-m", "verl.trainer.main_ppo"]]


def dry_run_blocks(script: str, *args: str, **env: str) -> list[list[str]]:
    """Run a recipe with DRY_RUN=1; return the argv of every command it would run (checks included)."""
    full_env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("STAGE", "RUN_NAME", "MODEL", "RETRIEVER", "KB_DIR"))
        },
        "DRY_RUN": "1",
        "PYTHON": sys.executable,
        "GTA_CONFIG_DIR": str(CONFIG_DIR),
        "HOME": "/home/user",
        **env,
    }
    proc = subprocess.run(
        ["bash", str(RECIPES / script), *args],
        check=False,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    blocks = command_blocks(proc.stdout)
    return blocks


def overrides_of(argv: list[str]) -> tuple[str, list[str]]:
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"], argv[:3]
    assert argv[argv.index("--config-path") + 1] == str(CONFIG_DIR)
    name = argv[argv.index("--config-name") + 1]
    return name, argv[argv.index("--config-name") + 2 :]


def compose_cfg(name: str, overrides: list[str]):
    return _compose(name, tuple(overrides)).copy()


@functools.cache
def _compose(name: str, overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def check_cfg(cfg) -> GTAConfig:
    """What main_ppo checks before starting Ray, plus our registries and the gta node."""
    from verl.trainer.ppo.reward import resolve_reward_manager_cls
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from gta_verl.verl_compat import AGENT_LOOP_REGISTRY, get_adv_estimator_fn

    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    omega_conf_to_dataclass(cfg.algorithm)  # AlgoConfig rejects unknown keys
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    resolve_reward_manager_cls(cfg)
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop in AGENT_LOOP_REGISTRY
    if cfg.algorithm.adv_estimator != "grpo":
        get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    return GTAConfig.from_trainer_config(cfg)


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    """Import verl (loads our plugins: managers, agent loop, estimator)."""
    pytest.importorskip("verl")
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins register)


def test_every_script_is_covered():
    assert set(LAUNCH_SCRIPTS) == set(N_LAUNCHES)


@pytest.mark.parametrize("script", LAUNCH_SCRIPTS)
def test_script_header_and_shape(script):
    text = (RECIPES / script).read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    header = text.split("set -euo pipefail")[0]
    assert "Prerequisites" in header and "Exact command" in header
    assert '"$@"' in text  # extra Hydra overrides pass through
    assert os.access(RECIPES / script, os.X_OK)


@pytest.mark.parametrize(
    ("script", "model"),
    [(s, "3b") for s in LAUNCH_SCRIPTS] + [("stage1_trajectory_guided.sh", "7b"), ("stage2_em.sh", "7b")],
)
def test_script_composes(script, model):
    blocks = dry_run(script, "trainer.logger=[console,wandb]", MODEL=model, NNODES="2")
    assert len(blocks) == N_LAUNCHES[script]
    for argv in blocks:
        name, overrides = overrides_of(argv)
        assert overrides[-1] == "trainer.logger=[console,wandb]"  # "$@" last, so it wins
        cfg = compose_cfg(name, overrides)
        gta = check_cfg(cfg)
        assert gta.retriever.kb_dir
        assert list(cfg.trainer.logger) == ["console", "wandb"]
        if script != "gpu_smoke.sh":
            assert cfg.trainer.nnodes == 2
            expected_tp = 2 if model == "7b" else 1
            assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == expected_tp


def _stage_cfgs(script: str, **env: str):
    return [compose_cfg(*overrides_of(argv)) for argv in dry_run(script, **env)]


def test_two_stage_chain():
    s1, s2 = _stage_cfgs("run_two_stage.sh", MODEL="7b")
    assert s1.reward.reward_manager.name == "trajectory_guided"
    assert s2.reward.reward_manager.name == "exact_match"
    # Paper §4.1 schedule and batch: 20 then 40 steps, 128 prompts × 5 rollouts.
    assert (s1.trainer.total_training_steps, s2.trainer.total_training_steps) == (20, 40)
    assert s1.data.train_batch_size == 128 and s1.actor_rollout_ref.rollout.n == 5
    assert s1.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    # Stage II starts from Stage I's final HF checkpoint.
    stage1_hf = f"{s1.trainer.default_local_dir}/global_step_20/actor/huggingface"
    assert s2.actor_rollout_ref.model.path == stage1_hf
    assert "hf_model" in s1.actor_rollout_ref.actor.checkpoint.save_contents
    assert s1.trainer.save_freq == 20
    assert s1.data.train_files.endswith("stage1_validated.parquet")
    assert s2.data.train_files.endswith("hotpotqa_10k_train.parquet")
    assert s1.algorithm.adv_estimator == "grpo"


def _is_coverage_check(argv: list[str]) -> bool:
    return argv[1:5] == ["-m", "gta_verl", "kb", "check-coverage"]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_one_kb_for_both_stages_by_default():
    s1, s2 = _stage_cfgs("run_two_stage.sh", KB_DIR="/data/kb")
    assert s1.gta.retriever.kb_dir == s2.gta.retriever.kb_dir == "/data/kb"


def test_each_stage_gets_its_own_kb_dir():
    env = {"KB_DIR": "/data/kb", "STAGE1_KB_DIR": "/data/kb_stage1", "STAGE2_KB_DIR": "/data/kb_stage2"}
    s1, s2 = _stage_cfgs("run_two_stage.sh", **env)
    assert (s1.gta.retriever.kb_dir, s2.gta.retriever.kb_dir) == ("/data/kb_stage1", "/data/kb_stage2")
    (alone1,) = _stage_cfgs("stage1_trajectory_guided.sh", **env)
    (alone2,) = _stage_cfgs("stage2_em.sh", **env)
    assert alone1.gta.retriever.kb_dir == "/data/kb_stage1"
    assert alone2.gta.retriever.kb_dir == "/data/kb_stage2"
    # the baselines go through run_two_stage.sh: the same split
    no_graph = _stage_cfgs("baseline_no_graph.sh", **env)
    assert [c.gta.retriever.kb_dir for c in no_graph] == ["/data/kb_stage1", "/data/kb_stage2"]


@pytest.mark.parametrize(
    ("script", "gated"),
    [
        ("stage2_em.sh", True),
        ("run_two_stage.sh", True),
        ("baseline_em_only.sh", True),
        ("stage1_trajectory_guided.sh", False),
    ],
)
def test_stage2_coverage_gate_comes_first(script, gated):
    """The gate checks STAGE2_KB_DIR against STAGE2_TRAIN before any launch (seconds, not after Stage I)."""
    blocks = dry_run_blocks(
        script, STAGE2_KB_DIR="/data/kb_stage2", STAGE2_TRAIN="/data/s2.parquet", STAGE2_MIN_COVERAGE="0.9"
    )
    checks = [i for i, b in enumerate(blocks) if _is_coverage_check(b)]
    assert checks == ([0] if gated else [])  # Stage I alone has no gate
    if not gated:
        return
    check = blocks[0]
    assert check[0] == sys.executable
    assert (_flag(check, "--kb"), _flag(check, "--qa"), _flag(check, "--min")) == (
        "/data/kb_stage2",
        "/data/s2.parquet",
        "0.9",
    )


def test_baselines_change_one_knob():
    em_only = _stage_cfgs("baseline_em_only.sh")
    assert [c.reward.reward_manager.name for c in em_only] == ["exact_match", "exact_match"]
    assert em_only[0].data.train_files.endswith("stage1_validated.parquet")
    no_graph = _stage_cfgs("baseline_no_graph.sh")
    assert {c.gta.retriever.mode for c in no_graph} == {"dense"}
    assert no_graph[0].reward.reward_manager.name == "trajectory_guided"
    no_val = _stage_cfgs("baseline_no_validation.sh")
    assert no_val[0].data.train_files.endswith("stage1_unvalidated.parquet")
    # Distinct run names → distinct checkpoint dirs.
    dirs = {c[0].trainer.default_local_dir for c in (em_only, no_graph, no_val)}
    assert len(dirs) == 3


def test_stage2_standalone_from_base_model():
    (cfg,) = _stage_cfgs("stage2_em.sh", STAGE2_INIT="Qwen/Qwen2.5-3B-Instruct", RUN_NAME="em_only")
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-3B-Instruct"
    assert cfg.reward.reward_manager.name == "exact_match"


def test_per_turn_opt_in_composes():
    (argv,) = dry_run(
        "stage1_trajectory_guided.sh",
        "gta.agent.place_turn_rewards=true",
        "algorithm.adv_estimator=gta_turn_grpo",
    )
    cfg = compose_cfg(*overrides_of(argv))
    assert check_cfg(cfg).agent.place_turn_rewards is True


def test_bad_gta_override_is_rejected():
    (argv,) = dry_run("stage1_trajectory_guided.sh", "gta.reward.miss=oops")
    cfg = compose_cfg(*overrides_of(argv))
    with pytest.raises(ValueError, match="gta.reward.miss"):
        GTAConfig.from_trainer_config(cfg)


def test_submit_ray_job_dry_run():
    proc = subprocess.run(
        ["bash", str(RECIPES / "submit_ray_job.sh"), "trainer.logger=[console,wandb]"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "DRY_RUN": "1",
            "PYTHON": sys.executable,
            "NNODES": "2",
            "MODEL": "7b",
            "RAY_ADDRESS": "http://head:8265",
        },
    )
    assert proc.returncode == 0, proc.stderr
    (argv,) = command_blocks(proc.stdout)
    assert argv[:5] == ["ray", "job", "submit", "--address", "http://head:8265"]
    runtime_env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert runtime_env["env_vars"]["NNODES"] == "2" and runtime_env["env_vars"]["MODEL"] == "7b"
    assert Path(runtime_env["working_dir"]) == REPO
    assert argv[argv.index("--") + 1 :] == [
        "bash",
        "recipes/gta_rag/run_two_stage.sh",
        "trainer.logger=[console,wandb]",
    ]


def test_required_verl_pins_0_9_1():
    text = (RECIPES / "REQUIRED_VERL.txt").read_text()
    assert re.search(r"^PIP_INSTALL=.*verl\[verl-core\]==0\.9\.1", text, re.MULTILINE)


def test_yaml_comment_above_every_key():
    """As verl's test_config_docs: every key of our YAML has a comment line above it."""
    missing, prev_comment = [], False
    for number, line in enumerate((CONFIG_DIR / "gta_grpo.yaml").read_text().splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            prev_comment = True
            continue
        if re.match(r"[A-Za-z_]+:", stripped) and not prev_comment:
            missing.append(f"{number}: {line}")
        prev_comment = False
    assert not missing, missing


def test_yaml_gta_defaults_match_dataclasses():
    cfg = compose_cfg(
        "gta_grpo", ["data.train_files=x", "data.val_files=y", "actor_rollout_ref.model.path=m"]
    )
    gta = GTAConfig.from_trainer_config(cfg)
    assert gta == GTAConfig.from_dict({"retriever": {"kb_dir": None}})
    assert OmegaConf.select(cfg, "gta.path_router") is None


@pytest.mark.parametrize("yaml_name", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_every_packaged_yaml_composes(yaml_name):
    """Every YAML shipped in gta_verl/config (ours and PathRouter's) composes against verl 0.9.1
    and its gta: node validates."""
    cfg = compose_cfg(yaml_name, ["data.train_files=x", "data.val_files=y", "actor_rollout_ref.model.path=m"])
    assert "actor_rollout_ref" in cfg and "gta" in cfg
    GTAConfig.from_trainer_config(cfg)
