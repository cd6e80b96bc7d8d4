"""``kb add``: grow a saved KB with new passages.

Only passages whose ``doc_id`` is not yet in the KB are extracted. The graph is
then rebuilt over old + new passages from the stored raw extractions: synonymy
is a k-NN over *all* entities, so new entities can link to old ones and the
result equals a full rebuild over the union (same order: old passages first).
Vectors of texts already in the KB are reused, so only new texts are encoded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl.data.types import Passage
from gta_verl.kb.build import KBConfig, build_kb, extract_passages
from gta_verl.kb.embed import Embedder, load_embedder
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.kb.openie.base import Extraction

log = logging.getLogger(__name__)


def merge_passages(old: Sequence[Passage], new: Sequence[Passage]) -> tuple[list[Passage], list[Passage]]:
    """Union in order (old first, then unseen new); returns (union, truly new)."""
    seen = {p.doc_id for p in old}
    fresh: list[Passage] = []
    for p in new:
        if p.doc_id not in seen:
            seen.add(p.doc_id)
            fresh.append(p)
    return list(old) + fresh, fresh


def add_passages(
    kb: KnowledgeBase,
    old_extractions: Mapping[str, Extraction],
    new: Sequence[Passage],
    new_extractions: Mapping[str, Extraction],
    embedder: Embedder,
    config: KBConfig,
    progress: bool = True,
    extra_manifest: Mapping[str, Any] | None = None,
) -> KnowledgeBase:
    """Pure core of ``kb add``: the KB over ``kb.passages`` ∪ ``new``, reusing old vectors."""
    union, _ = merge_passages(kb.passages, new)
    extractions = {**old_extractions, **new_extractions}
    return build_kb(
        union, extractions, embedder, config, progress=progress, reuse=kb, extra_manifest=extra_manifest
    )


def add_to_kb(
    kb_dir: str | Path,
    corpus_path: str | Path,
    corpus_format: str | None,
    openie_spec: str,
    config: KBConfig | None = None,
    progress: bool = True,
    strict: bool = False,
    allow_download: bool = False,
) -> KnowledgeBase:
    """Read ``corpus_path``, extract its new passages, rebuild and re-save ``kb_dir`` atomically."""
    config = config or KBConfig()
    from gta_verl.data.loaders import read_corpus
    from gta_verl.kb.store import load_extractions, load_kb, save_kb

    kb = load_kb(kb_dir)
    rep = read_corpus(corpus_path, corpus_format, strict=strict)
    log.info(rep.summary())
    _, fresh = merge_passages(kb.passages, rep.records)
    log.info(
        "kb add: %d passages read, %d already in the KB, %d new", rep.n_ok, rep.n_ok - len(fresh), len(fresh)
    )
    old_ex = load_extractions(kb_dir)
    new_ex, openie = extract_passages(fresh, openie_spec, config, progress) if fresh else ({}, {})
    history = list(kb.manifest.get("additions", [])) + [
        {"corpus": str(corpus_path), "n_in": rep.n_in, "n_new": len(fresh), "openie": openie}
    ]
    keep = {k: kb.manifest[k] for k in ("openie", "corpus") if k in kb.manifest}
    embedder = load_embedder(config.embedder, device=config.device, allow_download=allow_download)
    new_kb = add_passages(
        kb, old_ex, fresh, new_ex, embedder, config, progress, extra_manifest={**keep, "additions": history}
    )
    return save_kb(new_kb, kb_dir, extractions={**old_ex, **new_ex})
