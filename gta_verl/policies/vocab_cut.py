"""Cut a SentencePiece-BPE policy's vocabulary to the pieces a corpus and its prompts use.

Why: Gemma-3-270M's 262,144-row tied embedding is 168 M of its 268 M parameters, and on a CPU its logits
(4.3 GB in fp32 for 4,096 tokens) dominate a GRPO step's memory and time
(``docs/policies.md``, the vocabulary cut: 8 × 512 tokens ran out of 24 GB). A search agent over one
corpus reads and writes a small part of that vocabulary.

What is kept (:func:`kept_ids`): every id the given texts tokenize to, every character and every piece on the
BPE derivation of a kept piece (so the merges that build it still fire), the 256 byte pieces (any text stays
encodable by byte fallback), the named special and user-defined pieces. The cut tokenizer keeps exactly the
merges among kept pieces, in the same order, so it tokenizes every given text to the same pieces as the full
one (checked when the cut is built) and **can never emit a dropped id**: its vocabulary is the model's. The
model keeps the matching rows of the tied embedding, so its logits over the kept ids equal the full model's (a
test), and sampling renormalizes over the kept ids.

Proof sketch of "same pieces": BPE applies, at each step, the lowest-ranked merge among adjacent pairs. Every
merge the full tokenizer applies on a given text builds a piece on the derivation of an output piece, so it
is kept, with its relative rank; a dropped merge was never applied, so (BPE runs until no merge applies) it
never became applicable; the cut tokenizer therefore applies the same merges in the same order.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl.policies.model_dir import (
    MANIFEST,
    REQUIRED_FILES,
    ModelDirError,
    ModelKind,
    config_model_type,
    digest_text,
    dir_problem,
    ensure_model_dir,
    files_digest,
    read_json,
    read_manifest,
    sha256_file,
)

log = logging.getLogger(__name__)

__all__ = ["bpe_derivation", "cut_model", "cut_tokenizer_json", "kept_ids", "policy_texts", "source_identity"]

CUT_VERSION = 1
#: ``model_type``s the cut is built and tested for (BPE ``tokenizer.json``, tied embeddings scaled in place).
CUT_MODEL_TYPES = ("gemma3_text",)
#: Control pieces kept by name (the rest, ``<unusedN>`` and image markers, are dropped).
KEEP_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>")


def bpe_derivation(piece: str, ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """The pieces BPE builds on the way from ``piece``'s characters to ``piece`` (lowest rank first, ties
    leftmost, as ``tokenizers`` does), in order of creation.

    >>> bpe_derivation("abc", {("b", "c"): 0, ("a", "bc"): 1, ("a", "b"): 2})
    ['bc', 'abc']
    """
    syms, built = list(piece), []
    while len(syms) > 1:
        best: tuple[int, int] | None = None
        for k in range(len(syms) - 1):
            rank = ranks.get((syms[k], syms[k + 1]))
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, k)
        if best is None:
            break
        k = best[1]
        syms[k : k + 2] = [syms[k] + syms[k + 1]]
        built.append(syms[k])
    return built


def _pair(merge: str | Sequence[str]) -> tuple[str, str]:
    """A merge as ``tokenizer.json`` stores it (``["l", "r"]``, or ``"l r"`` in older files)."""
    left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
    return left, right


def kept_ids(
    model_json: Mapping[str, Any], added: Sequence[Mapping[str, Any]], used: Iterable[int]
) -> list[int]:
    """Ids to keep, ascending: ``used`` + their BPE derivations + byte pieces + named specials + user-defined.

    Args:
        model_json: The ``model`` object of a ``tokenizer.json`` (BPE: ``vocab``, ``merges``).
        added: Its ``added_tokens`` list.
        used: Ids the texts tokenize to.
    """
    vocab: dict[str, int] = model_json["vocab"]
    pieces = {i: p for p, i in vocab.items()}
    ranks = {_pair(m): r for r, m in enumerate(model_json["merges"])}
    keep = set(used)
    for i in list(keep):
        if i in pieces:
            # The characters BPE starts from, then every piece it builds on the way to this one.
            steps = [*pieces[i], *bpe_derivation(pieces[i], ranks)]
            keep.update(vocab[p] for p in steps if p in vocab)
    keep.update(i for p, i in vocab.items() if len(p) == 6 and p.startswith("<0x") and p.endswith(">"))
    for tok in added:
        if tok["content"] in KEEP_SPECIALS or not tok["special"]:
            keep.add(int(tok["id"]))
    return sorted(keep)


def cut_tokenizer_json(tokenizer_json: Mapping[str, Any], kept: Sequence[int]) -> dict[str, Any]:
    """A ``tokenizer.json`` over the ``kept`` ids only, renumbered ``0 … len(kept) - 1`` in the same order."""
    new_id = {old: new for new, old in enumerate(kept)}
    model = dict(tokenizer_json["model"])
    vocab = {p: new_id[i] for p, i in model["vocab"].items() if i in new_id}
    merges = []
    for m in model["merges"]:
        left, right = _pair(m)
        if left in vocab and right in vocab and left + right in vocab:
            merges.append([left, right])
    model.update(vocab=vocab, merges=merges)
    added = [dict(t, id=new_id[t["id"]]) for t in tokenizer_json["added_tokens"] if t["id"] in new_id]
    out = dict(tokenizer_json, model=model, added_tokens=added)
    post = out.get("post_processor")
    if post and post.get("type") == "TemplateProcessing":
        specials = {k: dict(v, ids=[new_id[i] for i in v["ids"]]) for k, v in post["special_tokens"].items()}
        out["post_processor"] = dict(post, special_tokens=specials)
    return out


def _texts_digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()


def _legacy_cut(path: Path) -> bool:
    policy = read_json(path / "gta_policy.json")
    return isinstance(policy, dict) and "cut_version" in policy


def cut_kind(model_type: str | None) -> ModelKind:
    """A cut directory of a ``model_type`` source (one written before manifests is rebuilt: the digest of
    its source is unknown)."""
    return ModelKind(f"vocab-cut-v{CUT_VERSION}", model_type, legacy=_legacy_cut)


def source_identity(source: Path) -> tuple[str, str]:
    """(``model_type``, sha256 of its files) of a cut's source; :class:`ModelDirError` (one line naming the
    file) for a source the cut cannot use: damaged against its manifest, another ``model_type``, a
    ``tokenizer.json`` that is not a BPE over the model's ids."""
    if not source.is_dir():
        raise ModelDirError(f"{source}: not a model directory")
    if (source / MANIFEST).exists():
        problem = dir_problem(source)
        if problem:
            raise ModelDirError(
                f"{problem}; repair the source (for a policy name: gta-verl policy prepare NAME --force)"
            )
        files = dict(read_manifest(source)["files"])
    else:
        missing = [f for f in REQUIRED_FILES if not (source / f).is_file()]
        if missing:
            raise ModelDirError(f"{source}: not a model directory (no {', '.join(missing)})")
        files = {p.name: sha256_file(p) for p in sorted(source.iterdir()) if p.is_file()}
    model_type = config_model_type(source)
    if model_type not in CUT_MODEL_TYPES:
        raise ModelDirError(
            f"{source / 'config.json'}: model_type {model_type!r}; the vocabulary cut supports "
            f"{', '.join(CUT_MODEL_TYPES)}"
        )
    cfg = read_json(source / "config.json")
    tok = read_json(source / "tokenizer.json")
    model = tok.get("model") if isinstance(tok, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ModelDirError(f"{source / 'tokenizer.json'}: not a BPE tokenizer.json")
    ids = [*model["vocab"].values(), *(t.get("id", -1) for t in tok.get("added_tokens") or [])]
    n_ids = max(ids) + 1 if ids else 0
    if n_ids != cfg.get("vocab_size"):
        raise ModelDirError(
            f"{source / 'tokenizer.json'}: {n_ids} ids, config.json's vocab_size is {cfg.get('vocab_size')} "
            "(another model's tokenizer?)"
        )
    return model_type, files_digest(files)


def _cut_tokenizer(source: Path, texts: Sequence[str]) -> tuple[Any, list[int]]:
    """(cut ``PreTrainedTokenizerFast``, kept old ids); raises if any text tokenizes differently."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    full = AutoTokenizer.from_pretrained(str(source))
    full_json = json.loads(full.backend_tokenizer.to_str())
    encoded = [full(t, add_special_tokens=False).input_ids for t in texts]
    kept = kept_ids(full_json["model"], full_json["added_tokens"], {i for ids in encoded for i in ids})
    backend = Tokenizer.from_str(json.dumps(cut_tokenizer_json(full_json, kept)))
    cut = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        **{k: getattr(full, k) for k in ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")},
        model_max_length=full.model_max_length,
    )
    cut.chat_template = full.chat_template
    for text, ids in zip(texts, encoded, strict=True):
        again = [kept[i] for i in cut(text, add_special_tokens=False).input_ids]
        if again != ids:
            raise RuntimeError(f"cut tokenizer splits {text[:60]!r} differently from the full one")
    return cut, kept


def _cut_weights(source: Path, kept: Sequence[int], tmp: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32)
    emb: Any = model.get_input_embeddings()
    # Slice in place: Gemma's embedding module scales by sqrt(hidden), a plain nn.Embedding would not.
    emb.weight = torch.nn.Parameter(emb.weight.data[torch.tensor(list(kept))].clone())
    emb.num_embeddings = len(kept)
    head: Any = model.get_output_embeddings()
    head.weight = emb.weight
    new_id = {old: new for new, old in enumerate(kept)}
    for cfg in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        cfg.vocab_size = len(kept)
        for key in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
            if isinstance(getattr(cfg, key, None), int):
                setattr(cfg, key, new_id[getattr(cfg, key)])
    gen = model.generation_config
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(gen, key, None)
        if isinstance(value, int):
            setattr(gen, key, new_id[value])
        elif isinstance(value, list):
            setattr(gen, key, [new_id[v] for v in value if v in new_id])
    model.save_pretrained(str(tmp), safe_serialization=True)


def cut_model(source: str | Path, texts: Sequence[str], out: str | Path | None = None) -> Path:
    """Write (or reuse) ``source`` with its vocabulary cut to what ``texts`` need; return the directory.

    Args:
        source: A model directory with a BPE ``tokenizer.json`` and tied embeddings (e.g. Gemma-3-270M's),
            its ``model_type`` one of :data:`CUT_MODEL_TYPES`.
        texts: Everything the policy will read and write (passages, prompts, questions, answers).
        out: Target directory (default ``<source>-cut<N>-<digest of texts and source>`` beside ``source``):
            missing, empty or a cut directory.

    Returns:
        The directory; ``gta_policy.json`` records the source, the text digest and ``kept_ids.json`` the
        old id of every new id; its manifest is keyed by the texts and the source's files together.

    Raises:
        ModelDirError: A source the cut cannot use, or an ``out`` it may not replace (one line).
    """
    source = Path(source)
    model_type, source_digest = source_identity(source)
    texts_digest = _texts_digest(texts)
    key = digest_text(texts_digest, source_digest)
    target = Path(out) if out is not None else source.with_name(f"{source.name}-cut{CUT_VERSION}-{key[:12]}")

    def write(tmp: Path) -> None:
        tok, kept = _cut_tokenizer(source, texts)
        log.info("vocabulary cut: %d ids kept for %d texts", len(kept), len(texts))
        _cut_weights(source, kept, tmp)
        tok.save_pretrained(str(tmp))
        (tmp / "kept_ids.json").write_text(json.dumps(kept))
        (tmp / "gta_policy.json").write_text(
            json.dumps(
                {
                    "source": str(source),
                    "cut_version": CUT_VERSION,
                    "texts_sha256_12": texts_digest[:12],
                    "source_sha256_12": source_digest[:12],
                    "n_texts": len(texts),
                    "vocab_size": len(kept),
                },
                indent=2,
            )
        )

    extra = {"source": str(source), "source_files_sha256": source_digest, "texts_sha256": texts_digest}
    return ensure_model_dir(target, cut_kind(model_type), key, write, extra=extra)


def policy_texts(kb_dir: str | Path, qa_paths: Sequence[str | Path] = ()) -> list[str]:
    """What a search policy over ``kb_dir`` reads and writes: every passage as an observation renders it,
    every question of ``qa_paths`` in every prompt style with its answers, and the protocol's strings."""
    import pandas as pd

    from gta_verl.data.loaders import DataFormatError
    from gta_verl.data.schema import parse_ground_truth
    from gta_verl.kb.store import load_kb
    from gta_verl.protocol import (
        INVALID_ACTION_MESSAGE,
        PROMPT_STYLES,
        SEARCH_FAILED_PREFIX,
        build_messages,
        format_observation,
    )

    texts = [format_observation([p]) for p in load_kb(kb_dir).passages]
    texts += [INVALID_ACTION_MESSAGE, f"{SEARCH_FAILED_PREFIX} timeout", format_observation([])]
    for path in qa_paths:
        for i, row in enumerate(pd.read_parquet(path).to_dict("records")):
            question = str((row.get("extra_info") or {}).get("question") or "")
            if question:
                texts += [build_messages(question, style=s)[0]["content"] for s in PROMPT_STYLES]
            truth = (row.get("reward_model") or {}).get("ground_truth")
            if truth is None:
                continue
            try:
                # The reward's own reading: a bare string is one answer, not one per character.
                answers = parse_ground_truth(truth)[0]
            except ValueError as exc:
                raise DataFormatError(f"{path}: row {i}: {exc}") from None
            texts += [f"<answer> {a} </answer>" for a in answers]
    return texts
