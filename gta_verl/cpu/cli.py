"""``gta-verl cpu …``: inputs of the CPU backend and the CPU recipes through verl ``main_ppo``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``cpu tiny-model``, ``cpu prepare``, ``cpu run``, ``cpu tool-rows``, ``cpu prompt-rows`` and
    ``cpu vllm-model``."""
    p = subparsers.add_parser("cpu", help="CPU backend for verl main_ppo: tiny model, recipe inputs, recipes")
    sub = p.add_subparsers(dest="cpu_command", metavar="CPU_COMMAND")

    t = sub.add_parser(
        "tiny-model",
        help="write a tiny random Qwen2ForCausalLM + the real Qwen2.5 tokenizer (offline, seeded, cached)",
    )
    t.add_argument("--out", type=Path, default=None, help="model dir (default: $GTA_VERL_CACHE/models/...)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--force", action="store_true", help="rebuild even if the directory is complete")
    t.set_defaults(func=_tiny_model)

    r = sub.add_parser(
        "prepare",
        help="build the CPU recipes' inputs if missing; print them as shell assignments",
    )
    r.add_argument("--root", type=Path, default=None, help="default: $GTA_VERL_CACHE/cpu_recipes")
    r.add_argument("--kb", type=Path, default=None, help="use this KB instead of building root/kb_musique")
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(func=_prepare)

    run = sub.add_parser(
        "run",
        help="run a CPU recipe through verl main_ppo (the bundled recipes/cpu/run.sh; knobs as environment)",
    )
    run.add_argument("recipe", help="gta_stage1 | gta_stage2 | path_router | gta_path_router | turn_grpo")
    run.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides passed to main_ppo")
    run.set_defaults(func=_run)

    a = sub.add_parser(
        "tool-rows",
        help="write PARQUET's rows for verl's tool_agent loop next to it (cached); print the new path",
    )
    a.add_argument("parquet", type=Path)
    a.set_defaults(func=_tool_rows)
    s = sub.add_parser(
        "prompt-rows",
        help="write PARQUET's rows with prompts in STYLE next to it (cached); print the new path",
    )
    s.add_argument("parquet", type=Path)
    s.add_argument("--style", required=True, choices=("instructions", "fewshot"))
    s.set_defaults(func=_prompt_rows)
    v = sub.add_parser(
        "vllm-model",
        help="print MODEL_DIR, or for a tiny policy with 16-wide heads a copy with 32-wide ones "
        "(vLLM's CPU attention; cached); a policy name (gemma-3-270m) is read as its directory",
    )
    v.add_argument("model_dir")
    v.set_defaults(func=_vllm_model)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _prompt_rows(args: argparse.Namespace) -> int:
    from gta_verl.cpu.prepare import prompt_style_parquet

    print(prompt_style_parquet(args.parquet, args.style).resolve())
    return 0


def _vllm_model(args: argparse.Namespace) -> int:
    from gta_verl.cpu.tiny_model import vllm_heads_model
    from gta_verl.policies import resolve_model

    print(vllm_heads_model(resolve_model(args.model_dir)).resolve())
    return 0


def _tiny_model(args: argparse.Namespace) -> int:
    from gta_verl.cpu.tiny_model import build_tiny_model

    print(build_tiny_model(args.out, seed=args.seed, force=args.force))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from gta_verl.cpu.prepare import prepare_cpu_inputs

    print(prepare_cpu_inputs(args.root, args.kb, args.seed).shell())
    return 0


def _run(args: argparse.Namespace) -> int:
    import os
    import subprocess
    import sys

    from gta_verl.bundled import CPU_RUN_SH, require

    env = {**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)}
    return subprocess.call(
        ["bash", str(require(CPU_RUN_SH, "the CPU recipe script")), args.recipe, *args.overrides], env=env
    )


def _tool_rows(args: argparse.Namespace) -> int:
    from gta_verl.cpu.prepare import tool_agent_parquet

    print(tool_agent_parquet(args.parquet).resolve())
    return 0
