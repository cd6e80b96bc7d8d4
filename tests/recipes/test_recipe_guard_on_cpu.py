"""Every recipe refuses verl's classic trainer and foreign trainers in one line, before Ray.

Each case runs verl's own ``verl.trainer.main_ppo.main`` — the ``@hydra.main`` function, so
Hydra composes the packaged YAML with the recipe script's printed overrides and runs the
YAML's ``hydra.callbacks`` exactly as ``python -m verl.trainer.main_ppo`` would. Only the
start of Ray is replaced: ``run_ppo`` records the task runner it was given and ``ray.init``
fails the test if reached. A refused run leaves ``run_ppo`` uncalled and exits with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra.core.global_hydra import GlobalHydra

import gta_verl
from gta_verl.recipe_guard import RecipeGuard, classic_trainer_refusal, refusal
from tests.recipes.test_validate_config_on_cpu import CPU_RECIPES, CPU_RUN, GTA_RAG_SCRIPTS, REPO, dry_run

CONFIG_DIR = Path(gta_verl.__file__).parent / "config"
YAMLS = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
HYDRA_QUIET = ("hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled")
#: One launch per recipe YAML (the CPU recipe scripts cover all three configs).
ONE_PER_CONFIG = {
    "gta_grpo": "gta_stage1",
    "path_router": "path_router",
    "gta_path_router": "gta_path_router",
}


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    pytest.importorskip("verl")
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins register)


@pytest.fixture
def main_ppo(monkeypatch, tmp_path):
    """Run verl's hydra main on an argv; return (exit message or None, task runners started)."""
    import ray
    from verl.trainer import main_ppo as module

    def _ray_init(*args, **kwargs):
        raise AssertionError("ray.init reached: the recipe guard did not stop the job")

    def run(argv: list[str], *extra: str):
        started: list[str] = []
        monkeypatch.setattr(
            module, "run_ppo", lambda config, task_runner_class: started.append(str(task_runner_class))
        )
        monkeypatch.setattr(ray, "init", _ray_init)
        monkeypatch.setattr(
            sys, "argv", ["main_ppo", *argv[3:], *extra, f"hydra.run.dir={tmp_path}", *HYDRA_QUIET]
        )
        try:
            module.main()
            return None, started
        except SystemExit as exc:
            return exc.code, started
        finally:
            GlobalHydra.instance().clear()

    return run


def _cpu_argv(recipe: str) -> list[str]:
    (argv,) = dry_run(CPU_RUN, recipe)
    return argv


def _config_name(argv: list[str]) -> str:
    return argv[argv.index("--config-name") + 1]


def _assert_one_line_refusal(code, started, config_name: str, *needles: str) -> None:
    assert isinstance(code, str), f"expected a refusal, got exit code {code!r}"
    assert "\n" not in code and code.startswith(f"gta_verl: config {config_name} ")
    for needle in needles:
        assert needle in code, (needle, code)
    assert started == [], "run_ppo (Ray) was reached"


@pytest.mark.parametrize("recipe", CPU_RECIPES)
def test_recipe_runs_on_its_own_trainer(recipe, main_ppo):
    # The guard lets the unmodified recipe through to verl's V1 task runner.
    code, started = main_ppo(_cpu_argv(recipe))
    assert code is None and len(started) == 1 and "TaskRunnerV1" in started[0]


@pytest.mark.parametrize("recipe", CPU_RECIPES)
def test_cpu_recipe_refuses_the_classic_trainer(recipe, main_ppo):
    argv = _cpu_argv(recipe)
    code, started = main_ppo(argv, "trainer.use_v1=False")
    _assert_one_line_refusal(code, started, _config_name(argv), "trainer.use_v1=true", "V1 trainer")


@pytest.mark.parametrize("script", GTA_RAG_SCRIPTS)
def test_gta_rag_script_refuses_the_classic_trainer(script, main_ppo):
    for argv in dry_run(REPO / "recipes" / "gta_rag" / script, MODEL="3b"):
        code, started = main_ppo(argv, "trainer.use_v1=False")
        _assert_one_line_refusal(code, started, "gta_grpo", "trainer.v1.trainer_mode=gta_sync")


@pytest.mark.parametrize("config_name", ["path_router", "gta_path_router"])
def test_path_router_uniform_kl_refuses_the_classic_trainer(config_name, main_ppo):
    # Unrefused, this launch dies at step 1 inside verl (protocol.py via agent_loop_tq.py).
    (argv,) = dry_run(
        REPO / "recipes" / "path_router" / "run_qwen2_5_3b_fsdp.sh",
        CONFIG_NAME=config_name,
        ABLATION="uniform_kl",
    )
    code, started = main_ppo(argv, "trainer.use_v1=False")
    _assert_one_line_refusal(
        code,
        started,
        config_name,
        "trainer.v1.trainer_mode=gta_path_router_sync",
        "route-weighted advantages",
    )


