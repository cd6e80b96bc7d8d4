"""Packed vs padded scoring of one micro-batch on CPU: the same log-probabilities, and the time each takes.

Usage:
    python -m experiments.learning.packing --policy <model dir> --lengths 700,300,900

Random token rollouts of ``--lengths`` are scored twice by the policy (float32, sdpa, ``use_cache=False`` as
verl's engine calls it): right-padded to the longest with an attention mask (``use_remove_padding=false``),
and concatenated into one row whose position ids restart at 0 for each rollout (``use_remove_padding``).
Prints the largest |Δ log p| of each rollout's next-token log-probabilities and both wall times (after one
untimed warm-up pass, so neither pays the first call's start-up).

    python -m experiments.learning.packing --policy <model dir> --lengths 520x8 --per-pass 1,2,4,8 \
        --padded-per-pass 4,2 --pad-to 1280

times how the same rollouts are best grouped into forward passes (no gradient): ``k`` rollouts per pass
packed into one row (``--per-pass``; ``1`` is verl's ``use_remove_padding`` with micro-batches of one), or
``k`` per pass right-padded to ``--pad-to`` tokens (``--padded-per-pass``, verl without remove-padding).
Each grouping is timed twice and its faster time printed.
"""

from __future__ import annotations

import argparse
import time

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="an HF causal-LM directory (`gta-verl policy path …`)")
    p.add_argument("--lengths", default="700,300,900", help="comma list of rollout lengths in tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-pass", default="", help="comma list: rollouts packed per pass (timing mode)")
    p.add_argument("--padded-per-pass", default="", help="comma list: rollouts padded per pass (timing mode)")
    p.add_argument("--pad-to", type=int, default=1280, help="padded length (prompt + response budget)")
    args = p.parse_args(argv)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    lengths = parse_lengths(args.lengths)
    rollouts = [torch.randint(5, model.config.vocab_size, (n,)) for n in lengths]
    if args.per_pass or args.padded_per_pass:
        return time_groupings(model, rollouts, args)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rollouts):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        model(input_ids=rollouts[0][None], use_cache=False)  # warm-up, untimed
        t0 = time.perf_counter()
        padded = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.log_softmax(-1)
        t1 = time.perf_counter()
        packed = model(input_ids=torch.cat(rollouts)[None], position_ids=positions, use_cache=False)
        t2 = time.perf_counter()
    packed_lp = packed.logits[0].log_softmax(-1)
    start, diffs = 0, []
    for i, r in enumerate(rollouts):
        nxt = r[1:, None]
        a = padded[i, : len(r) - 1].gather(-1, nxt)
        b = packed_lp[start : start + len(r) - 1].gather(-1, nxt)
        diffs.append(float((a - b).abs().max()))
        start += len(r)
    print(f"max |Δ log p| per rollout: {', '.join(f'{d:.2g}' for d in diffs)}")
    print(f"padded {t1 - t0:.2f} s ({ids.numel()} tokens), packed {t2 - t1:.2f} s ({sum(lengths)} tokens)")
    return 0


def parse_lengths(spec: str) -> list[int]:
    """``"700,300,900"`` or ``"520x8"`` (eight rollouts of 520 tokens), mixable: ``"520x2,900"``."""
    out: list[int] = []
    for part in spec.split(","):
        n, _, times = part.partition("x")
        out += [int(n)] * (int(times) if times else 1)
    return out


def groups(items: list, k: int) -> list[list]:
    """``items`` in consecutive groups of ``k`` (the last may be shorter)."""
    if k < 1:
        raise ValueError(f"rollouts per pass must be >= 1, got {k}")
    return [items[i : i + k] for i in range(0, len(items), k)]


def time_groupings(model: torch.nn.Module, rollouts: list[torch.Tensor], args: argparse.Namespace) -> int:
    """Forward passes (no gradient) over ``rollouts`` grouped each way asked; prints seconds per grouping."""

    def packed(k: int) -> None:
        for g in groups(rollouts, k):
            pos = torch.cat([torch.arange(len(r)) for r in g])[None]
            model(input_ids=torch.cat(g)[None], position_ids=pos, use_cache=False)

    def padded(k: int) -> None:
        for g in groups(rollouts, k):
            ids = torch.zeros(len(g), args.pad_to, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, r in enumerate(g):
                ids[i, : len(r)], mask[i, : len(r)] = r, 1
            model(input_ids=ids, attention_mask=mask, use_cache=False)

    def best_of_two(run, k: int) -> float:
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            run(k)
            times.append(time.perf_counter() - t0)
        return min(times)

    real = sum(len(r) for r in rollouts)
    with torch.no_grad():
        packed(1)  # warm-up, untimed
        for k in (int(x) for x in args.per_pass.split(",") if x):
            print(f"packed, {k} per pass: {best_of_two(packed, k):.2f} s ({real} real tokens)", flush=True)
        for k in (int(x) for x in args.padded_per_pass.split(",") if x):
            t = best_of_two(padded, k)
            print(f"padded to {args.pad_to}, {k} per pass: {t:.2f} s ({real} real tokens)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
