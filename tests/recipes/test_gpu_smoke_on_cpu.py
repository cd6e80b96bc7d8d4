"""The GPU checks without vLLM, run on CPU: ``gta_rag/gpu_smoke.sh`` and ``path_router/gpu_check.sh``.

The dry run (``DRY_RUN=1``) prints the ``main_ppo`` command; its overrides are composed against the
packaged ``gta_grpo.yaml`` and passed through verl's own ``main_ppo`` checks (the helpers of
``test_validate_config_on_cpu``), and they must select what the smoke promises: the ``hf`` rollout,
FSDP2 on cuda, the trajectory-guided reward, the retriever's encoder on cuda, 2 steps, no vLLM knob.
The verdict line is checked by running the script with a stand-in ``python`` that plays the trainer.
The PathRouter check's dry runs (``GPUS=1``: routing only, no teacher pool; ``GPUS=2``: actor +
teacher, both served by ``hf``) pass the same ``main_ppo`` checks.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.recipes.test_validate_config_on_cpu import (
    compose_argv,
    dry_run,
    resolve_job_names,
    run_main_ppo_until_ray,
)

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "recipes" / "gta_rag" / "gpu_smoke.sh"


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    pytest.importorskip("verl")
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins register)


def test_dry_run_selects_the_hf_rollout_on_one_gpu(monkeypatch):
    (argv,) = dry_run(SMOKE)
    assert not [a for a in argv if "vllm" in a.lower() or "gpu_memory_utilization" in a]
    cfg = compose_argv(argv)
    arr = cfg.actor_rollout_ref
    assert arr.rollout.name == "hf" and arr.rollout.calculate_log_probs is True
    # The hf server's dtype on cuda (rollout.dtype) is the FSDP actor's param dtype.
    assert arr.rollout.dtype == arr.actor.fsdp_config.dtype == "bfloat16"
    assert arr.actor.strategy == "fsdp2" and arr.ref.strategy == "fsdp2"
    assert arr.actor.use_kl_loss is True  # so the reference model is built (on cuda) too
    assert cfg.trainer.device == "cuda" and (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (1, 1)
    assert cfg.trainer.total_training_steps == 2 and cfg.algorithm.adv_estimator == "grpo"
    assert cfg.reward.reward_manager.name == "trajectory_guided"
    assert cfg.gta.retriever.encoder_device == "cuda"
    assert "cpu" not in cfg.trainer.device and "hf_cpu" not in argv
    assert "TaskRunner" in run_main_ppo_until_ray(cfg, monkeypatch)
    resolve_job_names(cfg)


def test_device_knob_reaches_the_retriever():
    (argv,) = dry_run(SMOKE, DEVICE="cpu")
    assert "+gta.retriever.encoder_device=cpu" in argv


def test_extra_overrides_come_last():
    (argv,) = dry_run(SMOKE, "trainer.total_training_steps=3")
    assert argv[-1] == "trainer.total_training_steps=3"


FAKE_PYTHON = """#!/usr/bin/env bash
if [[ "$1" == "-" ]]; then cat > /dev/null; echo "gpu_smoke: versions (stand-in)"; exit 0; fi
if [[ "$1 $2" == "-m verl.trainer.main_ppo" ]]; then printf '%b\\n' "$FAKE_LOG"; exit "${FAKE_RC:-0}"; fi
echo "unexpected call: $*" >&2; exit 3
"""


def _verdict(tmp_path: Path, log: str, rc: int = 0) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    for rel in ("tiny_qwen2/config.json", "kb/manifest.json", "stage1.parquet"):  # inputs "built"
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text("{}")
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "STEPS", "DEVICE")}
    env.update(PYTHON=str(fake), WORK=str(work), GTA_CONFIG_DIR=str(tmp_path), FAKE_LOG=log, FAKE_RC=str(rc))
    return subprocess.run(
        ["bash", str(SMOKE)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_verdict_passes_on_two_steps_with_the_rollout_on_the_gpu(tmp_path):
    proc = _verdict(tmp_path, "step:1 - loss:0.1\\nstep:2 - loss:0.2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("gpu_smoke: PASSED")
    assert "gpu_smoke: stage main_ppo" in proc.stdout  # the stage time docs/gpu.md asks to record


@pytest.mark.parametrize(
    ("log", "rc", "why"),
    [
        ("step:1 - loss:0.1", 0, "no 'step:2'"),
        ("step:1\\nstep:2", 1, "exit 1"),
        ("hf rollout server hf_server_0 on cpu: it sees no GPU\\nstep:1\\nstep:2", 0, "on the CPU"),
    ],
)
def test_verdict_fails_loudly(tmp_path, log, rc, why):
    proc = _verdict(tmp_path, log, rc)
    assert proc.returncode == 1
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("gpu_smoke: FAILED")]
    assert why in line


GPU_CHECK = REPO / "recipes" / "path_router" / "gpu_check.sh"


@pytest.mark.parametrize("config_name", ["path_router", "gta_path_router"])
@pytest.mark.parametrize("gpus", ["1", "2"])
def test_path_router_gpu_check_uses_hf_and_fits_its_gpus(config_name, gpus, monkeypatch):
    (argv,) = dry_run(GPU_CHECK, GPUS=gpus, CONFIG_NAME=config_name)
    cfg = compose_argv(argv)
    assert cfg.actor_rollout_ref.rollout.name == "hf" and cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.trainer.n_gpus_per_node == 1
    # One GPU: no teacher pool (it would need a GPU of its own); two: the teacher served by hf too.
    assert bool(cfg.distillation.enabled) == (gpus == "2")
    if gpus == "2":
        assert cfg.distillation.n_gpus_per_node == 1
        assert cfg.distillation.teacher_models.teacher_model.inference.name == "hf"
    assert "TaskRunner" in run_main_ppo_until_ray(cfg, monkeypatch)
    resolve_job_names(cfg)


def test_path_router_gpu_check_keeps_vllm_on_request():
    (argv,) = dry_run(GPU_CHECK, ROLLOUT="vllm")
    assert "actor_rollout_ref.rollout.name=vllm" in argv
    assert "actor_rollout_ref.rollout.calculate_log_probs=true" not in argv


def test_path_router_gpu_check_refuses_other_gpu_counts():
    env = {**os.environ, "DRY_RUN": "1", "GPUS": "3"}
    proc = subprocess.run(
        ["bash", str(GPU_CHECK)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 2 and "GPUS=3" in proc.stderr
