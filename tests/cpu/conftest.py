"""Fixtures of the CPU-backend tests: the seeded tiny model the rollout servers load."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def model_path() -> str:
    """Directory of the tiny random Qwen2 model with the real tokenizer (seed 0, cached)."""
    from gta_verl.cpu.tiny_model import build_tiny_model

    return str(build_tiny_model(seed=0))
