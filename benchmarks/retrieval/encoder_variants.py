"""What a faster encoder would cost in fidelity: fp32 eager vs TorchScript-frozen vs bf16 matmuls.

Usage:
    python -m benchmarks.retrieval.encoder_variants [--step 24] [--queries 40]

Query encoding is the floor of a single retrieval call (≈ 2/3 of it on the bundled KB) and
≈ 95 % of a cold KB build, so both unmet latency targets (quickstart evaluation p50 ≤ 20 ms,
cold build ≤ 60 s) come down to MiniLM's forward on 2 cores. Same process, same weights
(bundled all-MiniLM-L6-v2), ``HFEmbedder.encode`` in every row; the reference is the package's
fp32 eager forward **in the same run**:

* **fp32, TorchScript trace + freeze**: ``torch.jit.trace`` of the Hugging Face model,
  ``torch.jit.freeze`` + ``optimize_for_inference`` (one graph, no Python per op);
* **bf16 matmuls**: ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` (oneDNN
  rounds the matmul inputs to bfloat16, accumulates in fp32; AMX on this CPU).

Columns: single-query ms (p50 over ``--queries`` bundled MuSiQue questions), ms/query
for batches of 8 questions, wall seconds for every ``--step``-th text of the MuSiQue KB
build (passages, entities, triples), and the minimum per-row cosine to the reference
vectors (the issue allows ≥ 0.9999).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np


class FrozenBert:
    """Calls a frozen TorchScript graph the way ``HFEmbedder._forward`` calls the model."""

    def __init__(self, model, tokenizer) -> None:
        import torch

        class _Wrap(torch.nn.Module):
            def __init__(self, m) -> None:
                super().__init__()
                self.m = m

            def forward(self, i, a, t):
                return self.m(input_ids=i, attention_mask=a, token_type_ids=t).last_hidden_state

        ex = tokenizer(["a sentence to trace the encoder with", "short"], padding=True, return_tensors="pt")
        with torch.no_grad():
            traced = torch.jit.trace(
                _Wrap(model).eval(),
                (ex["input_ids"], ex["attention_mask"], torch.zeros_like(ex["input_ids"])),
                strict=False,
            )
            self.graph = torch.jit.optimize_for_inference(torch.jit.freeze(traced))

    def __call__(self, input_ids, attention_mask, token_type_ids=None):
        import torch

        tt = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        return SimpleNamespace(last_hidden_state=self.graph(input_ids, attention_mask, tt))


@contextlib.contextmanager
def variant(enc, name: str, frozen: FrozenBert | None) -> Iterator[None]:
    import torch

    model, prec = enc.model, torch.backends.mkldnn.matmul.fp32_precision
    try:
        if name == "torchscript":
            enc.model = frozen
        elif name == "bf16":
            torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        yield
    finally:
        enc.model = model
        torch.backends.mkldnn.matmul.fp32_precision = prec


def measure(enc, qs: list[str], sample: list[str]) -> dict:
    enc.encode(qs[:8])
    enc.encode(qs[:1])
    single = []
    for q in qs:
        t0 = time.perf_counter()
        enc.encode([q])
        single.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    for s in range(0, len(qs), 8):
        enc.encode(qs[s : s + 8])
    batch8 = (time.perf_counter() - t0) * 1e3 / len(qs)
    t0 = time.perf_counter()
    vecs = enc.encode(sample)
    build_s = time.perf_counter() - t0
    return {
        "single": float(np.median(single)),
        "batch8": batch8,
        "build_s": build_s,
        "q_vecs": enc.encode(qs),
        "vecs": vecs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", type=int, default=24, help="every step-th KB build text")
    ap.add_argument("--queries", type=int, default=40)
    args = ap.parse_args(argv)

    import torch

    from benchmarks.kb.kb_build import build_texts
    from benchmarks.serving.replicas import questions
    from gta_verl.kb.embed import load_embedder

    enc = load_embedder(cache=False)
    texts = build_texts()
    sample, qs = texts[:: args.step], questions()[: args.queries]
    frozen = FrozenBert(enc.model, enc.tokenizer)
    res = {}
    for name in ("fp32", "torchscript", "bf16"):
        with variant(enc, name, frozen):
            res[name] = measure(enc, qs, sample)
        print(name, {k: v for k, v in res[name].items() if "vecs" not in k}, flush=True)
    ref = res["fp32"]
    labels = {
        "fp32": "fp32 eager (today; reference)",
        "torchscript": "fp32, TorchScript trace + freeze",
        "bf16": "bf16 matmuls (oneDNN fp32_precision='bf16')",
    }
    lines = [
        f"\n### Encoder variants: all-MiniLM-L6-v2, torch {torch.get_num_threads()} threads, "
        f"{len(qs)} MuSiQue questions, {len(sample):,} of {len(texts):,} KB build texts "
        f"(every {args.step}th)\n",
        "| encoder | single query ms (p50) | batch 8 ms/query | build sample s | build speed-up | "
        "min cosine to fp32: queries | build texts |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in res.items():
        cq = np.einsum("ij,ij->i", r["q_vecs"], ref["q_vecs"]).min()
        cb = np.einsum("ij,ij->i", r["vecs"], ref["vecs"]).min()
        lines.append(
            f"| {labels[name]} | {r['single']:.1f} | {r['batch8']:.1f} | {r['build_s']:.1f} | "
            f"{ref['build_s'] / r['build_s']:.2f}× | {cq:.6f} | {cb:.6f} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
