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
