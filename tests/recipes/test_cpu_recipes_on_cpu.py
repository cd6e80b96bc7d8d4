"""Every CPU recipe through stock ``python -m verl.trainer.main_ppo`` (``recipes/cpu/run.sh``).

Each test runs one recipe for 2 GRPO steps as a subprocess, exactly as a user would, and reads
verl's own step metrics from its file logger (``METRICS_JSONL``): the run must exit 0, log steps 1
and 2, show our evidence metrics there, report 0 retrieval errors at step 1 (the retriever actor is
ready before the first rollout), and prove that the weights reached the rollout server (at step 2
the rollout log-probs equal the actor's recomputation).

Cost: ~3 min per recipe on 2 idle cores (Ray and imports in ~7 processes). Each run starts its own
local Ray: sharing one ``ray start --head`` (``RAY_ADDRESS``, supported by run.sh) saves only Ray's
~15 s start-up per run (worker processes are per job in Ray), and on a shared machine any ``ray
stop`` kills such a cluster under the remaining runs. The tiny inputs (model, KB, Stage-I set) are
built once per session. Marked ``verl_e2e`` (CI runs them; ``-m "not verl_e2e"`` skips them locally).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_SH = REPO / "recipes" / "cpu" / "run.sh"
CPU_ENV = {
    "VERL_USE_EXTERNAL_MODULES": "gta_verl.cpu.platform",
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
}
RUN_TIMEOUT_S = 900
RAY_STARTUP_TIMEOUT = "The current node timed out during startup"

pytestmark = pytest.mark.verl_e2e

# The random tiny policy almost never writes <search>/<answer>, so every rollout of a group gets the same
# reward and GRPO's advantages are all 0: nothing would change the weights. An entropy term and a
# large learning rate make step 1 move them (Adam steps ~lr whatever the gradient's size), so that
# step 2's rollout log-probs equal the actor's recomputation only if the new weights reached the
# rollout server.
PROVE_SYNC = ("actor_rollout_ref.actor.optim.lr=1e-2", "actor_rollout_ref.actor.entropy_coeff=0.01")


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


def _run_group(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; on timeout kill the whole group.

    ``subprocess.run(timeout=…)`` kills only ``bash``: the ``main_ppo`` driver and the Ray it started
    would live on as orphans, still training and loading the machine under the next recipe's run.
    """
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    ) as popen:
        try:
            out, err = popen.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            out, err = popen.communicate()
            err += f"\n[test] killed the run's process group after {RUN_TIMEOUT_S} s"
        return subprocess.CompletedProcess(cmd, popen.returncode, out, err)


def run_recipe(
    recipe: str, inputs, tmp_path: Path, *overrides: str, **knobs: str
) -> tuple[subprocess.CompletedProcess, dict]:
    """``[KNOB=…] bash recipes/cpu/run.sh <recipe> [overrides]``; returns the process and verl's metrics
    per step."""
    metrics_path = tmp_path / "metrics.jsonl"
    env = _env(
        METRICS_JSONL=str(metrics_path),
        OUT_DIR=str(tmp_path / "out"),
        MODEL_PATH=str(inputs.model),
        KB_DIR=str(inputs.kb),
        STAGE1_TRAIN=str(inputs.stage1),
        QA_FILES=str(inputs.qa),
        **knobs,
    )
    t0 = time.monotonic()
    for _attempt in range(2):
        proc = _run_group(["bash", str(RUN_SH), recipe, *PROVE_SYNC, *overrides], env=env, cwd=tmp_path)
        # Ray gives its raylet a fixed 30 s to register (ray/_private/node.py); on an overloaded
        # machine that start-up can time out before verl runs anything: retry that case once.
        if proc.returncode == 0 or RAY_STARTUP_TIMEOUT not in proc.stderr + proc.stdout:
            break
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
    # Step 1 moved the actor away from the frozen reference (Adam, lr 1e-2): KL(actor ‖ ref) > 0 at
    # step 2 (measured ~1.4e-2; 0 at step 1). A server still on the old weights would then differ
    # from the actor's recomputation by about that much.
    assert steps[1]["actor/grad_norm"] > 0, steps[1]
    if "actor/kl_loss" in steps[2]:
        assert steps[2]["actor/kl_loss"] > 1e-4, steps[2]
    else:
        # PathRouter's loss has no KL-to-reference term (docs/path_router.md); its frozen teacher holds
        # the initial weights, so the selected teacher KL grows once the actor moved (measured
        # 6.4e-4 at step 1, 1.1e-2 at step 2).
        kl = "actor/distillation/gta_kl_selected"
        assert steps[2][kl] > steps[1][kl] and steps[2][kl] > 1e-3, (steps[1], steps[2])
    # Weight sync: at step 2 the server generated with the weights the actor trained at step 1,
    # so its log-probs equal the actor's recomputation (fp32 on both sides).
    assert steps[2]["training/rollout_probs_diff_max"] < 1e-3, steps[2]