@pytest.mark.parametrize("mode", ["sync", "colocate_async"])
@pytest.mark.parametrize("config_name", sorted(ONE_PER_CONFIG))
def test_stock_trainer_mode_runs_the_recipe_trainer(config_name, mode, main_ppo, capsys):
    # verl's mode name is mapped to this recipe's trainer in that mode (gta_preflight), which
    # the guard accepts: verl's stock trainer never replaces ours.
    argv = _cpu_argv(ONE_PER_CONFIG[config_name])
    code, started = main_ppo(argv, f"trainer.v1.trainer_mode={mode}")
    family = "gta" if config_name == "gta_grpo" else "gta_path_router"
    assert code is None and len(started) == 1 and "TaskRunnerV1" in started[0]
    assert f"trainer.v1.trainer_mode={mode} runs {family}_{mode}" in capsys.readouterr().err


@pytest.mark.parametrize("config_name", sorted(ONE_PER_CONFIG))
def test_separate_async_on_the_cpu_backend_is_refused(config_name, main_ppo):
    code, started = main_ppo(_cpu_argv(ONE_PER_CONFIG[config_name]), "trainer.v1.trainer_mode=separate_async")
    assert isinstance(code, str) and "\n" not in code and started == []
    assert code.startswith("gta_verl: trainer.v1.trainer_mode=separate_async cannot run: ")


def test_path_router_recipe_refuses_the_plain_gta_trainer(main_ppo):
    # gta_sync would run but silently drop the route weights.
    code, started = main_ppo(_cpu_argv("path_router"), "trainer.v1.trainer_mode=gta_sync")
    _assert_one_line_refusal(code, started, "path_router", "set trainer.v1.trainer_mode=gta_path_router_sync")


@pytest.mark.parametrize("name", YAMLS)
def test_every_recipe_yaml_declares_the_guard_with_its_trainer(name):
    cfg = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    guard = cfg["hydra"]["callbacks"]["gta_recipe_guard"]
    assert guard["_target_"] == "gta_verl.recipe_guard.RecipeGuard"
    assert guard["trainer_modes"][0] == cfg["trainer"]["v1"]["trainer_mode"]
    assert guard["provides"]


def test_refusal_exits_with_exactly_one_line_on_stderr(tmp_path):
    """The real ``python -m verl.trainer.main_ppo`` process: one stderr line, nonzero exit, no Ray."""
    argv = _cpu_argv("gta_stage1")
    code = (
        "import sys, ray; from verl.trainer import main_ppo as m\n"
        "ray.init = m.run_ppo = lambda *a, **k: sys.exit('Ray reached')\n"
        f"sys.argv = ['main_ppo'] + {argv[3:] + ['trainer.use_v1=False', f'hydra.run.dir={tmp_path}']!r}\n"
        "m.main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("gta_verl: config gta_grpo ("), proc.stderr
    assert "needs verl's V1 trainer" in lines[-1] and "set trainer.use_v1=true" in lines[-1]
    assert not [line for line in lines if "gta_verl" in line or "Traceback" in line][:-1], proc.stderr
    assert "Ray reached" not in proc.stderr and "ray init kwargs" not in proc.stdout


def test_refusal_rules():
    v1 = {"trainer": {"use_v1": True, "v1": {"trainer_mode": "gta_sync"}}}
    assert refusal(v1, "gta_grpo", ["gta_sync"]) is None
    classic = {"trainer": {"use_v1": "False", "v1": {"trainer_mode": "gta_sync"}}}
    assert "trainer.use_v1=true" in refusal(classic, "gta_grpo", ["gta_sync"], "metrics")
    assert "(metrics)" in refusal(classic, "gta_grpo", ["gta_sync"], "metrics")
    stock = {"trainer": {"use_v1": True, "v1": {"trainer_mode": "sync"}}}
    assert "set trainer.v1.trainer_mode=gta_sync" in refusal(stock, "gta_grpo", ["gta_sync"])
    with pytest.raises(ValueError, match="trainer_modes is empty"):
        refusal(v1, "gta_grpo", [])
    with pytest.raises(SystemExit, match="config named_here"):
        RecipeGuard(["gta_sync"], recipe="named_here").on_job_start(config=classic, task_function=None)


def test_doctests():
    import doctest

    from gta_verl import recipe_guard

    result = doctest.testmod(recipe_guard)
    assert result.attempted > 0 and result.failed == 0


def test_teacher_manager_refuses_the_classic_trainer():
    # Launches that bypass Hydra reach the agent-loop manager first: it says why instead of
    # failing inside verl at step 1.
    from omegaconf import OmegaConf

    from gta_verl.algos.teacher import GTAAgentLoopManagerTQ

    cfg = OmegaConf.create({"trainer": {"use_v1": False, "v1": {"trainer_mode": "gta_path_router_sync"}}})
    with pytest.raises(
        RuntimeError, match=r"GTAAgentLoopManagerTQ needs verl's V1 trainer .*trainer.use_v1=true"
    ):
        GTAAgentLoopManagerTQ(config=cfg, llm_client=None)
    assert classic_trainer_refusal({"trainer": {"use_v1": True}}, "x", "gta_sync") is None
