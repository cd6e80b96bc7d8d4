"""Route-weighted GRPO advantages — pure torch.

Paper: PathRouter §3.2, ``Ã(τ_i) = w_route(C_i, P_i) · Â(τ_i)``, applied *after* GRPO's
group normalization (so the weight rescales the update magnitude without changing
which trajectories are above or below their group's mean).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gta_verl.rewards.path_router import ROUTE_NAMES

__all__ = ["apply_route_weights", "checked_route_weights", "route_metrics", "unsupported_answer_rate"]


def checked_route_weights(weights: torch.Tensor) -> torch.Tensor:
    """``weights`` unchanged if every one is finite and >= 0.

    A NaN or infinite weight would turn a trajectory's advantage into NaN/inf and, through the loss, every
    parameter; a negative one would reverse the update. Both can only come from a broken manager or config,
    so they are refused here, before any advantage is touched.

    Raises:
        ValueError: naming the first rows with such a weight.
    """
    w = torch.as_tensor(weights, dtype=torch.float64)
    bad = ~torch.isfinite(w) | (w < 0)
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        shown = ", ".join(f"row {r}: {float(w[r])!r}" for r in rows[:5])
        raise ValueError(
            f"route weights must be finite and >= 0 ({len(rows)} are not; {shown}); "
            "check gta.path_router.route_weights and the reward manager's route_weight"
        )
    return weights


def apply_route_weights(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Ã_i = w_i · Â_i.

    Args:
        advantages: Â, shape [bs, T] (zero on masked tokens already).
        weights: w_route per trajectory, shape [bs].

    Returns:
        Ã, shape [bs, T], same dtype as ``advantages``. With every weight 1 the result is
        bit-identical to the input (multiplication by 1.0 is exact in IEEE arithmetic).

    Raises:
        ValueError: a NaN, infinite or negative weight (:func:`checked_route_weights`).
    """
    if advantages.dim() != 2:
        raise ValueError(f"advantages must be [bs, T], got shape {tuple(advantages.shape)}")
    weights = torch.as_tensor(
        checked_route_weights(weights), dtype=advantages.dtype, device=advantages.device
    )
    if weights.shape != advantages.shape[:1]:
        raise ValueError(
            f"route weights shape {tuple(weights.shape)} does not match batch size {advantages.shape[0]}"
        )
    return advantages * weights.unsqueeze(-1)


def route_metrics(
    routes: Sequence[int] | torch.Tensor, weights: Sequence[float] | torch.Tensor
) -> dict[str, float]:
    """Per-step route shares and the mean weight.

    Returns keys ``path_router/route_share/{C+P+,C+P-,C-P+,C-P-}`` (fractions summing to 1)
    and ``path_router/mean_route_weight``; an empty batch gives zeros.
    """
    routes_t = torch.as_tensor(routes, dtype=torch.long).flatten()
    weights_t = torch.as_tensor(weights, dtype=torch.float64).flatten()
    n = int(routes_t.numel())
    out: dict[str, float] = {}
    for rid, name in enumerate(ROUTE_NAMES):
        out[f"path_router/route_share/{name}"] = float((routes_t == rid).sum().item() / n) if n else 0.0
    out["path_router/mean_route_weight"] = float(weights_t.mean().item()) if n else 0.0
    return out


def unsupported_answer_rate(
    c: torch.Tensor, p: torch.Tensor, has_gold: torch.Tensor, theta_p: float
) -> float:
    """UAR = |{i : C_i = 1 ∧ P_i < θ_P}| / |{i : C_i = 1}| over trajectories with gold evidence.

    PathRouter §4.1 (lower is better): the share of correct answers whose trajectory is
    evidence-poor. Computed from C and P directly, not from the route, so it is the same
    under every routing ablation (``answer_only`` never produces route C↑P↓). Trajectories
    without gold evidence have no P and are left out, as in the evaluation's UAR
    (:func:`gta_verl.eval.metrics.unsupported_answer_rate`).

    Args:
        c: C_i ∈ {0, 1}, shape [bs].
        p: P_i, shape [bs].
        has_gold: 1 where the row has gold evidence texts, shape [bs].
        theta_p: θ_P.

    Returns:
        UAR in [0, 1]; 0.0 when no trajectory with gold evidence is correct.
    """
    correct = (torch.as_tensor(c) > 0) & (torch.as_tensor(has_gold) > 0)
    n = int(correct.sum().item())
    if n == 0:
        return 0.0
    poor = correct & (torch.as_tensor(p, dtype=torch.float64) < theta_p)
    return float(poor.sum().item()) / n
