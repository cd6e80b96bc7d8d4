"""``gta-verl`` command line: one subcommand group per pipeline stage.

Each stage owns its arguments in ``gta_verl/<stage>/cli.py`` through a function
``add_parser(subparsers) -> None`` that registers one or more subcommands and
sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning
an exit code). A stage module imports only what its arguments need; its heavy
dependencies (an optional backend, verl, Ray) are imported when its command runs, so a
missing optional backend cannot take down unrelated subcommands, while a missing stage
module (a packaging bug) fails every command at once instead of hiding a subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings
from collections.abc import Sequence

# Order = order in ``gta-verl --help``.
STAGE_CLI_MODULES: tuple[str, ...] = (
    "gta_verl.kb.cli",  # kb build | stats | add
    "gta_verl.retrieval.cli",  # retriever serve, eval-retrieval
    "gta_verl.synth.cli",  # synth
    "gta_verl.eval.cli",  # eval
    "gta_verl.quickstart",  # quickstart (the README main job)
    "gta_verl.cpu.cli",  # cpu tiny-model | prepare (CPU backend for verl main_ppo)
    "gta_verl.policies.cli",  # policy prepare | path (pretrained policies by name)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gta-verl",
        description="Graph knowledge base, retrieval environment, trajectory synthesis, "
        "RL recipes and evaluation for LLM search agents on verl.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in STAGE_CLI_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # verl and faiss log per-call INFO lines (tokenizer wiring, loader probing) that bury our tables.
        for noisy in ("verl", "faiss", "httpx"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        # verl probes optional training engines (megatron, veomni, ...) at import and warns for each
        # absent one.
        warnings.filterwarnings("ignore", message=".*engine is not available.*", category=UserWarning)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except Exception as exc:  # bad input the user can fix: one line naming the file, no traceback
        from gta_verl.data.loaders import DataFormatError
        from gta_verl.kb.embed import EmbedderUnavailable
        from gta_verl.kb.store import KBLoadError, KBWriteError
        from gta_verl.policies.model_dir import ModelDirError

        one_line = (KBLoadError, KBWriteError, DataFormatError, EmbedderUnavailable, ModelDirError)
        if not isinstance(exc, one_line) or args.verbose:
            raise
        print(f"gta-verl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
