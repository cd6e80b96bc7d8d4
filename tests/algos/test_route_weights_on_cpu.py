"""Route-weighted advantages: the pure function and the V1 trainer method with a fake TransferQueue."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from gta_verl.algos.route_weights import apply_route_weights, route_metrics


def test_unit_weights_are_bitwise_identity():
    adv = torch.randn(6, 9, dtype=torch.float32)
    out = apply_route_weights(adv, torch.ones(6))
    assert torch.equal(out, adv)


def test_each_route_scaled_exactly():
    adv = torch.tensor([[1.0, 1.0, 0.0], [-2.0, -2.0, -2.0], [0.5, 0.0, 0.0], [3.0, 3.0, 3.0]])
    w = torch.tensor([1.0, 0.5, 0.5, 1.0])  # C+P+, C+P-, C-P+, C-P-
    out = apply_route_weights(adv, w)
    assert torch.equal(
        out, torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0], [0.25, 0.0, 0.0], [3.0, 3.0, 3.0]])
    )


def test_shape_errors():
    with pytest.raises(ValueError, match="batch size"):
        apply_route_weights(torch.zeros(3, 4), torch.ones(2))
    with pytest.raises(ValueError, match=r"\[bs, T\]"):
        apply_route_weights(torch.zeros(3), torch.ones(3))


def test_route_metrics():
    m = route_metrics([0, 0, 1, 3], [1.0, 1.0, 0.5, 1.0])
    assert m["path_router/route_share/C+P+"] == 0.5
    assert m["path_router/route_share/C+P-"] == 0.25
    assert m["path_router/route_share/C-P+"] == 0.0
    assert m["path_router/route_share/C-P-"] == 0.25
    assert m["path_router/mean_route_weight"] == pytest.approx(0.875)
    assert route_metrics([], [])["path_router/mean_route_weight"] == 0.0


# ----------------------------------------------------------------------------- trainer + fake TQ
class FakeTQ:
    """In-memory stand-in for ``transfer_queue``'s kv_batch_get / kv_batch_put."""

    def __init__(self, rows: dict[str, dict]):
        self.rows = rows

    def kv_batch_get(self, keys, partition_id, select_fields):
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        present = [f for f in select_fields if f in self.rows[keys[0]]]
        return list_of_dict_to_tensordict([{f: self.rows[k][f] for f in present} for k in keys])

    def kv_batch_put(self, keys, partition_id, fields):
        for i, k in enumerate(keys):
            for name, value in fields.items():
                self.rows[k][name] = value[i]
        from transfer_queue import KVBatchMeta

        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=[{} for _ in keys])


def _rows(weights, routes, c=None, p=None):
    # 2 prompts × 3 sessions; scalar reward on the last token, different response lengths.
    # C, P default to values consistent with the route at θ_P = 0.4 (P↑ → 0.5, P↓ → 0.0).
    scores = [1.0, 0.0, 0.5, 2.0, -1.0, 0.0]
    c = c if c is not None else [float(r in (0, 1)) for r in routes]
    p = p if p is not None else [0.5 if r in (0, 2) else 0.0 for r in routes]
    rows = {}
    for i, (s, w, r) in enumerate(zip(scores, weights, routes, strict=True)):
        uid = f"u{i // 3}"
        length = 3 + i
        rm = torch.zeros(length)
        rm[-1] = s
        rows[f"{uid}_{i % 3}_0"] = {
            "uid": uid,
            "response_mask": torch.ones(length, dtype=torch.int64),
            "rm_scores": rm,
            "extra_fields": {
                "reward_extra_info": {
                    "route_weight": w,
                    "route": r,
                    "C": c[i],
                    "P": p[i],
                    "distill_select": float(r in (1, 3)),
                    "has_gold_evidence": 1.0,
                }
            },
        }
    return rows, scores


def _trainer(monkeypatch, rows, path_router=None):
    import verl.trainer.ppo.v1.trainer_base as base

    import gta_verl.algos.trainer as tr

    fake = FakeTQ(rows)
    monkeypatch.setattr(base, "tq", fake)
    monkeypatch.setattr(tr, "tq", fake)
    trainer = object.__new__(tr.GTAPathRouterTrainer)
    trainer.config = OmegaConf.create(
        {
            "algorithm": {
                "use_kl_in_reward": False,
                "adv_estimator": "grpo",
                "gamma": 1.0,
                "lam": 1.0,
                "norm_adv_by_std_in_grpo": True,
            },
            "actor_rollout_ref": {"rollout": {"n": 3}},
            "gta": {"path_router": path_router or {}},
        }
    )
    from gta_verl.rewards.path_router import path_router_config_from_trainer

    trainer.path_router_cfg = path_router_config_from_trainer(trainer.config)
    trainer._distill_select_frac = None
    from transfer_queue import KVBatchMeta

    meta = KVBatchMeta(partition_id="train", keys=list(rows), tags=[{} for _ in rows])
    return trainer, meta, fake


# GRPO advantages of the scores [1, 0, 0.5 | 2, -1, 0], Â = (R − mean)/(std + 1e-6), unbiased std:
#   group 1: mean 0.5, deviations (0.5, −0.5, 0), std = sqrt((0.25 + 0.25 + 0)/2) = 0.5
#            → Â = (1, −1, 0) (×0.5/(0.5 + 1e-6) = 0.999998)
#   group 2: mean 1/3, deviations (5/3, −4/3, −1/3), std = sqrt((25 + 16 + 1)/9/2) = sqrt(7/3)
#            = 1.5275252 → Â = (1.0910895, −0.8728716, −0.2182179)
HAND_GRPO = [1.0, -1.0, 0.0, 1.0910895, -0.8728716, -0.2182179]


