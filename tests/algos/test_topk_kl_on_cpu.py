"""Selective renormalized top-K KL: dense reference, verl's (L, P, Q) identity, the registered
loss through verl's own aggregation, masks and gradients, and the λ warmup schedule."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from gta_verl.algos.schedule import warmup_lambda
from gta_verl.algos.topk_kl import (
    renormalized_kl_from_mass,
    renormalized_topk_kl,
    selective_kl_loss,
    topk_kl_from_logits,
    trajectory_mean_kl,
)
from gta_verl.rewards.path_router import PathRouterKLConfig

V, K = 40, 6


def _teacher(gen, shape):
    t_logits = torch.randn(*shape, V, generator=gen) * 2
    t_logp = F.log_softmax(t_logits, dim=-1)
    lp, ids = torch.topk(t_logp, K, dim=-1)
    return ids, lp  # unrenormalized top-K log-probs, as verl's teacher server returns


def _dense_reference(student_logits, ids, lp):
    """Explicit loops: p̃ = top-K teacher renormalized, q̃ = student softmax at ids renormalized."""
    out = torch.zeros(ids.shape[:-1], dtype=torch.float64)
    probs = F.softmax(student_logits.double(), dim=-1)
    for idx in torch.cartesian_prod(*[torch.arange(n) for n in ids.shape[:-1]]):
        idx = tuple(idx.tolist()) if idx.dim() else (int(idx),)
        p = lp[idx].double().exp()
        p = p / p.sum()
        q = probs[idx][ids[idx]]
        q = q / q.sum()
        out[idx] = (p * (p.log() - q.log())).sum()
    return out


def test_topk_kl_matches_dense_reference():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, V, generator=gen)
    ids, lp = _teacher(gen, (2, 5))
    ours = topk_kl_from_logits(logits, ids, lp)
    assert torch.allclose(ours.double(), _dense_reference(logits, ids, lp), atol=1e-5)
    assert (ours >= -1e-6).all()
    # identical distributions → 0
    same = topk_kl_from_logits(
        torch.log_softmax(logits, -1), ids, torch.gather(F.log_softmax(logits, -1), -1, ids)
    )
    assert torch.allclose(same, torch.zeros_like(same), atol=1e-6)
    # renormalized_topk_kl is invariant to a constant shift of either side
    assert torch.allclose(renormalized_topk_kl(lp - 3.0, lp + 1.0), torch.zeros(2, 5), atol=1e-6)


def _verl_lpq(logits, ids, lp):
    """verl's FSDP top-K logits processor on one packed sequence batch."""
    from verl.trainer.distillation.fsdp.losses import compute_forward_kl_topk

    cfg = SimpleNamespace(distillation_loss=SimpleNamespace(log_prob_min_clamp=None, use_chunked_topk=False))
    nested_ids = torch.nested.as_nested_tensor([ids[0]], layout=torch.jagged)
    nested_lp = torch.nested.as_nested_tensor([lp[0]], layout=torch.jagged)
    return compute_forward_kl_topk(logits, nested_lp, nested_ids, cfg, "thd")


def test_identity_from_verl_outputs_values_and_gradients():
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(1, 12, V, generator=gen)
    ids, lp = _teacher(gen, (1, 12))
    a = base.clone().requires_grad_(True)
    out = _verl_lpq(a, ids, lp)
    ours = renormalized_kl_from_mass(out["distillation_losses"], out["teacher_mass"], out["student_mass"])
    b = base.clone().requires_grad_(True)
    ref = topk_kl_from_logits(b, ids, lp)
    assert torch.allclose(ours, ref, atol=1e-5)
    w = torch.rand(1, 12, generator=gen)
    (ours * w).sum().backward()
    (ref * w).sum().backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-5)


def test_selective_kl_loss_hand_computed():
    kl = torch.tensor([[1.0, 3.0, 5.0, 7.0], [2.0, 2.0, 2.0, 2.0], [4.0, 0.0, 8.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]])
    mean, sel = trajectory_mean_kl(kl, mask)
    assert mean.tolist() == [2.0, 0.0, 6.0] and sel.tolist() == [True, False, True]
    # (2 + 6) / 2 selected trajectories, times λ = 0.5
    assert selective_kl_loss(kl, mask, 0.5).item() == pytest.approx(2.0)
    assert selective_kl_loss(kl, torch.zeros_like(mask), 1.0).item() == 0.0


