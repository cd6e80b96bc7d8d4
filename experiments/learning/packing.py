"""Packed vs padded scoring of one micro-batch on CPU: the same log-probabilities, and the time each takes.

Usage:
    python -m experiments.learning.packing --policy <model dir> --lengths 700,300,900

Random token rollouts of ``--lengths`` are scored twice by the policy (float32, sdpa, ``use_cache=False`` as
verl's engine calls it): right-padded to the longest with an attention mask (``use_remove_padding=false``),
and concatenated into one row whose position ids restart at 0 for each rollout (``use_remove_padding``).
Prints the largest |Δ log p| of each rollout's next-token log-probabilities and both wall times (after one
untimed warm-up pass, so neither pays the first call's start-up).
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
    args = p.parse_args(argv)
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.policy, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    lengths = [int(n) for n in args.lengths.split(",")]
    rollouts = [torch.randint(5, model.config.vocab_size, (n,)) for n in lengths]
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


if __name__ == "__main__":
    raise SystemExit(main())
