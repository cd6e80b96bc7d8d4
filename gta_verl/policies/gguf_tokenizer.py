"""A SentencePiece-BPE tokenizer rebuilt from a GGUF file's own ``tokenizer.ggml.*`` metadata.

Why not ``AutoTokenizer.from_pretrained(dir, gguf_file=…)``: under the transformers that verl 0.9.1 allows
(< 5.11) the Gemma GGUF path builds a *Unigram* model over the BPE scores, which splits ``"the"`` into
``▁t`` + ``he`` and, after a save/reload, into single characters; the (correct) weights then print garbage
(``docs/policies.md``, why the tokenizer is rebuilt). Gemma's tokenizer is SentencePiece **BPE** with byte
fallback and no prefix space. What the GGUF holds, and how it maps onto a ``tokenizers`` BPE:

* ``tokens`` in id order. The file spells a run of two or more spaces with real spaces while every other
  piece writes a space as ``▁`` (the normalizer's output), so those runs are respelled ``▁…▁``;
* no ``merges``: they are implied by the vocabulary. Every split of a piece into two pieces of the
  vocabulary is a merge, ranked by the merged piece's position in the file (Gemma's ``scores`` are
  -1000 for every control piece and do not follow the merge order; the position does);
* ``token_type``: 3 = control (``<bos>``, ``<start_of_turn>``, ``<unusedN>``) → special added tokens;
  4 = user-defined (``\\n``, ``\\n\\n``, HTML tags, tab runs) → plain added tokens, matched whole before BPE,
  as SentencePiece does; 6 = byte pieces ``<0x00>``…``<0xFF>`` (the byte fallback);
* the special ids (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3) and ``add_bos_token``.

The result is checked in the tests against hand-written tokenizations; on this repository's corpus it also
equals transformers 5.25's (fixed) GGUF conversion, token for token (docs/policies.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "GGUFVocab",
    "TOKEN_CONTROL",
    "TOKEN_BYTE",
    "TOKEN_USER_DEFINED",
    "bpe_tokenizer",
    "read_gguf_vocab",
]

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # "▁", SentencePiece's visible space


@dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer fields of a GGUF file (``tokenizer.ggml.*``), in id order."""

    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    bos_id: int
    eos_id: int
    unk_id: int
    pad_id: int
    add_bos: bool
    model: str = "llama"

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.token_types):
            raise ValueError(f"{len(self.tokens)} tokens but {len(self.token_types)} token types")
        for name in ("bos_id", "eos_id", "unk_id", "pad_id"):
            if not 0 <= getattr(self, name) < len(self.tokens):
                raise ValueError(f"{name}={getattr(self, name)} outside the vocabulary of {len(self.tokens)}")

    def token(self, name: str) -> str:
        """The piece of ``bos``, ``eos``, ``unk`` or ``pad``."""
        return self.tokens[getattr(self, f"{name}_id")]


def _field(reader: Any, key: str, path: Path) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise ValueError(f"{path}: GGUF has no {key!r}; it does not describe a SentencePiece tokenizer")
    return field


def read_gguf_vocab(path: str | Path) -> GGUFVocab:
    """Read the tokenizer metadata of a GGUF file (``gguf.GGUFReader``, memory-mapped; ~15 s at 262k)."""
    from gguf import GGUFReader

    path = Path(path)
    reader = GGUFReader(str(path))
    model = bytes(_field(reader, "tokenizer.ggml.model", path).parts[-1]).decode()
    if model != "llama":
        raise ValueError(
            f"{path}: tokenizer.ggml.model is {model!r}; only SentencePiece ('llama') is read here"
        )
    tokens = _field(reader, "tokenizer.ggml.tokens", path)
    types = _field(reader, "tokenizer.ggml.token_type", path)

    def scalar(key: str, default: Any = None) -> Any:
        field = reader.fields.get(key)
        if field is None:
            if default is None:
                raise ValueError(f"{path}: GGUF has no {key!r}")
            return default
        return field.parts[field.data[0]].tolist()[0]

    return GGUFVocab(
        tokens=tuple(bytes(tokens.parts[i]).decode("utf-8") for i in tokens.data),
        token_types=tuple(int(types.parts[i][0]) for i in types.data),
        bos_id=int(scalar("tokenizer.ggml.bos_token_id")),
        eos_id=int(scalar("tokenizer.ggml.eos_token_id")),
        unk_id=int(scalar("tokenizer.ggml.unknown_token_id")),
        pad_id=int(scalar("tokenizer.ggml.padding_token_id")),
        add_bos=bool(scalar("tokenizer.ggml.add_bos_token", False)),
    )


