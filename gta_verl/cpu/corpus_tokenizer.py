"""A small byte-level BPE tokenizer trained on the bundled corpus, for the CPU warm-start policy.

Why not the real Qwen2.5 vocabulary: with 151,646 tokens the LM head and its log-softmax are almost all of a
CPU step (a verl SFT step on 4 conversations took 12.5 s, ``docs/verl_on_cpu.md``) and a
10 M-parameter model spends nearly all its parameters on embeddings. A 4,096-token BPE trained on the same
text the policy reads and writes keeps the Qwen2 pre-tokenizer (so the action tags split as in Qwen2.5),
the three ChatML specials and the Qwen2.5 chat template; the protocol tags are single tokens so the policy
can learn to open and close them in one step. Training is deterministic for a given text list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gta_verl.agent.tokenizer import QWEN25_CHAT_TEMPLATE, SPECIAL_TOKENS
from gta_verl.protocol import ANSWER_CLOSE, ANSWER_OPEN, INFO_CLOSE, INFO_OPEN, SEARCH_CLOSE, SEARCH_OPEN

#: Tags written as one token each (not "special": decoding with skip_special_tokens keeps them).
PROTOCOL_TOKENS = (
    "<think>",
    "</think>",
    SEARCH_OPEN,
    SEARCH_CLOSE,
    ANSWER_OPEN,
    ANSWER_CLOSE,
    INFO_OPEN,
    INFO_CLOSE,
)
DEFAULT_VOCAB = 4096


def train_corpus_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB) -> Any:
    """Train a Qwen2-style byte-level BPE on ``texts``.

    Args:
        texts: Training text (passages, prompts, reference turns).
        vocab_size: Total size including the 256 byte tokens, specials and protocol tags.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``<|endoftext|>`` = 0, ``<|im_start|>`` = 1,
        ``<|im_end|>`` = 2 (eos), pad ``<|endoftext|>`` and the Qwen2.5 ChatML template.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    backend = Tokenizer(models.BPE(byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(PROTOCOL_TOKENS),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    backend.add_tokens(
        [
            AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=False)
            for t in PROTOCOL_TOKENS
        ]
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=backend)
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|endoftext|>"
    tok.chat_template = QWEN25_CHAT_TEMPLATE
    tok.model_max_length = 32768
    if tuple(tok.convert_tokens_to_ids(list(SPECIAL_TOKENS))) != (0, 1, 2):
        raise RuntimeError("corpus tokenizer: specials did not get ids 0, 1, 2")
    return tok