def _evidence(recipe: str, steps: dict) -> None:
    """Our evidence metrics are in verl's step metrics; no retrieval error at step 1."""
    for step in (1, 2):
        keys = [k for k in steps[step] if k.startswith("gta/")]
        assert keys, f"{recipe} step {step}: no gta/* metric in {sorted(steps[step])}"
    for step in (1, 2):
        m = steps[step]
        # The training-time signal gate agrees with verl's own advantage range: a step has a group with
        # signal exactly when some policy token's advantage is non-zero.
        assert 0.0 <= m["gta/rollouts_with_signal"] <= 1.0 and 0.0 <= m["gta/groups_with_signal"] <= 1.0, m
        moved = m["critic/advantages/max"] != 0 or m["critic/advantages/min"] != 0
        assert (m["gta/groups_with_signal"] > 0) == moved, m
    errors = [v for k, v in steps[1].items() if "retrieval_errors" in k]
    assert errors and all(v == 0 for v in errors), {k: v for k, v in steps[1].items() if "retrieval" in k}


@pytest.mark.parametrize("recipe", ["gta_stage1", "gta_stage2", "turn_grpo"])
def test_gta_recipe_runs_two_steps(recipe, cpu_inputs, tmp_path):
    proc, steps = run_recipe(recipe, cpu_inputs, tmp_path)
    _check_common(recipe, proc, steps)
    _evidence(recipe, steps)


@pytest.mark.parametrize("backend", ["dense", "bm25"])
def test_gta_recipe_runs_on_a_baseline_retriever(backend, cpu_inputs, tmp_path):
    """``gta.retriever.backend`` serves the Search-R1 dense or the BM25 baseline through the same Ray
    service: the rollouts search it, rewards and evidence metrics come out, no retrieval error."""
    proc, steps = run_recipe("gta_stage1", cpu_inputs, tmp_path, f"gta.retriever.backend={backend}")
    _check_common("gta_stage1", proc, steps)
    _evidence("gta_stage1", steps)


def test_shuffled_control_with_fewshot_prompts_runs_two_steps(cpu_inputs, tmp_path):
    """The learning experiments' control (``gta_shuffled_grpo``, resolved from verl's registry inside the
    trainer) and ``PROMPT_STYLE=fewshot`` rows (rewritten by run.sh) in one stock ``main_ppo`` run."""
    proc, steps = run_recipe(
        "gta_stage1",
        cpu_inputs,
        tmp_path,
        "algorithm.adv_estimator=gta_shuffled_grpo",
        "data.max_prompt_length=512",
        PROMPT_STYLE="fewshot",
    )
    _check_common("gta_stage1", proc, steps)
    _evidence("gta_stage1", steps)
    # run.sh trained on the rewritten rows: the few-shot file next to the Stage-I parquet exists.
    assert cpu_inputs.stage1.with_name(f"{cpu_inputs.stage1.stem}.fewshot.parquet").is_file()


