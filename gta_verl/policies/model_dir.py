"""Hugging Face model directories written whole or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

#: Files whose presence marks a complete model directory.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def is_complete(path: Path, required: Sequence[str] = REQUIRED_FILES) -> bool:
    return all((path / name).is_file() for name in required)


def write_model_dir(
    target: Path, write: Callable[[Path], object], required: Sequence[str] = REQUIRED_FILES
) -> Path:
    """Run ``write`` into a temp dir beside ``target`` and rename it there: no reader sees half a model."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except OSError:
        if not is_complete(target, required):  # a racing builder did not finish either
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
