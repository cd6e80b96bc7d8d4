"""verl distillation loss ``gta_selective_topk_kl``: PathRouter's selective teacher KL.

Select it with::

    distillation.enabled=True
    distillation.distillation_loss.loss_mode=gta_selective_topk_kl
    distillation.distillation_loss.topk=<K = gta.path_router.kl.topk>
    distillation.distillation_loss.use_task_rewards=True      # GRPO loss + λ·L_TKL
    distillation.distillation_loss.distillation_loss_coef=1.0 # λ(step) is applied here
    distillation.distillation_loss.log_prob_min_clamp=null    # the identity below needs it
    distillation.distillation_loss.loss_max_clamp=null        # would clip the rescaled values

verl's top-K logits processor (``use_topk=True``) gives per token L, P (teacher mass) and
Q (student mass); this loss turns them into the renormalized KL(p̃‖q̃) = L/P − log P +
log Q (:func:`gta_verl.algos.topk_kl.renormalized_kl_from_mass`), keeps only
``distill_mask`` tokens (reasoning + query tokens of selected trajectories, written by
the agent loop's ``as_dict``), and rescales them with
:func:`gta_verl.algos.topk_kl.agg_coefficients` so that verl's ``agg_loss`` yields
λ(step)·L_TKL (per-trajectory token mean, then mean over selected trajectories) instead
of a token mean diluted by every response token of the mini-batch.

Non-tensor inputs set by :class:`gta_verl.algos.trainer.GTAPathRouterTrainer`:
``gta_distill_coef`` (λ(step); default 1.0 when absent) and ``gta_distill_select_frac``
(share of selected trajectories in the step, to estimate N_sel of a mini-batch; when
absent the micro-batch's own share is used).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from gta_verl.algos.topk_kl import agg_coefficients, renormalized_kl_from_mass, trajectory_mean_kl
from gta_verl.verl_compat import (
    DistillationLossSettings,
    no_padding_2_padding,
    register_distillation_loss,
    retry_plugin_registration,
    tensordict_utils,
)

logger = logging.getLogger(__name__)

LOSS_NAME = "gta_selective_topk_kl"
#: Non-tensor keys the trainer puts into ``batch.extra_info`` for the actor update.
COEF_KEY = "gta_distill_coef"
SELECT_FRAC_KEY = "gta_distill_select_frac"
DISTILL_MASK_KEY = "distill_mask"

__all__ = ["COEF_KEY", "DISTILL_MASK_KEY", "LOSS_NAME", "SELECT_FRAC_KEY", "compute_gta_selective_topk_kl"]


def _padded(t: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    return t.to_padded_tensor(fill) if t.is_nested else t


def _fit_width(t: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad / truncate [bs, T'] to [bs, width] (nested padding uses the micro-batch max)."""
    if t.shape[-1] == width:
        return t
    if t.shape[-1] > width:
        return t[:, :width]
    return F.pad(t, (0, width - t.shape[-1]))


def _check_config(distillation_config: Any) -> None:
    loss_cfg = distillation_config.distillation_loss
    if getattr(loss_cfg, "log_prob_min_clamp", None) is not None:
        raise ValueError(
            f"{LOSS_NAME} needs distillation.distillation_loss.log_prob_min_clamp=null "
            f"(got {loss_cfg.log_prob_min_clamp}); the clamp breaks KL(p~||q~) = L/P - log P + log Q"
        )
    if getattr(loss_cfg, "loss_max_clamp", None) is not None and not getattr(_check_config, "_warned", False):
        _check_config._warned = True  # type: ignore[attr-defined]
        logger.warning(
            "%s: distillation.distillation_loss.loss_max_clamp=%s clips the *rescaled* per-token values; "
            "set it to null",
            LOSS_NAME,
            loss_cfg.loss_max_clamp,
        )


def _nt(data: Any, key: str, default: Any) -> Any:
    return tensordict_utils.get_non_tensor_data(data=data, key=key, default=default)


