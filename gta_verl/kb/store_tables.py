"""The tables and arrays of a KB directory as :func:`gta_verl.kb.store.save_kb` writes them (layout: its
module docstring), and the size they will take."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.kb.openie.base import Extraction


def _extractions_from_kb(kb: KnowledgeBase) -> dict[str, Extraction]:
    """Fallback when no raw extractions are given: the KB's own (normalized) triples.

    Normalization is idempotent, so rebuilding from these gives the same graph.
    """
    by_doc: dict[str, list[tuple[str, str, str]]] = {p.doc_id: [] for p in kb.passages}
    for t in kb.triples:
        by_doc[t.doc_id].append((t.subject, t.relation, t.object))
    return {d: Extraction(d, (), tuple(ts), "ok" if ts else "empty") for d, ts in by_doc.items()}


def _write_tables(kb: KnowledgeBase, d: Path, extractions: Mapping[str, Extraction]) -> None:
    import pandas as pd

    pd.DataFrame(
        {
            "doc_id": [p.doc_id for p in kb.passages],
            "title": [p.title for p in kb.passages],
            "text": [p.text for p in kb.passages],
        }
    ).to_parquet(d / "passages.parquet", index=False)
    pd.DataFrame({"entity": list(kb.entities)}).to_parquet(d / "entities.parquet", index=False)
    tei = np.asarray(kb.triple_entity_ids, dtype=np.int64).reshape(-1, 2)
    pd.DataFrame(
        {
            "subject": [t.subject for t in kb.triples],
            "relation": [t.relation for t in kb.triples],
            "object": [t.object for t in kb.triples],
            "doc_id": [t.doc_id for t in kb.triples],
            "subject_idx": tei[:, 0],
            "object_idx": tei[:, 1],
        }
    ).to_parquet(d / "triples.parquet", index=False)
    g = kb.graph
    el = np.asarray(g.get_edgelist(), dtype=np.int64).reshape(-1, 2)
    pd.DataFrame(
        {
            "source": el[:, 0],
            "target": el[:, 1],
            "kind": g.es["kind"] if g.ecount() else [],
            "weight": np.asarray(g.es["weight"] if g.ecount() else [], dtype=np.float64),
        }
    ).to_parquet(d / "edges.parquet", index=False)
    exs = [
        extractions.get(p.doc_id) or Extraction(p.doc_id, status="error", error="no extraction")
        for p in kb.passages
    ]
    pd.DataFrame(
        {
            "doc_id": [e.doc_id for e in exs],
            "status": [e.status for e in exs],
            "n_malformed": [e.n_malformed for e in exs],
            "error": [e.error for e in exs],
            "entities": [list(e.entities) for e in exs],
            "triples": [[list(t) for t in e.triples] for e in exs],
        }
    ).to_parquet(d / "extractions.parquet", index=False)
    for name, arr in (
        ("passage_emb", kb.passage_emb),
        ("entity_emb", kb.entity_emb),
        ("triple_emb", kb.triple_emb),
    ):
        np.save(d / f"{name}.npy", np.ascontiguousarray(arr, dtype=np.float32))


def _estimated_bytes(kb: KnowledgeBase) -> int:
    """Rough size of the KB on disk: vectors plus text (parquet compresses, so this errs high)."""
    vec = sum(int(np.asarray(a).size) * 4 for a in (kb.passage_emb, kb.entity_emb, kb.triple_emb))
    text = sum(len(p.text) + len(p.title) for p in kb.passages) * 2
    return vec + text + 64 * (len(kb.triples) + kb.graph.ecount()) + (1 << 20)
