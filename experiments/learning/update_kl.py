"""How far one policy-gradient update moves the policy, per step size: Adam's first step against SGD.

Usage:
    python -m experiments.learning.update_kl --dump DIR/1.tokens.pt --model MODEL_DIR [--adam 1e-4,3e-4,1e-3]
                                   [--sgd 0.03,0.1,0.3,1]

``--dump`` is one GRPO step's token layout as ``gta_sync`` writes it next to verl's rollout dump
(``trainer.rollout_data_dir``; the learning regression check writes one); ``--model`` the policy that
generated it. The GRPO surrogate of verl's ``seq-mean-token-mean`` aggregation,

    J(θ) = (1/N) Σ_i A_i · mean_{t: mask=1} log π_θ(y_t | y_<t),

is differentiated once; each row applies one update and reports, on the rollouts' own policy tokens, the
mean per-token KL(π_θ ‖ π_θ') and the surrogate's gain J(θ') − J(θ). Adam's first step is lr · sign(g)
(m̂ = g, v̂ = g², eps ≪ |g|) for every parameter with a gradient, however small; SGD's is lr · g, the
reference in the same table: compare the rows at equal KL (the last column, gain per unit of KL).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from gta_verl.eval.learning_probe import sequence_advantage


def _rows(dump: dict[str, Any]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]]:
    rows = []
    for p, r, m, a in zip(
        dump["prompts"], dump["responses"], dump["response_mask"], dump["advantages"], strict=True
    ):
        mask = torch.tensor(m, dtype=torch.bool)
        if mask.any():
            rows.append((torch.tensor(p), torch.tensor(r), mask, sequence_advantage(a, m)))
    return rows


def _log_probs(model: Any, prompt: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """[R, V] log π over the vocabulary at each response position."""
    logits = model(torch.cat([prompt, response])[None]).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1)


def surrogate_gradient(model: Any, rows: Sequence[tuple]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """∇J at θ and each row's [R, V] log-probs at θ (detached)."""
    model.zero_grad()
    before = []
    for prompt, response, mask, adv in rows:
        lp = _log_probs(model, prompt, response)
        (adv * lp.gather(-1, response[:, None])[:, 0][mask].mean() / len(rows)).backward()
        before.append(lp.detach())
    return [p.grad.detach().clone() for p in model.parameters()], before


@torch.no_grad()
def step_effect(model: Any, rows: Sequence[tuple], before: list[torch.Tensor], delta: list[torch.Tensor]):
    """(mean per-token KL(π_θ ‖ π_θ+Δ) on policy tokens, J(θ+Δ) − J(θ)); θ is restored."""
    params = list(model.parameters())
    saved = [p.detach().clone() for p in params]
    for p, d in zip(params, delta, strict=True):
        p.add_(d)
    kls, gain = [], 0.0
    for (prompt, response, mask, adv), lp0 in zip(rows, before, strict=True):
        lp1 = _log_probs(model, prompt, response)
        kls.append((lp0.exp() * (lp0 - lp1)).sum(-1)[mask])
        gain += adv * float((lp1 - lp0).gather(-1, response[:, None])[:, 0][mask].mean()) / len(rows)
    for p, s in zip(params, saved, strict=True):
        p.copy_(s)
    return float(torch.cat(kls).mean()), gain


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", required=True, type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adam", default="1e-4,3e-4,1e-3")
    ap.add_argument("--sgd", default="0.03,0.1,0.3,1")
    args = ap.parse_args(argv)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    rows = _rows(torch.load(args.dump, weights_only=False))
    grad, before = surrogate_gradient(model, rows)
    norm = float(torch.sqrt(sum((g**2).sum() for g in grad)))
    print(f"{len(rows)} rollouts, {sum(int(r[2].sum()) for r in rows)} policy tokens, |∇J| = {norm:.3g}\n")
    print(
        "| update | step size | KL per policy token | surrogate gain | gain / KL |\n|---|---:|---:|---:|---:|"
    )
    for name, sizes, direction in (
        ("Adam, first step (lr · sign g)", args.adam, [torch.sign(g) for g in grad]),
        ("SGD (lr · g)", args.sgd, grad),
    ):
        for lr in (float(x) for x in sizes.split(",")):
            kl, gain = step_effect(model, rows, before, [lr * d for d in direction])
            print(f"| {name} | {lr:g} | {kl:.4f} | {gain:.4f} | {gain / kl:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
