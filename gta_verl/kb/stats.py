"""KB statistics in the layout of GTA-RAG Table 5."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gta_verl.kb.knowledge_base import EDGE_KINDS, KnowledgeBase

#: (key, Table 5 column title), in table order.
TABLE5_COLUMNS: tuple[tuple[str, str], ...] = (
    ("document_nodes", "Document nodes"),
    ("entity_nodes", "Entity nodes"),
    ("doc_entity_edges", "Document–entity edges"),
    ("relation_edges", "Relation edges"),
    ("synonymy_edges", "Synonymy edges"),
    ("avg_document_degree", "Avg. document degree"),
)


def kb_stats(kb: KnowledgeBase) -> dict[str, Any]:
    """Table 5 numbers plus the triple count.

    ``avg_document_degree`` = document–entity edges / document nodes (documents
    only touch entities, so this is the mean degree of document nodes).
    """
    kinds = Counter(kb.graph.es["kind"]) if kb.graph.ecount() else Counter()
    n_docs = kb.n_docs
    out: dict[str, Any] = {
        "document_nodes": n_docs,
        "entity_nodes": kb.n_entities,
        **{f"{k}_edges": int(kinds.get(k, 0)) for k in EDGE_KINDS},
        "avg_document_degree": round(kinds.get("doc_entity", 0) / n_docs, 3) if n_docs else 0.0,
        "triples": len(kb.triples),
    }
    return out


def stats_markdown(stats: dict[str, Any], name: str = "KB") -> str:
    """One-row markdown table with Table 5's columns."""
    head = "| dataset | " + " | ".join(t for _, t in TABLE5_COLUMNS) + " |"
    sep = "|---|" + "---:|" * len(TABLE5_COLUMNS)

    def fmt(v: Any) -> str:
        return f"{v:,.2f}" if isinstance(v, float) else f"{v:,}"

    row = f"| {name} | " + " | ".join(fmt(stats[k]) for k, _ in TABLE5_COLUMNS) + " |"
    return f"{head}\n{sep}\n{row}"
