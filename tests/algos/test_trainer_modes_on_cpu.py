"""gta's trainers in every verl V1 mode, built by verl's own constructors.

Each recipe config is composed, the preflight maps ``trainer.v1.trainer_mode=<verl mode>`` to
our trainer, and verl's registry class is constructed as ``TaskRunnerV1.run`` does
(``trainer_cls(config=config)``): verl's ``PPOTrainer.__init__`` then picks the replay buffer
and the ``trainer.v1.<mode>`` section from ``trainer_mode``. The route weights are applied
once per sample by every PathRouter class, also when verl calls ``_compute_advantage`` again
on the same samples.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

import gta_verl
import gta_verl.algos.trainer as tr
from gta_verl.preflight import apply_preflight
from gta_verl.verl_compat import (
    PPOTrainerColocateAsync,
    PPOTrainerSeparateAsync,
    PPOTrainerSync,
    get_trainer_cls,
)
from tests.algos.test_route_weights_on_cpu import HAND_GRPO, _rows, _trainer

CONFIG_DIR = Path(gta_verl.__file__).parent / "config"
REQUIRED = ["data.train_files=t.parquet", "data.val_files=v.parquet", "actor_rollout_ref.model.path=m"]
# verl's separate_async constructor asserts train_batch_size = parameter_sync_step ×
# ppo_mini_batch_size, a standalone rollout pool and a non-naive engine
# (trainer_separate_async.py:59-70); a GPU launch sets these.
SEPARATE = [
    "trainer.v1.separate_async.parameter_sync_step=1",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
]
STOCK = {
    "sync": PPOTrainerSync,
    "colocate_async": PPOTrainerColocateAsync,
    "separate_async": PPOTrainerSeparateAsync,
}
BUFFER = {
    "sync": "ReplayBuffer",
    "colocate_async": "ReplayBufferAsync",
    "separate_async": "ReplayBufferAsync",
}


@pytest.mark.parametrize("recipe,family", [("gta_grpo", "gta"), ("path_router", "gta_path_router")])
@pytest.mark.parametrize("mode", ["sync", "colocate_async", "separate_async"])
def test_verl_builds_our_trainer_in_each_mode(recipe, family, mode):
    extra = SEPARATE if mode == "separate_async" else []
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(
            recipe, [*REQUIRED, *extra, f"trainer.v1.trainer_mode={mode}"], return_hydra_config=True
        )
    apply_preflight(cfg, family)
    with open_dict(cfg):
        del cfg["hydra"]  # the job config Hydra hands main_ppo
    cls = get_trainer_cls(cfg.trainer.v1.trainer_mode)
    trainer = cls(config=cfg)
    assert (
        cls.__name__
        in {
            ("gta", "sync"): "GTATrainerSync",
            ("gta", "colocate_async"): "GTATrainerColocateAsync",
            ("gta", "separate_async"): "GTATrainerSeparateAsync",
            ("gta_path_router", "sync"): "GTAPathRouterTrainer",
            ("gta_path_router", "colocate_async"): "GTAPathRouterColocateAsync",
            ("gta_path_router", "separate_async"): "GTAPathRouterSeparateAsync",
        }[family, mode]
    )
    assert isinstance(trainer, STOCK[mode]) and isinstance(trainer, tr.GTATrainerMixin)
    assert isinstance(trainer, tr.PathRouterMixin) == (family == "gta_path_router")
    assert trainer.trainer_mode == mode and trainer.registered_trainer_mode == f"{family}_{mode}"
    assert type(trainer.replay_buffer).__name__ == BUFFER[mode]


@pytest.mark.parametrize(
    "cls", [tr.GTAPathRouterTrainer, tr.GTAPathRouterColocateAsync, tr.GTAPathRouterSeparateAsync]
)
def test_route_weights_applied_once_per_sample(monkeypatch, cls):
    weights, routes = [1.0, 0.5, 0.5, 1.0, 1.0, 0.5], [0, 1, 2, 3, 0, 1]
    rows, _ = _rows(weights, routes)
    base, meta, fake = _trainer(monkeypatch, rows)
    trainer = object.__new__(cls)
    trainer.__dict__.update(base.__dict__)
    # Twice on the same samples (a second mini-batch pass, a re-sampled batch): verl recomputes
    # Â from rm_scores each time, so the weight is never compounded: Ã = w·Â, not w²·Â.
    for _ in range(2):
        trainer._compute_advantage(meta, {})
        for i, key in enumerate(meta.keys):
            adv = fake.rows[key]["advantages"]
            # e.g. row 1: 0.5 · (−1) = −0.5; row 5: 0.5 · (−0.2182179) = −0.1091090
            assert torch.allclose(adv, torch.full_like(adv, HAND_GRPO[i] * weights[i]), atol=1e-5)


def test_mode_property_per_class():
    for cls, mode in [
        (tr.GTATrainerSync, "sync"),
        (tr.GTATrainerColocateAsync, "colocate_async"),
        (tr.GTAPathRouterSeparateAsync, "separate_async"),
    ]:
        t = object.__new__(cls)
        t.trainer_mode = "whatever_selected_it"  # what PPOTrainer.__init__ assigns
        assert t.trainer_mode == mode and t.registered_trainer_mode == "whatever_selected_it"
