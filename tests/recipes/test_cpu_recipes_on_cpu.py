"""Every CPU recipe through stock ``python -m verl.trainer.main_ppo`` (``recipes/cpu/run.sh``).

Each test runs one recipe for 2 GRPO steps as a subprocess, exactly as a user would, and reads
verl's own step metrics from its file logger (``METRICS_JSONL``): the run must exit 0, log steps 1
and 2, show our evidence metrics there, report 0 retrieval errors at step 1 (the retriever actor is
ready before the first rollout), and prove that the weights reached the rollout server (at step 2
the rollout log-probs equal the actor's recomputation).

Cost: ~3 min per recipe on 2 cores (Ray and imports in ~7 processes). The recipes share one
``ray start --head`` cluster (``RAY_ADDRESS``), which saves Ray's start-up per run; worker processes
are per job in Ray, so they cannot be shared. Marked ``verl_e2e`` (CI runs them; ``-m "not
verl_e2e"`` skips them locally).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_SH = REPO / "recipes" / "cpu" / "run.sh"
CPU_ENV = {"VERL_USE_EXTERNAL_MODULES": "gta_verl.cpu.platform", "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}
RUN_TIMEOUT_S = 900

pytestmark = pytest.mark.verl_e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update(CPU_ENV, HF_HUB_OFFLINE="1", PYTHON=sys.executable, **extra)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def cpu_inputs(musique_kb_dir):
    from gta_verl.cpu.prepare import prepare_cpu_inputs

    return prepare_cpu_inputs(kb_dir=musique_kb_dir)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """One ``ray start --head --block`` for all recipe runs; stopped by killing that process only."""
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    port = _free_port()
    # Logical resources: 2 "GPUs" = the training slot + the teacher pool of the PathRouter configs.
    proc = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=16", "--num-gpus=2",
         "--include-dashboard=false", "--disable-usage-stats"],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        status = subprocess.run([ray_bin, "status", f"--address={address}"], env=_env(),
                                capture_output=True, text=True, check=False)
        if status.returncode == 0:
            break
        if proc.poll() is not None:
            pytest.fail(f"ray start --head exited with {proc.returncode}")
        time.sleep(2)
    else:
        proc.terminate()
        pytest.fail("ray head did not come up within 180 s")
    yield address
    proc.terminate()  # --block: ray start stops the processes it started when it exits
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)


def run_recipe(recipe: str, inputs, ray_address: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``bash recipes/cpu/run.sh <recipe>``; returns the process and verl's metrics per step."""
    metrics_path = tmp_path / "metrics.jsonl"
    env = _env(
        RAY_ADDRESS=ray_address, METRICS_JSONL=str(metrics_path), OUT_DIR=str(tmp_path / "out"),
        MODEL_PATH=str(inputs.model), KB_DIR=str(inputs.kb), STAGE1_TRAIN=str(inputs.stage1),
        QA_FILES=str(inputs.qa),
    )
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(RUN_SH), recipe], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, check=False)
    print(f"{recipe}: exit {proc.returncode} in {time.monotonic() - t0:.0f} s")
    steps: dict[int, dict] = {}
    if metrics_path.is_file():
        for line in metrics_path.read_text().splitlines():
            row = json.loads(line)
            steps[int(row["step"])] = row["data"]
    return proc, steps


def _check_common(recipe: str, proc, steps: dict) -> None:
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"{recipe} failed:\n{tail}"
    assert set(steps) >= {1, 2}, f"{recipe}: steps logged {sorted(steps)}\n{tail}"
    for step in (1, 2):
        m = steps[step]
        # verl's own step metrics: a GRPO update ran on real responses.
        assert m["training/global_step"] == step
        assert "actor/pg_loss" in m and "response_length/mean" in m
        assert m["response_length/mean"] > 0
    # Weight sync: at step 2 the server generated with the weights the actor trained at step 1,
    # so its log-probs equal the actor's recomputation (fp32 on both sides).
    assert steps[2]["training/rollout_probs_diff_max"] < 1e-3, steps[2]


def _evidence(recipe: str, steps: dict) -> None:
    """Our evidence metrics are in verl's step metrics; no retrieval error at step 1."""
    for step in (1, 2):
        keys = [k for k in steps[step] if k.startswith("gta/")]
        assert keys, f"{recipe} step {step}: no gta/* metric in {sorted(steps[step])}"
    errors = [v for k, v in steps[1].items() if "retrieval_errors" in k]
    assert errors and all(v == 0 for v in errors), {k: v for k, v in steps[1].items() if "retrieval" in k}


@pytest.mark.parametrize("recipe", ["gta_stage1", "gta_stage2", "turn_grpo"])
def test_gta_recipe_runs_two_steps(recipe, cpu_inputs, ray_head, tmp_path):
    proc, steps = run_recipe(recipe, cpu_inputs, ray_head, tmp_path)
    _check_common(recipe, proc, steps)
    _evidence(recipe, steps)
