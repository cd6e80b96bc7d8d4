"""λ(step) for the selective teacher KL — pure Python.

Paper: PathRouter §3.4/§4.5 (Table 4): warmup scheduling beats a constant λ, which lets
the KL dominate early training and inflates the number of turns.
"""

from __future__ import annotations

import math

from gta_verl.rewards.path_router import PathRouterKLConfig

__all__ = ["warmup_lambda"]


def warmup_lambda(step: int, cfg: PathRouterKLConfig) -> float:
    """λ at training step ``step`` (verl's ``global_steps`` starts at 1).

    * "constant": λ = λ_max;
    * "linear":   λ = λ_max · min(1, step / W);
    * "cosine":   λ = λ_max · (1 − cos(π · min(1, step / W))) / 2;
    * ``W = warmup_steps = 0`` means no warmup; ``enabled=False`` gives 0.

    Examples:
        >>> cfg = PathRouterKLConfig(lambda_max=0.2, warmup_steps=10)
        >>> warmup_lambda(0, cfg), warmup_lambda(5, cfg), warmup_lambda(50, cfg)
        (0.0, 0.1, 0.2)
    """
    if not cfg.enabled:
        return 0.0
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if cfg.schedule == "constant" or cfg.warmup_steps == 0:
        return float(cfg.lambda_max)
    frac = min(1.0, step / cfg.warmup_steps)
    if cfg.schedule == "linear":
        return float(cfg.lambda_max * frac)
    return float(cfg.lambda_max * 0.5 * (1.0 - math.cos(math.pi * frac)))