@pytest.mark.parametrize("recipe", ["path_router", "gta_path_router"])
def test_path_router_recipe_runs_two_steps(recipe, cpu_inputs, tmp_path):
    """PathRouter configs: the gta_path_router_sync trainer and the gold-evidence teacher on hf_cpu.

    The random policy never answers or finds evidence, so every trajectory is routed C-P- and
    selected for the teacher KL: the selective top-K KL must then be a positive loss term.
    """
    proc, steps = run_recipe(recipe, cpu_inputs, tmp_path)
    _check_common(recipe, proc, steps)
    _evidence(recipe, steps)
    routes = ("C+P+", "C+P-", "C-P+", "C-P-")
    for step in (1, 2):
        m = steps[step]
        assert sum(m[f"gta/route_share/{r}"] for r in routes) == pytest.approx(1.0), m
        assert m["path_router/kl_lambda"] > 0 and "gta/P" in m and "gta/kl_token_frac" in m
        # teacher KL ran iff trajectories were selected (the teacher server answered prompt_logprobs)
        assert (m["actor/distillation/loss"] > 0) == (m["gta/kl_select_frac"] > 0), m


# ----------------------------------------------------------------------------- async modes, tool_agent
COLOCATE_ASYNC = "trainer.v1.trainer_mode=colocate_async"
STALENESS = ("trajectory_spans", "trajectory_staleness", "trajectory_staleness_worst")


def _check_async(recipe: str, trainer: str, proc, steps: dict) -> None:
    """Two steps in verl's colocate_async mode with our trainer; staleness metrics logged.

    The weight-sync check of the sync runs does not apply: the warm-up batch of step 2 may have
    been generated before step 1's update, which is what verl's staleness metrics measure.
    """
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, f"{recipe} colocate_async failed:\n{tail}"
    assert f"runs {trainer}" in proc.stderr, tail  # the preflight mapped verl's mode name
    assert set(steps) >= {1, 2}, f"{recipe}: steps logged {sorted(steps)}\n{tail}"
    assert steps[1]["actor/grad_norm"] > 0, steps[1]
    for step in (1, 2):
        m = steps[step]
        for name in STALENESS:
            assert m[f"training/off_policy/{name}/min"] >= (1 if name == "trajectory_spans" else 0), m
        print(f"{recipe} step {step} staleness:", {k: v for k, v in m.items() if "off_policy" in k})
    _evidence(recipe, steps)


@pytest.mark.parametrize(
    ("recipe", "trainer"),
    [("gta_stage1", "gta_colocate_async"), ("path_router", "gta_path_router_colocate_async")],
)
def test_recipe_runs_in_colocate_async(recipe, trainer, cpu_inputs, tmp_path):
    proc, steps = run_recipe(recipe, cpu_inputs, tmp_path, COLOCATE_ASYNC)
    _check_async(recipe, trainer, proc, steps)
    if recipe == "path_router":
        routes = ("C+P+", "C+P-", "C-P+", "C-P-")
        for step in (1, 2):
            m = steps[step]
            assert sum(m[f"gta/route_share/{r}"] for r in routes) == pytest.approx(1.0), m
            assert m["path_router/kl_lambda"] > 0, m
            # the teacher KL selection as in sync mode: a loss term iff trajectories were selected
            assert (m["actor/distillation/loss"] > 0) == (m["gta/kl_select_frac"] > 0), m


def test_stage1_runs_with_verl_tool_agent(cpu_inputs, tmp_path):
    """Stage I through verl's tool_agent loop with GraphSearchTool (loaded by verl in its workers)."""
    proc, steps = run_recipe("gta_stage1", cpu_inputs, tmp_path, AGENT="tool_agent")
    _check_common("gta_stage1 (tool_agent)", proc, steps)
    _evidence("gta_stage1 (tool_agent)", steps)
