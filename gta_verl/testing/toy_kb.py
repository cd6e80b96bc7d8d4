"""A toy KB and a deterministic offline encoder, for tests and CPU smoke runs.

:class:`HashEmbedder` maps a text to the normalized sum of seeded random vectors
of its lowercase word tokens: no model weights, identical in every process (the
Ray actor can rebuild it from the import path ``gta_verl.testing.toy_kb:HashEmbedder``),
and texts sharing words get high cosine, which is enough to exercise retrieval.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage, Triple

_WORD = re.compile(r"\w+")

TOY_DOCS: tuple[tuple[str, str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "Paris",
        "Paris is the capital of France. The Eiffel Tower is in Paris.",
        (("paris", "capital of", "france"), ("eiffel tower", "located in", "paris")),
    ),
    (
        "France",
        "France is a country in Europe. Its president is Emmanuel Macron.",
        (("france", "country in", "europe"), ("france", "president", "emmanuel macron")),
    ),
    ("Emmanuel Macron", "Emmanuel Macron was born in Amiens.", (("emmanuel macron", "born in", "amiens"),)),
    (
        "Amiens",
        "Amiens is a city in northern France on the Somme river.",
        (("amiens", "city in", "france"), ("amiens", "on river", "somme")),
    ),
    ("Berlin", "Berlin is the capital of Germany.", (("berlin", "capital of", "germany"),)),
    (
        "Germany",
        "Germany is a country in Europe. Its chancellor is Olaf Scholz.",
        (("germany", "country in", "europe"), ("germany", "chancellor", "olaf scholz")),
    ),
    ("Olaf Scholz", "Olaf Scholz was born in Osnabrueck.", (("olaf scholz", "born in", "osnabrueck"),)),
    ("Tokyo", "Tokyo is the capital of Japan.", (("tokyo", "capital of", "japan"),)),
    (
        "Mount Fuji",
        "Mount Fuji is the highest mountain in Japan.",
        (("mount fuji", "highest mountain in", "japan"),),
    ),
    ("Lonely", "This passage mentions nothing in particular.", ()),
)


class HashEmbedder:
    """Deterministic bag-of-words encoder (``float32 [n, dim]``, L2-normalized)."""

    def __init__(self, dim: int = 64, name: str = "hash-bow-64") -> None:
        self.dim, self.name = dim, name

    def _word(self, word: str) -> np.ndarray:
        return np.random.default_rng(zlib.crc32(word.encode("utf-8"))).standard_normal(self.dim)

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for i, text in enumerate(texts):
            for w in _WORD.findall(text.lower()):
                out[i] += self._word(w)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.maximum(norms, 1e-12)).astype(np.float32)


def make_toy_kb(embedder: HashEmbedder | None = None, with_triples: bool = True):
    """A 10-document KB (one isolated document) built by hand, without OpenIE.

    Returns:
        A :class:`gta_verl.kb.knowledge_base.KnowledgeBase` whose graph has
        ``doc_entity`` and ``relation`` edges (weight 1.0 as Python floats).
    """
    import igraph as ig

    from gta_verl.kb.knowledge_base import KnowledgeBase

    emb = embedder or HashEmbedder()
    passages = tuple(Passage(make_doc_id(t, x), t, x) for t, x, _ in TOY_DOCS)
    triples = tuple(
        Triple(s, r, o, passages[i].doc_id)
        for i, (_, _, ts) in enumerate(TOY_DOCS)
        if with_triples
        for s, r, o in ts
    )
    entities = tuple(sorted({e for t in triples for e in (t.subject, t.object)}))
    ent_idx = {e: j for j, e in enumerate(entities)}
    doc_idx = {p.doc_id: i for i, p in enumerate(passages)}
    n_docs = len(passages)
    edges: dict[tuple[int, int], list] = {}
    for t in triples:
        s, o, d = n_docs + ent_idx[t.subject], n_docs + ent_idx[t.object], doc_idx[t.doc_id]
        for e in (s, o):
            edges.setdefault((d, e), [1.0, "doc_entity"])
        key = (min(s, o), max(s, o))
        edges.setdefault(key, [0.0, "relation"])[0] += 1.0
    graph = ig.Graph(n=n_docs + len(entities), edges=list(edges), directed=False)
    graph.es["weight"] = [float(w) for w, _ in edges.values()]
    graph.es["kind"] = [k for _, k in edges.values()]
    tei = np.array([[ent_idx[t.subject], ent_idx[t.object]] for t in triples], dtype=np.int64).reshape(-1, 2)
    dim = emb.dim
    return KnowledgeBase(
        passages=passages,
        entities=entities,
        triples=triples,
        triple_entity_ids=tei,
        graph=graph,
        passage_emb=emb.encode([p.contents for p in passages]),
        entity_emb=emb.encode(list(entities)) if entities else np.zeros((0, dim), np.float32),
        triple_emb=emb.encode([t.text for t in triples]) if triples else np.zeros((0, dim), np.float32),
        embedder_name=emb.name,
        manifest={"source": "gta_verl.testing.toy_kb.make_toy_kb"},
    )
