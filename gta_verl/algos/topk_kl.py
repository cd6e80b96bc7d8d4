"""Selective renormalized top-K KL to the gold-evidence teacher — pure torch.

Paper: PathRouter §3.3,

    L_TKL = 1/|I_low| · Σ_{i ∈ I_low} 1/|T_i^rq| · Σ_{t ∈ T_i^rq} KL(p_ref^K ‖ p_θ^K)_t ,

where p_ref^K is the teacher's top-K distribution renormalized over its K ids, p_θ^K the
student's probabilities at the same ids renormalized, I_low the evidence-poor
trajectories (P_i < θ_P) and T_i^rq their reasoning + search-query tokens. The total
loss is L_GRPO(Ã) + λ(step)·L_TKL.

verl 0.9.1's top-K logits processor (``trainer/distillation/fsdp/losses.py``) already
returns, per token, L = Σ_k p_k (log p_k − log q_k) over the teacher's top-K (p
unnormalized, mass P = Σ p_k) plus the masses P and Q = Σ_k q_k. Because
p̃ = p/P and q̃ = q/Q, the renormalized KL is an exact function of them:

    KL(p̃ ‖ q̃) = L/P − log P + log Q            (valid when log_prob_min_clamp is null)

which is what :func:`renormalized_kl_from_mass` computes; :func:`topk_kl_from_logits`
is the direct dense form used as the reference in tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gta_verl.algos.schedule import warmup_lambda

__all__ = [
    "LOSS_AGG_MODES",
    "agg_coefficients",
    "renormalized_kl_from_mass",
    "renormalized_topk_kl",
    "selective_kl_loss",
    "topk_kl_from_logits",
    "trajectory_mean_kl",
    "warmup_lambda",
]

LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
    "seq-mean-token-mean",
)


def renormalized_topk_kl(teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor) -> torch.Tensor:
    """KL(p̃ ‖ q̃) where both are renormalized over the same K ids.

    Args:
        teacher_logprobs: log p at the teacher's top-K ids, [..., K] (need not sum to 1).
        student_logprobs: log q (or logits) of the student at the same ids, [..., K].

    Returns:
        [...] per-position KL, ≥ 0.
    """
    log_p = teacher_logprobs.float() - torch.logsumexp(teacher_logprobs.float(), dim=-1, keepdim=True)
    log_q = student_logprobs.float() - torch.logsumexp(student_logprobs.float(), dim=-1, keepdim=True)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def topk_kl_from_logits(
    student_logits: torch.Tensor, teacher_ids: torch.Tensor, teacher_logprobs: torch.Tensor
) -> torch.Tensor:
    """Renormalized top-K KL straight from student logits.

    Args:
        student_logits: [bs, T, V].
        teacher_ids: [bs, T, K] (int) teacher's top-K vocabulary ids per position.
        teacher_logprobs: [bs, T, K] teacher log-probs at those ids.

    Returns:
        [bs, T] KL(p_ref^K ‖ p_θ^K). Gathering logits and renormalizing over K equals
        gathering log_softmax and renormalizing (the partition function cancels).
    """
    gathered = torch.gather(student_logits.float(), dim=-1, index=teacher_ids.long())
    return renormalized_topk_kl(teacher_logprobs, F.log_softmax(gathered, dim=-1))


def renormalized_kl_from_mass(
    topk_kl: torch.Tensor, teacher_mass: torch.Tensor, student_mass: torch.Tensor, eps: float = 1e-12
) -> torch.Tensor:
    """KL(p̃ ‖ q̃) = L/P − log P + log Q from verl's (L, P, Q) logits-processor outputs.

    Args:
        topk_kl: L, verl's unrenormalized top-K forward KL, [bs, T].
        teacher_mass: P = Σ_k p_k, [bs, T].
        student_mass: Q = Σ_k q_k, [bs, T].
        eps: floor on the masses (padding rows can carry zeros).

    Returns:
        [bs, T] renormalized KL (differentiable through L and Q).
    """
    p = teacher_mass.float().clamp_min(eps)
    q = student_mass.float().clamp_min(eps)
    return topk_kl.float() / p - torch.log(p) + torch.log(q)


def trajectory_mean_kl(
    per_token_kl: torch.Tensor, distill_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory mean KL over T_i^rq and which trajectories are selected.

    Args:
        per_token_kl: [bs, T].
        distill_mask: [bs, T] 1 on reasoning/query tokens of selected trajectories, else 0.

    Returns:
        (mean_kl [bs] — 0 for unselected rows, selected [bs] bool = mask has any token).
    """
    mask = distill_mask.to(per_token_kl.dtype)
    count = mask.sum(dim=-1)
    selected = count > 0
    mean = (per_token_kl * mask).sum(dim=-1) / count.clamp_min(1.0)
    return mean, selected