# ----------------------------------------------------------------------------- the registered loss
# sample 0: reasoning [0,3) query [3,5) observation [5,8) answer [8,10); selected
# sample 1: reasoning [0,2) answer [2,4); evidence-rich → distill_select = 0
# sample 2: reasoning [0,2) query [2,3) observation [3,5) reasoning [5,7) answer [7,8); selected
SPANS = [
    [["reasoning", 0, 3], ["query", 3, 5], ["observation", 5, 8], ["answer", 8, 10]],
    [["reasoning", 0, 2], ["answer", 2, 4]],
    [["reasoning", 0, 2], ["query", 2, 3], ["observation", 3, 5], ["reasoning", 5, 7], ["answer", 7, 8]],
]
SELECT = [1.0, 0.0, 1.0]
PROMPT_LENS = [4, 3, 5]


def _batch(gen, lam=None, frac=None):
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    from gta_verl.agent.spans import distill_mask_from_spans

    resp_lens = [s[-1][2] for s in SPANS]

    def nested(xs):
        return torch.nested.as_nested_tensor(xs, layout=torch.jagged)

    rmask = [
        torch.tensor([0 if k == "observation" else 1 for k, a, b in s for _ in range(a, b)]) for s in SPANS
    ]
    dmask = [
        torch.tensor(distill_mask_from_spans(n, s)) * sel
        for n, s, sel in zip(resp_lens, SPANS, SELECT, strict=True)
    ]
    td = TensorDict(
        {
            "prompts": nested([torch.ones(p, dtype=torch.long) for p in PROMPT_LENS]),
            "responses": nested([torch.ones(n, dtype=torch.long) for n in resp_lens]),
            "response_mask": nested(rmask),
            "distill_mask": nested(dmask),
        },
        batch_size=3,
    )
    nnz = sum(PROMPT_LENS) + sum(resp_lens)
    info = {"dp_size": 1, "batch_num_tokens": int(sum(m.sum() for m in rmask)), "global_batch_size": 3}
    if lam is not None:
        info["gta_distill_coef"] = lam
    if frac is not None:
        info["gta_distill_select_frac"] = frac
    tu.assign_non_tensor(td, **info)
    ids, lp = _teacher(gen, (1, nnz))
    return td, ids, lp, resp_lens, rmask, dmask


def _as_engine_output(outputs, resp_lens):
    """(1, total_nnz) logits-processor outputs → nested per sequence, as the FSDP engine stores them."""
    lens = torch.tensor([p + r for p, r in zip(PROMPT_LENS, resp_lens, strict=True)])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])
    return {k: torch.nested.nested_tensor_from_jagged(v.squeeze(0), offsets) for k, v in outputs.items()}


def _response_rows(resp_lens):
    """Flat row of the logits that predicts response token j of sample i (row P−1+j)."""
    rows, off = [], 0
    for p, r in zip(PROMPT_LENS, resp_lens, strict=True):
        rows.append([off + p - 1 + j for j in range(r)])
        off += p + r
    return rows


