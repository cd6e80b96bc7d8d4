"""The in-memory knowledge base: the contract between KB building and its users.

The retriever, the path sampler and the rewards only ever see this object
(loaded from a KB directory with :func:`gta_verl.kb.store.load_kb`).

Node numbering of ``graph`` (fixed, everything relies on it):
    * document node ``i`` for ``0 <= i < n_docs``  ↔ ``passages[i]``;
    * entity node ``n_docs + j`` for ``0 <= j < n_entities`` ↔ ``entities[j]``.

Edge attributes of ``graph`` (undirected, at most one edge per node pair):
    * ``weight``: Python float (python-igraph 1.0 silently ignores numpy.float32
      weights in ``personalized_pagerank``);
    * ``kind``: ``"doc_entity"``, ``"relation"`` or ``"synonymy"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gta_verl.data.types import Passage, Triple

EDGE_KINDS = ("doc_entity", "relation", "synonymy")


@dataclass(frozen=True)
class KnowledgeBase:
    """Entity–document graph plus the tables and embeddings retrieval needs.

    Attributes:
        passages: Document nodes, ``passages[i]`` is node ``i``.
        entities: Normalized entity names, ``entities[j]`` is node ``n_docs + j``.
        triples: Unique (subject, relation, object, doc_id) rows with provenance.
        triple_entity_ids: ``int64 [n_triples, 2]`` entity indices (into
            ``entities``, not node ids) of each triple's subject and object.
        graph: ``igraph.Graph`` with ``n_docs + n_entities`` vertices.
        passage_emb: ``float32 [n_docs, dim]`` L2-normalized passage embeddings
            (of ``Passage.contents``).
        entity_emb: ``float32 [n_entities, dim]`` L2-normalized.
        triple_emb: ``float32 [n_triples, dim]`` L2-normalized (of ``Triple.text``).
        embedder_name: Identity of the encoder; queries must use the same one.
        manifest: Schema version, config, counts, checksums, creation time.
    """

    passages: tuple[Passage, ...]
    entities: tuple[str, ...]
    triples: tuple[Triple, ...]
    triple_entity_ids: np.ndarray
    graph: Any  # igraph.Graph; typed loosely so this module imports without igraph
    passage_emb: np.ndarray
    entity_emb: np.ndarray
    triple_emb: np.ndarray
    embedder_name: str
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def n_docs(self) -> int:
        return len(self.passages)

    @property
    def n_entities(self) -> int:
        return len(self.entities)

    def doc_node(self, doc_index: int) -> int:
        return doc_index

    def entity_node(self, entity_index: int) -> int:
        return self.n_docs + entity_index

    def doc_index_by_id(self) -> dict[str, int]:
        """Map ``doc_id`` → document node index."""
        return {p.doc_id: i for i, p in enumerate(self.passages)}

    def problems(self) -> list[tuple[str, str]]:
        """Inconsistencies between tables, arrays and graph: ``[(field, why)]``, empty when sound.

        Checks what retrieval would otherwise discover only at query time (or never):
        every embedding is ``float32 [rows, dim]`` with rows = its table's length and
        one shared ``dim``, values finite; triple entity ids and provenance point into
        the tables; the graph has exactly ``n_docs + n_entities`` vertices and known
        edge kinds.
        """
        out: list[tuple[str, str]] = []
        rows = {"passage_emb": self.n_docs, "entity_emb": self.n_entities, "triple_emb": len(self.triples)}
        dims = set()
        for name, n in rows.items():
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.dtype != np.float32:
                got = getattr(arr, "dtype", type(arr).__name__)
                out.append(
                    (name, f"expected a float32 matrix, got {got} of shape {getattr(arr, 'shape', '?')}")
                )
                continue
            dims.add(arr.shape[1])
            if arr.shape[0] != n:
                out.append((name, f"{arr.shape[0]} rows for {n} table rows"))
            elif not np.isfinite(arr).all():
                out.append((name, "holds NaN or infinite values"))
        if len(dims) > 1:
            out.append(("entity_emb", f"embedding widths disagree: {sorted(dims)}"))
        tei = np.asarray(self.triple_entity_ids)
        if tei.shape != (len(self.triples), 2):
            out.append(("triple_entity_ids", f"shape {tei.shape} for {len(self.triples)} triples"))
        elif tei.size and (tei.min() < 0 or tei.max() >= self.n_entities):
            out.append(("triple_entity_ids", f"entity index outside [0, {self.n_entities})"))
        docs = {p.doc_id for p in self.passages}
        if len(docs) != self.n_docs:
            out.append(("passages", f"{self.n_docs - len(docs)} duplicate doc_id(s)"))
        orphan = next((t.doc_id for t in self.triples if t.doc_id not in docs), None)
        if orphan is not None:
            out.append(("triple_entity_ids", f"triple from unknown document {orphan!r}"))
        if self.graph.vcount() != self.n_docs + self.n_entities:
            out.append(
                (
                    "graph",
                    f"{self.graph.vcount()} vertices for {self.n_docs} documents + "
                    f"{self.n_entities} entities",
                )
            )
        kinds = set(self.graph.es["kind"]) if self.graph.ecount() else set()
        if not kinds <= set(EDGE_KINDS):
            out.append(("graph", f"unknown edge kind(s) {sorted(kinds - set(EDGE_KINDS))}"))
        return out
