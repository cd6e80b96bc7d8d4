"""Rows whose reward could not be computed leave their group, and route weights that are NaN,
infinite or negative are refused before any advantage is touched: the V1 trainers' own
``_compute_advantage`` over verl's, with the fake TransferQueue of ``test_route_weights_on_cpu``."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algos.test_route_weights_on_cpu import HAND_GRPO, _rows, _trainer


def _mark_error(rows: dict, i: int) -> None:
    # What GTARewardManager.run_single returns for a row it cannot score: score 0, numeric info 0, error 1.
    key = list(rows)[i]
    rows[key]["rm_scores"] = torch.zeros_like(rows[key]["rm_scores"])
    info = rows[key]["extra_fields"]["reward_extra_info"]
    info.update({k: 0.0 for k in info})
    info["reward_error"] = 1.0


@pytest.mark.parametrize("norm", [True, False])
def test_an_error_row_gets_zero_and_leaves_its_groups_statistics(monkeypatch, norm):
    # Scores [1, 0, 0.5 | 2, −1, 0]; row 5 (group 2) could not be scored (its 0 is the manager's placeholder).
    rows, _ = _rows([1.0] * 6, [0] * 6)
    _mark_error(rows, 5)
    for r in rows.values():
        r["extra_fields"]["reward_extra_info"].setdefault("reward_error", 0.0)
    trainer, meta, fake = _trainer(monkeypatch, rows)
    trainer.config.algorithm.norm_adv_by_std_in_grpo = norm
    metrics: dict = {}
    trainer._compute_advantage(meta, metrics)
    # Group 2 without row 5: scores 2 and −1, mean 0.5, deviations ±1.5, unbiased std
    # sqrt((1.5² + 1.5²)/1) = sqrt(4.5) = 2.1213203 → Â = ±1.5/(2.1213203 + 1e-6) = ±0.7071064 (std scaling)
    # or ±1.5 (centering only). Row 5: 0. Group 1 is untouched: HAND_GRPO's (1, −1, 0) (or 0.5, −0.5, 0).
    # With row 5 in the group (before): mean 1/3, and rows 3, 4 got 1.0910895, −0.8728716.
    if norm:
        expected = [HAND_GRPO[0], HAND_GRPO[1], HAND_GRPO[2], 0.7071064, -0.7071064, 0.0]
    else:
        expected = [0.5, -0.5, 0.0, 1.5, -1.5, 0.0]
    for i, key in enumerate(meta.keys):
        adv = fake.rows[key]["advantages"]
        assert torch.allclose(adv, torch.full_like(adv, expected[i]), atol=1e-5), (i, adv)
    assert metrics["gta/reward_error_rows"] == 1.0
    assert metrics["gta/reward_error_frac"] == pytest.approx(1 / 6)


def test_without_error_rows_the_advantages_are_verls(monkeypatch):
    rows, _ = _rows([1.0] * 6, [0] * 6)
    trainer, meta, fake = _trainer(monkeypatch, rows)
    metrics: dict = {}
    trainer._compute_advantage(meta, metrics)
    for i, key in enumerate(meta.keys):
        adv = fake.rows[key]["advantages"]
        assert torch.allclose(adv, torch.full_like(adv, HAND_GRPO[i]), atol=1e-5)
    assert metrics["gta/reward_error_rows"] == 0.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -0.5])
def test_route_weights_that_are_not_finite_and_non_negative_are_refused(monkeypatch, bad):
    rows, _ = _rows([1.0, 0.5, bad, 1.0, 1.0, 0.5], [0, 1, 2, 3, 0, 1])
    trainer, meta, fake = _trainer(monkeypatch, rows)
    with pytest.raises(ValueError, match=r"finite and >= 0.*row 2"):
        trainer._compute_advantage(meta, {})
    # Nothing scaled was written: the advantages are the parent's Â.
    for i, key in enumerate(meta.keys):
        adv = fake.rows[key]["advantages"]
        assert torch.allclose(adv, torch.full_like(adv, HAND_GRPO[i]), atol=1e-5)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_route_weight_settings_that_are_not_finite_and_non_negative_are_refused(bad):
    from gta_verl.algos.route_weights import apply_route_weights
    from gta_verl.rewards.path_router import PathRouterConfig

    with pytest.raises(ValueError, match="finite and >= 0"):
        PathRouterConfig(route_weights=(1.0, 0.5, bad, 1.0))
    with pytest.raises(ValueError, match="finite and >= 0"):
        apply_route_weights(torch.ones(2, 3), torch.tensor([1.0, bad]))


def test_an_error_row_is_no_route_in_the_path_router_metrics(monkeypatch):
    # Routes 0, 1, 2, 3, 0, 1 with row 5 unscored: its manager's placeholders say route 0 (C+P+), weight 0.
    rows, _ = _rows([1.0, 0.5, 0.5, 1.0, 1.0, 0.5], [0, 1, 2, 3, 0, 1])
    _mark_error(rows, 5)
    trainer, meta, fake = _trainer(monkeypatch, rows)
    metrics: dict = {}
    trainer._compute_advantage(meta, metrics)
    # Shares over rows 0-4: C+P+ rows 0, 4 → 2/5; C+P-, C-P+, C-P- one each → 1/5 (counting row 5 as its
    # placeholder would give C+P+ 3/6).
    assert metrics["path_router/route_share/C+P+"] == pytest.approx(2 / 5)
    assert metrics["path_router/route_share/C-P-"] == pytest.approx(1 / 5)
    # Row 5's advantage is 0; row 3 (C-P-, weight 1) has group 2's Â without row 5: (2 − 0.5)/(2.1213203 + ε).
    last = fake.rows[meta.keys[5]]["advantages"]
    assert torch.equal(last, torch.zeros_like(last))
    row3 = fake.rows[meta.keys[3]]["advantages"]
    assert torch.allclose(row3, torch.full_like(row3, 0.7071064), atol=1e-5)