@pytest.mark.parametrize(
    "mode",
    ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"],
)
def test_registered_loss_equals_selective_kl_under_every_agg_mode(mode):
    from verl.trainer.distillation.losses import distillation_loss

    import gta_verl.algos.distill_loss  # noqa: F401  (registration)

    gen = torch.Generator().manual_seed(2)
    td, ids, lp, resp_lens, _, dmask = _batch(gen, lam=0.3)
    logits = torch.randn(1, ids.shape[1], V, generator=gen).requires_grad_(True)
    model_output = _as_engine_output(_verl_lpq(logits, ids, lp), resp_lens)
    actor = SimpleNamespace(loss_agg_mode=mode, global_batch_info={}, loss_scale_factor=None)
    dcfg = SimpleNamespace(
        distillation_loss=SimpleNamespace(
            loss_mode="gta_selective_topk_kl",
            loss_max_clamp=None,
            log_prob_min_clamp=None,
            use_policy_gradient=False,
            topk=K,
            use_chunked_topk=False,
        )
    )
    loss, metrics = distillation_loss(actor, dcfg, model_output, td)

    # dense reference: per-trajectory token mean over distill_mask, mean over selected, × λ
    ref_logits = logits.detach().clone().requires_grad_(True)
    flat = topk_kl_from_logits(ref_logits, ids, lp)[0]
    width = max(resp_lens)
    rows = _response_rows(resp_lens)
    per_tok = torch.stack([F.pad(flat[r], (0, width - len(r))) for r in rows])
    mask = torch.stack([F.pad(m, (0, width - len(m))) for m in dmask])
    ref = selective_kl_loss(per_tok, mask, 0.3)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert metrics["distillation/gta_select_frac"] == pytest.approx(2 / 3)
    assert metrics["distillation/gta_coef"] == 0.3

    loss.backward()
    ref.backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-6)
    grad_norm = logits.grad[0].abs().sum(-1)
    for i, (r, m) in enumerate(zip(rows, dmask, strict=True)):
        for j, row in enumerate(r):
            if m[j] == 0:  # observation, answer, or an evidence-rich trajectory: no gradient
                assert grad_norm[row] == 0, (i, j)
            else:
                assert grad_norm[row] > 0, (i, j)
    assert all(grad_norm[row] == 0 for row in rows[1])  # evidence-rich sample untouched


def test_select_frac_from_trainer_and_missing_mask():
    import gta_verl.algos.distill_loss as dl

    gen = torch.Generator().manual_seed(3)
    td, ids, lp, *_ = _batch(gen, lam=1.0, frac=2 / 3)
    out = _as_engine_output(_verl_lpq(torch.randn(1, ids.shape[1], V, generator=gen), ids, lp), [10, 4, 8])
    actor = SimpleNamespace(loss_agg_mode="token-mean", global_batch_info={}, loss_scale_factor=None)
    dcfg = SimpleNamespace(distillation_loss=SimpleNamespace(log_prob_min_clamp=None, loss_max_clamp=None))
    per_tok, _ = dl.compute_gta_selective_topk_kl(actor, dcfg, out, td)
    # frac 2/3 of G = 3 → N_sel = 2, same as counting: token-mean agg = Σ per_tok / B_tok
    rm = td["response_mask"].to_padded_tensor(0).float()
    td2, *_ = _batch(torch.Generator().manual_seed(3), lam=1.0)
    per_tok2, _ = dl.compute_gta_selective_topk_kl(actor, dcfg, out, td2)
    assert torch.allclose((per_tok * rm).sum(), (per_tok2 * rm).sum())
    td.pop("distill_mask")
    with pytest.raises(KeyError, match="distill_mask"):
        dl.compute_gta_selective_topk_kl(actor, dcfg, out, td)
    bad = SimpleNamespace(distillation_loss=SimpleNamespace(log_prob_min_clamp=-10.0, loss_max_clamp=None))
    with pytest.raises(ValueError, match="log_prob_min_clamp=null"):
        dl.compute_gta_selective_topk_kl(actor, bad, out, td2)


# ----------------------------------------------------------------------------- λ(step)
def test_warmup_schedules():
    lin = PathRouterKLConfig(lambda_max=0.2, warmup_steps=10, schedule="linear")
    assert [warmup_lambda(s, lin) for s in (0, 1, 5, 10, 11, 1000)] == pytest.approx(
        [0.0, 0.02, 0.1, 0.2, 0.2, 0.2]
    )
    cos = PathRouterKLConfig(lambda_max=0.2, warmup_steps=10, schedule="cosine")
    # λ_max · (1 − cos(π·s/W)) / 2
    assert warmup_lambda(5, cos) == pytest.approx(0.1)
    assert warmup_lambda(2, cos) == pytest.approx(0.2 * (1 - math.cos(math.pi * 0.2)) / 2)
    assert warmup_lambda(20, cos) == pytest.approx(0.2)
    const = PathRouterKLConfig(lambda_max=0.2, warmup_steps=10, schedule="constant")
    assert warmup_lambda(0, const) == 0.2 and warmup_lambda(7, const) == 0.2
    assert warmup_lambda(3, PathRouterKLConfig(lambda_max=0.3, warmup_steps=0)) == 0.3
    assert warmup_lambda(50, PathRouterKLConfig(enabled=False)) == 0.0
    with pytest.raises(ValueError, match="step"):
        warmup_lambda(-1, lin)