def selective_kl_loss(
    per_token_kl: torch.Tensor, distill_mask: torch.Tensor, lam: float = 1.0
) -> torch.Tensor:
    """λ · L_TKL: mean over selected trajectories of their token-mean KL (0 if none)."""
    mean, selected = trajectory_mean_kl(per_token_kl, distill_mask)
    n_sel = selected.sum()
    if int(n_sel.item()) == 0:
        return per_token_kl.sum() * 0.0
    return lam * mean[selected].sum() / n_sel


def agg_coefficients(
    distill_mask: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    num_selected: float,
    batch_num_tokens: float | None = None,
    global_batch_size: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Per-token coefficients c so that verl's ``agg_loss(kl · c, response_mask, mode)`` = L_TKL.

    verl aggregates every distillation loss with the actor's ``loss_agg_mode`` over
    ``response_mask``: for "token-mean" the denominator is *all* response tokens of the
    global mini-batch, so a plain masked KL would shrink with the share of selected
    trajectories and weight long trajectories more. The coefficients undo that:
    with ``base[i, t] = mask[i, t] / |T_i^rq| / N_sel``,

    * token-mean: c = base · B_tok (B_tok = global response tokens, verl's batch_num_tokens);
    * token-sum: c = base;
    * seq-mean-token-sum: c = base · G (G = global_batch_size);
    * seq-mean-token-sum-norm: c = base · G · S (S = loss_scale_factor or the width);
    * seq-mean-token-mean: c = base · G · (|R_i| + 1e-8) (|R_i| = response tokens of i).

    DP averaging and verl's ``dp_size`` factor cancel, so the same holds globally.

    Args:
        distill_mask: [bs, T] float/bool.
        response_mask: [bs, T].
        loss_agg_mode: the actor's ``loss_agg_mode``.
        num_selected: N_sel, selected trajectories in the global mini-batch (≥ 1 used).
        batch_num_tokens: B_tok; defaults to the local ``response_mask.sum()``.
        global_batch_size: G; defaults to the local count of non-empty responses.
        loss_scale_factor: S for "seq-mean-token-sum-norm".

    Returns:
        [bs, T] float32 coefficients, zero outside ``distill_mask``.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unsupported loss_agg_mode {loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")
    mask = distill_mask.float() * response_mask.float()
    base = mask / mask.sum(dim=-1, keepdim=True).clamp_min(1.0) / max(float(num_selected), 1.0)
    rmask = response_mask.float()
    if loss_agg_mode == "token-mean":
        tokens = float(batch_num_tokens) if batch_num_tokens is not None else float(rmask.sum().item())
        return base * tokens
    if loss_agg_mode == "token-sum":
        return base
    seqs = (
        float(global_batch_size) if global_batch_size is not None else float((rmask.sum(-1) > 0).sum().item())
    )
    if loss_agg_mode == "seq-mean-token-sum":
        return base * seqs
    if loss_agg_mode == "seq-mean-token-sum-norm":
        scale = float(loss_scale_factor) if loss_scale_factor is not None else float(rmask.shape[-1])
        return base * seqs * scale
    return base * seqs * (rmask.sum(dim=-1, keepdim=True) + 1e-8)
