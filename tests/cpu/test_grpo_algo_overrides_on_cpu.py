"""The learning benchmark's optimizer and advantage knobs reach verl (``grpo_algo_overrides``).

The overrides are composed onto ``recipes/cpu/run.sh gta_stage1`` exactly as ``main_ppo`` would receive
them, pass ``main_ppo``'s own checks, and then drive verl's own code: ``build_optimizer`` (the AdamW
``eps``) and the registered ``grpo`` advantage estimator (Dr. GRPO without the std division).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gta_verl.cpu.warm_start import grpo_algo_overrides, grpo_overrides
from tests.recipes.test_validate_config_on_cpu import CPU_RUN, _check_script


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    pytest.importorskip("verl")
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins register)


def _composed(monkeypatch, *extra: str):
    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *grpo_overrides(30, 0, 1e-4, 8, 8), *extra)
    return cfg


def test_defaults_add_nothing():
    assert grpo_algo_overrides() == ()


def test_adam_eps_reaches_verls_optimizer(monkeypatch):
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config.optimizer import build_optimizer

    cfg = _composed(monkeypatch, *grpo_algo_overrides(adam_eps=1e-5, kl_coef=0.05))
    assert cfg.actor_rollout_ref.actor.kl_loss_coef == 0.05
    optim = build_optimizer(
        [torch.nn.Parameter(torch.zeros(2))], omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.optim)
    )
    assert isinstance(optim, torch.optim.AdamW)
    assert optim.defaults["eps"] == 1e-5
    assert optim.defaults["lr"] == 1e-4


def _advantages(cfg, rewards: list[float]) -> list[float]:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    scores = torch.zeros(len(rewards), 3)
    scores[:, -1] = torch.tensor(rewards)  # outcome reward on the last response token
    adv, _ = fn(
        token_level_rewards=scores,
        response_mask=torch.ones(len(rewards), 3),
        index=np.array(["q"] * len(rewards)),
        norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo,
        config=cfg.algorithm,
    )
    return adv[:, 0].tolist()


def test_no_std_norm_gives_dr_grpo_advantages(monkeypatch):
    # One group, all answers wrong, one rollout found a target document (eq 16: −1 + 0.25 − 0.10 = −0.85,
    # the others −1 − 0.10 − 0.10 = −1.2). mean = (−1.2·3 − 0.85)/4 = −4.45/4 = −1.1125.
    rewards = [-1.2, -1.2, -0.85, -1.2]
    dr = _advantages(_composed(monkeypatch, *grpo_algo_overrides(std_norm=False)), rewards)
    # R − mean: −1.2 + 1.1125 = −0.0875; −0.85 + 1.1125 = 0.2625.
    assert dr == pytest.approx([-0.0875, -0.0875, 0.2625, -0.0875], abs=1e-5)
    std = _advantages(_composed(monkeypatch), rewards)
    # Unbiased std: deviations² = 3·0.0875² + 0.2625² = 0.02296875 + 0.06890625 = 0.091875; /3 = 0.030625,
    # √ = 0.175, so A = −0.0875/0.175 = −0.5 and 0.2625/0.175 = 1.5 — the push a correct answer would get.
    assert std == pytest.approx([-0.5, -0.5, 1.5, -0.5], abs=1e-4)


def test_checkpoint_dir_names_a_missing_checkpoint_and_records_fp32(tmp_path):
    import json

    from gta_verl.cpu.warm_start import checkpoint_dir

    with pytest.raises(FileNotFoundError, match="no HF checkpoint of step 3"):
        checkpoint_dir(tmp_path, 3)
    hf = tmp_path / "verl" / "ckpt" / "global_step_3" / "actor" / "huggingface"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"dtype": "bfloat16", "model_type": "qwen2"}))
    assert checkpoint_dir(tmp_path, 3) == hf
    assert json.loads((hf / "config.json").read_text())["dtype"] == "float32"


def test_step_cost_overrides_default_to_nothing():
    from gta_verl.cpu.warm_start import step_cost_overrides

    assert step_cost_overrides() == ()


def test_main_jobs_verl_overrides_pass_main_ppo_checks(monkeypatch, tmp_path):
    """The quickstart's ``verl`` stage, exactly as it calls run.sh: 8 × 8, Dr. GRPO, dumps, checkpoints."""
    from gta_verl import quickstart

    dump = tmp_path / "dump"
    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *quickstart.verl_overrides(3, dump))
    assert cfg.data.train_batch_size == 8 and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-4
    assert cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert not cfg.algorithm.rollout_correction.bypass_mode  # verl's old log-prob pass gives the gap column
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS == "2"
    assert cfg.trainer.save_freq == 1  # the probe scores each step from the checkpoint before it
    assert cfg.trainer.rollout_data_dir == str(dump)
    assert cfg.trainer.resume_mode == "disable"  # a rerun must not resume the last run's final step
    assert cfg.data.seed == 3 and cfg.actor_rollout_ref.rollout.seed == 3
