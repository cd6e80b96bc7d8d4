"""Learning regression check: one GRPO step of verl's own trainer moves the policy the right way.

From the quick warm start (:data:`gta_verl.cpu.warm_start.QUICK`, built and cached on first use), one
Stage-I GRPO step of stock ``main_ppo`` (``recipes/cpu/run.sh gta_stage1``) on the first 8 training
questions × 8 rollouts; ``gta_sync`` dumps the step's token layout (ids, response mask, verl's advantages,
ground truth, turn records). The probe (:mod:`gta_verl.eval.learning_probe`) re-scores each
rollout with the pure trajectory-guided reward, takes GRPO advantages of those rewards and scores π₀ → π₁:

* reward spread in some group — the premise (a step without spread has nothing to learn), not a check
  of the code;
* verl's advantages agree in sign with the re-scored ones on every rollout — the wiring from the reward
  manager through verl's reward loop to the estimator keeps the sign. It cannot see a sign error inside the
  pure reward function, which trainer and probe share (the reward's hand-computed unit tests guard that);
* S_policy > 0 — the update raised the log-probability of above-average rollouts' own tokens and lowered
  that of below-average ones: the loss and optimizer step follow the advantages' sign. It does not see mask
  or placement errors (S_policy stayed 0.039 with the observation mask inverted and 0.048 with it dropped);
* no token inside an ``<info>`` block carries response mask 1 in the step's dump — the mask verl's loss
  multiplies by (a dropped or inverted observation mask trains on them directly);
* every dumped advantage sits on a mask-1 token and, under GRPO, carries its rollout's one value
  (``misplaced_advantages``): advantages written to the wrong positions fail here and nowhere else.

S_obs, the same shift over observation tokens, is printed, not judged: they move through shared weights
(0.73 · S_policy on one machine with the mask intact), so no ratio separates a kept mask from a dropped one.
The test fails with the reward sign flipped after the reward function (on the sign check) and with the
observation mask dropped (on the mask check), both checked by hand
(``experiments/learning/results/README.md``, Learning regression check); the placement
check's failing case is hand-built (``tests/eval/test_learning_probe_on_cpu.py``).
Marked ``verl_e2e`` (CI runs it).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.verl_e2e

# On the quick warm start about 15 % of rollouts score above the rest (one search fewer, a target found, the
# answer right): a group of 4 then has spread with probability 1 − 0.85⁴ − 0.15⁴ ≈ 0.48, and 4 such groups
# all had none in 2 of 5 runs. Groups of 8 have spread with ≈ 1 − 0.85⁸ ≈ 0.73; none of 8 groups, ≈ 3e-5.
QUESTIONS = 8
ROLLOUTS = 8
LR = 1e-3  # one Adam step moves every weight by about lr: large enough to measure, small enough to stay local


@pytest.fixture(scope="module")
def one_step(tmp_path_factory):
    import pandas as pd

    from gta_verl.cpu.prepare import default_root, ensure_kb
    from gta_verl.cpu.recipe_run import run_cpu_recipe
    from gta_verl.cpu.warm_start import QUICK, build_warm_start, checkpoint_dir, grpo_overrides

    kb = ensure_kb(default_root() / "kb_musique")
    ws = build_warm_start(kb, settings=QUICK)
    out = tmp_path_factory.mktemp("learning_probe")
    # A fixed set: the first QUESTIONS training questions, written once so the step cannot draw others.
    subset = out / "questions.parquet"
    pd.read_parquet(ws.train).head(QUESTIONS).to_parquet(subset)
    env = {
        "MODEL_PATH": str(ws.model),
        "KB_DIR": str(kb),
        "STAGE1_TRAIN": str(subset),
        "QA_FILES": str(subset),
        "STEPS": "1",
    }
    overrides = grpo_overrides(1, 0, LR, ROLLOUTS, QUESTIONS) + (f"trainer.rollout_data_dir={out / 'dump'}",)
    run = run_cpu_recipe("gta_stage1", out / "run", env, overrides, timeout_s=900)
    assert run.returncode == 0, f"run.sh gta_stage1 exited {run.returncode}; see {run.log}"
    return ws, out, checkpoint_dir(out / "run", 1), run


def test_one_grpo_step_moves_the_policy_toward_above_average_rollouts(one_step):
    import torch
    from transformers import AutoTokenizer

    from gta_verl.eval.learning_probe import (
        grpo_advantages,
        misplaced_advantages,
        probe_run,
        rescored_rewards,
        sequence_advantage,
        unmasked_observation_tokens,
    )

    ws, out, ckpt, run = one_step
    dump = torch.load(out / "dump" / "1.tokens.pt", weights_only=False)  # our own file: ids, masks, dicts
    assert len(dump["responses"]) == QUESTIONS * ROLLOUTS
    tok = AutoTokenizer.from_pretrained(str(ws.model))
    res = probe_run(out / "dump", [ws.model, ckpt])[1]  # the main job's verl stage scores its steps so
    ours = grpo_advantages(rescored_rewards(dump, tok), dump["uid"])
    verls = [sequence_advantage(a, m) for a, m in zip(dump["advantages"], dump["response_mask"], strict=True)]
    disagree = [
        (round(o, 3), round(v, 3)) for o, v in zip(ours, verls, strict=True) if abs(o) > 1e-3 and o * v <= 0
    ]
    print(f"learning probe: {res} (step metrics {run.steps.get(1)})")
    assert res.n_positive > 0 and res.n_negative > 0, "no reward spread within groups: nothing to learn from"
    assert not disagree, (
        f"verl's advantages disagree in sign with the re-scored rewards' (ours, verl's): {disagree}"
    )
    assert res.policy_shift > 0, f"the update lowered above-average rollouts' log-probability: {res}"
    trained_obs = unmasked_observation_tokens(dump, tok)
    assert not trained_obs, (
        f"{len(trained_obs)} <info> tokens in the loss (rollout, position): {trained_obs[:8]}"
    )
    misplaced = misplaced_advantages(dump["advantages"], dump["response_mask"])  # grpo: one value per rollout
    assert not misplaced, (
        f"{len(misplaced)} advantages off the policy tokens (rollout, position): {misplaced[:8]}"
    )
