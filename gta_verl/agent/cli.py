"""``gta-verl smoke``: the CPU end-to-end RL smoke (:mod:`gta_verl.agent.smoke`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``smoke`` subcommand."""
    p = subparsers.add_parser(
        "smoke",
        help="CPU RL smoke: tiny random Qwen2 through the real agent loop, retriever and reward; one GRPO step",
        description=(
            "N questions x G rollouts of the gta_search_agent loop (tiny random Qwen2, real Qwen2.5 "
            "tokenizer, guided rollouts for a diverse group), the graph retriever on --kb, the "
            "trajectory_guided reward manager, verl's grpo advantages and one vanilla policy-gradient step. "
            "Checks that only generated tokens receive gradient. A smoke of the machinery, not learning."
        ),
    )
    p.add_argument("--kb", required=True, type=Path, help="KB directory (gta-verl kb build)")
    p.add_argument(
        "--data", required=True, type=Path, help="verl parquet (Stage-I or QA rows with gold docs)"
    )
    p.add_argument("--n-questions", type=int, default=4, help="questions N (default 4)")
    p.add_argument("--group", type=int, default=4, help="rollouts per question G (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of markdown")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import logging

    from gta_verl.agent.smoke import run_smoke

    logging.getLogger("verl").setLevel(logging.WARNING)  # one builder line per trajectory otherwise

    try:
        report = run_smoke(args.kb, args.data, args.n_questions, args.group, args.seed)
    except (FileNotFoundError, ValueError) as exc:
        print(f"gta-verl smoke: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.markdown())
    return 0
