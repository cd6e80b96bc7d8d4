"""Tiny model directories built in tests (no real weights): a 13-id BPE tokenizer and a Gemma 3 text model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The 13-id BPE of test_vocab_cut_on_cpu.py: byte pieces 0-1, <pad> 2, <bos> 3, <unused0> 4, then
#: a b c d ab cd abcd ba (5-12).
TOY_VOCAB = ["<0x41>", "<0x42>", "<pad>", "<bos>", "<unused0>", "a", "b", "c", "d", "ab", "cd", "abcd", "ba"]


def toy_tokenizer_json() -> dict[str, Any]:
    vocab = {p: i for i, p in enumerate(TOY_VOCAB)}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": vocab[c],
                "content": c,
                "special": True,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
            }
            for c in ("<pad>", "<bos>", "<unused0>")
        ],
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [["a", "b"], ["c", "d"], ["ab", "cd"], ["b", "a"]],
        },
    }


def toy_tokenizer() -> Any:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(toy_tokenizer_json())),
        bos_token="<bos>",
        pad_token="<pad>",
        eos_token="<pad>",
    )


def write_toy_gemma_weights(out: Path, seed: int = 0) -> Path:
    """``config.json``, ``generation_config.json``, ``model.safetensors`` of a 1-layer Gemma 3 text model."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(
        vocab_size=len(TOY_VOCAB),
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        pad_token_id=2,
        bos_token_id=3,
        eos_token_id=2,
    )
    Gemma3ForCausalLM(cfg).save_pretrained(str(out), safe_serialization=True)
    return out


def write_toy_gemma(out: Path, seed: int = 0) -> Path:
    """A Gemma 3 text model (1 layer, hidden 8) over the toy tokenizer, as ``save_pretrained`` writes it."""
    write_toy_gemma_weights(out, seed)
    toy_tokenizer().save_pretrained(str(out))
    return out


def fake_gemma_build(monkeypatch: Any) -> None:
    """Make :mod:`gta_verl.policies.gemma` build the toy model instead of dequantizing the real GGUF."""
    from gta_verl.policies import gemma

    monkeypatch.setattr(gemma, "gguf_file", lambda: Path("/nonexistent/toy.gguf"))
    monkeypatch.setattr(gemma, "_write_weights", lambda tmp, gguf: write_toy_gemma_weights(tmp))
    monkeypatch.setattr(gemma, "build_tokenizer", lambda gguf=None: toy_tokenizer())
    monkeypatch.setattr(gemma, "source_sha256", lambda: "5" * 64, raising=False)
    # The toy directory stands for Gemma's: the legacy check's config test is the real one's.
    monkeypatch.setattr(gemma, "VOCAB_SIZE", len(TOY_VOCAB), raising=False)