@register_distillation_loss(DistillationLossSettings(names=[LOSS_NAME], use_topk=True))  # type: ignore[arg-type]
def compute_gta_selective_topk_kl(
    config: Any, distillation_config: Any, model_output: dict, data: Any
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Selective renormalized top-K KL, λ(step)-weighted (PathRouter §3.3).

    Args:
        config: the actor's ``ActorConfig`` (``loss_agg_mode``, ``loss_scale_factor``).
        distillation_config: verl's ``DistillationConfig``.
        model_output: holds ``distillation_losses`` (L), ``teacher_mass`` (P) and
            ``student_mass`` (Q) from the top-K logits processor, in no-padding layout.
        data: the micro-batch TensorDict: ``prompts``, ``responses``, ``response_mask``,
            ``distill_mask`` (nested, response length), and the non-tensor
            ``batch_num_tokens``, ``global_batch_size``, ``gta_distill_coef``,
            ``gta_distill_select_frac``.

    Returns:
        (per-token loss [bs, resp_len] to be aggregated by verl's ``agg_loss`` over
        ``response_mask``, metrics).
    """
    _check_config(distillation_config)
    kl_l = no_padding_2_padding(model_output["distillation_losses"], data)
    kl = renormalized_kl_from_mass(
        kl_l,
        no_padding_2_padding(model_output["teacher_mass"], data),
        no_padding_2_padding(model_output["student_mass"], data),
    )
    response_mask = _fit_width(_padded(data["response_mask"], 0).float(), kl.shape[-1])
    # TensorDict refuses `key in td` (ambiguous for nested keys); membership goes through keys().
    if DISTILL_MASK_KEY not in data.keys():
        raise KeyError(
            f"{LOSS_NAME} needs the per-token '{DISTILL_MASK_KEY}' field; run the gta_search_agent loop "
            "(gta_verl.agent.loop), whose output adds it"
        )
    distill_mask = _fit_width(_padded(data[DISTILL_MASK_KEY], 0.0).float(), kl.shape[-1]) * response_mask
    lam = float(_nt(data, COEF_KEY, 1.0))
    _, selected = trajectory_mean_kl(kl.detach(), distill_mask)
    bs = max(int(selected.numel()), 1)
    global_bs = _nt(data, "global_batch_size", None)
    frac = _nt(data, SELECT_FRAC_KEY, None)
    if frac is None:
        frac = float(selected.float().mean().item()) if selected.numel() else 0.0
    num_selected = float(frac) * float(global_bs if global_bs is not None else bs)
    coef = agg_coefficients(
        distill_mask,
        response_mask,
        config.loss_agg_mode,
        num_selected=num_selected,
        batch_num_tokens=_nt(data, "batch_num_tokens", None),
        global_batch_size=global_bs,
        loss_scale_factor=getattr(config, "loss_scale_factor", None),
    )
    per_token = kl * coef.to(kl.dtype) * lam
    metrics = _metrics(kl.detach(), distill_mask, response_mask, selected, lam)
    return per_token, metrics


def _metrics(
    kl: torch.Tensor,
    distill_mask: torch.Tensor,
    response_mask: torch.Tensor,
    selected: torch.Tensor,
    lam: float,
) -> dict[str, float]:
    mean, _ = trajectory_mean_kl(kl, distill_mask)
    n_sel = int(selected.sum().item())
    resp_tokens = float(response_mask.sum().item())
    return {
        "distillation/gta_kl_selected": float(mean[selected].mean().item()) if n_sel else 0.0,
        "distillation/gta_select_frac": float(selected.float().mean().item()) if selected.numel() else 0.0,
        "distillation/gta_token_frac": float(distill_mask.sum().item() / resp_tokens) if resp_tokens else 0.0,
        "distillation/gta_coef": lam,
    }


# Plugin modules that import names from this one may have waited on it (verl imported first from here).
retry_plugin_registration()
