"""Parse the command blocks a recipe script prints under ``DRY_RUN=1`` (``recipes/lib.sh``)."""

from __future__ import annotations


def command_blocks(stdout: str) -> list[list[str]]:
    """Split ``DRY_RUN`` output into commands: one argument per line, each command ended by ``----``."""
    blocks, current = [], []
    for line in stdout.splitlines():
        if line == "----":
            blocks.append(current)
            current = []
        else:
            current.append(line)
    assert not current, f"unterminated command block: {current}"
    return blocks