def test_trainer_rescales_advantages_and_logs(monkeypatch):
    weights, routes = [1.0, 0.5, 0.5, 1.0, 1.0, 0.5], [0, 1, 2, 3, 0, 1]
    rows, scores = _rows(weights, routes)
    trainer, meta, fake = _trainer(monkeypatch, rows)
    metrics: dict = {}
    trainer._compute_advantage(meta, metrics)
    for i, key in enumerate(meta.keys):
        adv = fake.rows[key]["advantages"]
        assert adv.shape[0] == 3 + i
        # Ã_i = w_i · Â_i, e.g. row 1: 0.5 · (−1) = −0.5; row 5: 0.5 · (−0.2182179) = −0.1091090
        assert torch.allclose(adv, torch.full_like(adv, HAND_GRPO[i] * weights[i]), atol=1e-5)
    assert metrics["path_router/route_share/C+P+"] == pytest.approx(2 / 6)
    assert metrics["path_router/route_share/C+P-"] == pytest.approx(2 / 6)
    assert metrics["path_router/mean_route_weight"] == pytest.approx(sum(weights) / 6)
    assert metrics["path_router/kl_select_frac"] == pytest.approx(3 / 6)
    # correct answers: routes 0,1,0,1 → 2 of 4 evidence-poor
    assert metrics["path_router/unsupported_answer_rate"] == pytest.approx(0.5)
    assert trainer._distill_select_frac == pytest.approx(0.5)


def test_trainer_equals_grpo_with_unit_weights(monkeypatch):
    # route_scaling=false: every weight 0.5 written by the manager is ignored → Ã = Â, the
    # hand-computed GRPO advantages (HAND_GRPO), not 0.5 · Â.
    rows, _ = _rows([0.5] * 6, [1] * 6)
    trainer, meta, fake = _trainer(monkeypatch, rows, {"route_scaling": False})
    trainer._compute_advantage(meta, {})
    for i, k in enumerate(meta.keys):
        adv = fake.rows[k]["advantages"]
        assert torch.allclose(adv, torch.full_like(adv, HAND_GRPO[i]), atol=1e-5)


def test_uar_from_c_and_p_under_answer_only_routing(monkeypatch):
    # answer_only routing reports only C+P+ (0) / C-P+ (2), so a route-based UAR is always 0.
    # From C and P at θ_P = 0.4: correct = rows 0, 1, 2 (C = 1); of those P < 0.4: rows 1, 2
    # (P = 0.0, 0.3) → UAR = 2/3. Row 3 (C = 0, P = 0.1) is not a correct answer.
    routes = [0, 0, 0, 2, 2, 2]
    rows, _ = _rows([1.0] * 6, routes, c=[1.0, 1.0, 1.0, 0.0, 0.0, 0.0], p=[0.5, 0.0, 0.3, 0.1, 0.9, 0.0])
    trainer, meta, _ = _trainer(monkeypatch, rows, {"routing": "answer_only"})
    metrics: dict = {}
    trainer._compute_advantage(meta, metrics)
    assert metrics["path_router/unsupported_answer_rate"] == pytest.approx(2 / 3)


def test_unsupported_answer_rate_hand_computed():
    from gta_verl.algos.route_weights import unsupported_answer_rate

    c = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    p = torch.tensor([0.5, 0.39, 0.0, 0.0, 0.0])
    gold = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0])
    # correct with gold evidence: rows 0, 1, 2; evidence-poor (P < 0.4): rows 1, 2 → 2/3.
    # Row 3 has no gold evidence (P undefined) and is left out, as in the evaluation's UAR.
    assert unsupported_answer_rate(c, p, gold, 0.4) == pytest.approx(2 / 3)
    assert unsupported_answer_rate(c, p, gold, 0.3) == pytest.approx(1 / 3)  # only row 2 (0.0)
    assert unsupported_answer_rate(torch.zeros(3), torch.zeros(3), torch.ones(3), 0.4) == 0.0


def test_update_actor_sets_lambda(monkeypatch):
    from gta_verl.verl_compat import PPOTrainerSync

    rows, _ = _rows([1.0] * 6, [0] * 6)
    trainer, meta, _ = _trainer(monkeypatch, rows, {"kl": {"lambda_max": 0.2, "warmup_steps": 10}})
    trainer.global_steps = 5
    trainer._distill_select_frac = 0.25
    seen = {}
    monkeypatch.setattr(PPOTrainerSync, "_update_actor", lambda self, b, m: seen.update(b.extra_info) or b)
    metrics: dict = {}
    trainer._update_actor(meta, metrics)
    assert seen["gta_distill_coef"] == pytest.approx(0.1)
    assert seen["gta_distill_select_frac"] == 0.25
    assert metrics["path_router/kl_lambda"] == pytest.approx(0.1)


def test_trainer_reports_sync_mode():
    import gta_verl.algos.trainer as tr

    t = object.__new__(tr.GTAPathRouterTrainer)
    t.trainer_mode = "gta_path_router_sync"  # what PPOTrainer.__init__ assigns
    assert t.trainer_mode == "sync" and t.registered_trainer_mode == "gta_path_router_sync"