def respell(token: str) -> str:
    """A piece as the BPE model looks it up: a run of real spaces becomes the same run of ``▁``.

    >>> respell("   "), respell("▁the"), respell("\\n")
    ('▁▁▁', '▁the', '\\n')
    """
    return SPACE * len(token) if len(token) > 1 and not token.strip(" ") else token


def implied_merges(pieces: Sequence[str], skip: frozenset[int] = frozenset()) -> list[tuple[str, str]]:
    """Every merge the vocabulary implies, best first.

    A merge is a split of piece ``p`` into two pieces ``(l, r)`` that are both in the vocabulary; merges
    rank by ``p``'s position (lower id = merged earlier), and the splits of one piece by longer left part
    first. ``skip`` ids (control, user-defined, byte pieces) neither merge nor are merged.

    >>> implied_merges(["a", "b", "c", "ab", "abc", "bc"])
    [('a', 'b'), ('ab', 'c'), ('a', 'bc'), ('b', 'c')]
    """
    index = {p: i for i, p in enumerate(pieces) if i not in skip}
    merges: list[tuple[str, str]] = []
    for i, piece in enumerate(pieces):
        if i in skip:
            continue
        for cut in range(len(piece) - 1, 0, -1):
            left, right = piece[:cut], piece[cut:]
            if left in index and right in index:
                merges.append((left, right))
    return merges


def bpe_tokenizer(vocab: GGUFVocab) -> Any:
    """A ``tokenizers.Tokenizer`` equal to the SentencePiece BPE the GGUF describes.

    Normalizer ``" " → "▁"``, no prefix space, BPE with byte fallback and fused unknowns, control pieces as
    special added tokens, user-defined pieces as plain added tokens (both matched before normalization),
    ``<bos>`` prepended by the post-processor when the file says so, and a decoder that undoes ``▁`` and the
    byte pieces.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    pieces = [respell(t) for t in vocab.tokens]
    # A respelled space run is an ordinary BPE piece now (the normalizer writes "▁"), not an added token.
    added = {
        i
        for i, ty in enumerate(vocab.token_types)
        if ty == TOKEN_CONTROL or (ty == TOKEN_USER_DEFINED and pieces[i] == vocab.tokens[i])
    }
    byte_ids = {i for i, ty in enumerate(vocab.token_types) if ty == TOKEN_BYTE}
    merges = implied_merges(pieces, skip=frozenset(added | byte_ids))
    backend = Tokenizer(
        models.BPE(
            vocab={p: i for i, p in enumerate(pieces)},
            merges=merges,
            unk_token=vocab.token("unk"),
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    backend.normalizer = normalizers.Replace(" ", SPACE)
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    backend.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    backend.add_special_tokens(
        [
            AddedToken(pieces[i], normalized=False, special=True)
            for i in sorted(added)
            if vocab.token_types[i] == TOKEN_CONTROL
        ]
    )
    backend.add_tokens(
        [
            AddedToken(pieces[i], normalized=False, special=False)
            for i in sorted(added)
            if vocab.token_types[i] == TOKEN_USER_DEFINED
        ]
    )
    if vocab.add_bos:
        bos = vocab.token("bos")
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab.bos_id)]
        )
    if backend.get_vocab_size() != len(pieces):
        raise RuntimeError(f"rebuilt tokenizer has {backend.get_vocab_size()} ids, the GGUF {len(pieces)}")
    return backend
