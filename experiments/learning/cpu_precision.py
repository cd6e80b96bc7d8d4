"""float32 vs bf16 on this CPU: one matmul, and a policy's forward and forward+backward, paired in one run.

Usage:
    python -m experiments.learning.cpu_precision [--policy gemma-3-270m] [--tokens 600] [--rows 2]
        [--threads 1] [--float32-only]

Prints the CPU's bf16 flags (``amx_bf16``, ``avx512_bf16``), then per dtype the median seconds of a
2048×640 @ 640×2048 matmul and of the policy's forward and forward+backward over ``rows`` × ``tokens``
random ids (bf16 = the weights cast to bf16, as FSDP2's ``param_dtype=bf16`` computes), and each ratio to
float32. Decides ``--precision`` of ``experiments.learning.pretrained`` and
``rollout.engine_kwargs.hf_cpu.dtype``: bf16 pays only where the CPU has bf16 units.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def cpu_bf16_flags() -> list[str]:
    """The bf16-relevant flags of ``/proc/cpuinfo`` (empty where it is absent)."""
    info = Path("/proc/cpuinfo")
    flags = set(info.read_text().split()) if info.is_file() else set()
    return sorted(flags & {"amx_bf16", "avx512_bf16", "amx_tile"})


def median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: oneDNN picks its kernels on the first call
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_dtype(path: str, dtype: object, ids: object, repeats: int) -> dict[str, float]:
    """Median seconds of the matmul, the forward and the forward+backward in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    a, w = torch.randn(2048, 640, dtype=dtype), torch.randn(640, 2048, dtype=dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")

    def fwd() -> None:
        with torch.no_grad():
            model(input_ids=ids)

    def fwd_bwd() -> None:
        model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()

    return {
        "matmul": median_s(lambda: a @ w, 10 * repeats),
        "forward": median_s(fwd, repeats),
        "forward+backward": median_s(fwd_bwd, repeats),
    }


def main(argv: list[str] | None = None) -> int:
    import torch

    from gta_verl.policies import resolve_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default="gemma-3-270m")
    p.add_argument("--tokens", type=int, default=600)
    p.add_argument("--rows", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--float32-only",
        action="store_true",
        help="float32 alone, with its rates (matmul GFLOP/s, tokens/s): the floor of a float32 GRPO step",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    flags = cpu_bf16_flags() or "none"
    print(f"CPU bf16 flags: {flags}; torch {torch.__version__}, {args.threads} thread(s)")
    path = resolve_model(args.policy)
    ids = torch.randint(0, 1000, (args.rows, args.tokens))
    dtypes = [("float32", torch.float32)] + ([] if args.float32_only else [("bf16", torch.bfloat16)])
    rows = {name: time_dtype(path, dt, ids, args.repeats) for name, dt in dtypes}
    print(f"\n{args.rows} × {args.tokens} tokens, {Path(path).name}\n")
    if args.float32_only:
        print(rates_table(rows["float32"], args.rows * args.tokens))
        return 0
    print("| | float32 (s) | bf16 (s) | float32 / bf16 |\n|---|---:|---:|---:|")
    for key in rows["float32"]:
        f, b = rows["float32"][key], rows["bf16"][key]
        print(f"| {key} | {f:.4f} | {b:.4f} | {f / b:.3g}× |")
    return 0


#: FLOPs of the 2048×640 @ 640×2048 matmul: 2 · 2048 · 640 · 2048.
MATMUL_FLOP = 2 * 2048 * 640 * 2048


def rates_table(secs: dict[str, float], n_tokens: int) -> str:
    """float32 seconds with their rates: the matmul's GFLOP/s, the passes' tokens per second."""
    lines = ["| float32 | s | rate |", "|---|---:|---:|"]
    lines.append(f"| matmul | {secs['matmul']:.4f} | {MATMUL_FLOP / secs['matmul'] / 1e9:.1f} GFLOP/s |")
    for key in ("forward", "forward+backward"):
        lines.append(f"| {key} | {secs[key]:.4f} | {n_tokens / secs[key]:.0f} tokens/s |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
