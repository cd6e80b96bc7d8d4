"""Fixtures of the synthesis tests: a hand-built 9-document KB and a lexical retriever.

The tiny KB exercises every link kind of the path sampler (shared entity,
relation edge, synonymy edge) with facts a reader can check by eye; the real
MuSiQue KB comes from the session fixtures in ``tests/conftest.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pytest

from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage, RetrievalHit, RetrievalResult, Triple
from gta_verl.kb.knowledge_base import KnowledgeBase

TINY_DOCS: list[tuple[str, str, list[tuple[str, str, str]]]] = [
    (
        "Barack Obama",
        "Barack Obama was born in Honolulu. He was the 44th president of the United States.",
        [("barack obama", "born in", "honolulu"), ("barack obama", "president of", "united states")],
    ),
    (
        "Honolulu",
        "Honolulu is the capital of Hawaii. It is located on the island of Oahu.",
        [("honolulu", "capital of", "hawaii"), ("honolulu", "located on", "oahu")],
    ),
    (
        "Hawaii",
        "Hawaii became a state in 1959. Its governor is Josh Green.",
        [("hawaii", "became state in", "1959"), ("hawaii", "governor", "josh green")],
    ),
    (
        "Josh Green",
        "Josh Green is a physician who was born in Kingston, New York.",
        [("josh green", "born in", "kingston")],
    ),
    ("Oahu", "Oahu is known as The Gathering Place.", [("oahu", "known as", "the gathering place")]),
    (
        "Michelle Obama",
        "Michelle Obama was born in Chicago. She is married to Barack Obama.",
        [("michelle obama", "born in", "chicago"), ("michelle obama", "married to", "barack obama")],
    ),
    ("Chicago", "Chicago is the largest city in Illinois.", [("chicago", "largest city in", "illinois")]),
    (
        "Kingston, New York",
        "Kingston is a city in Ulster County, New York.",
        [("kingston", "city in", "ulster county")],
    ),
    (
        "Obama Presidential Center",
        "The Obama Presidential Center is located in Chicago and honors Obama.",
        [
            ("obama presidential center", "located in", "chicago"),
            ("obama presidential center", "honors", "obama"),
        ],
    ),
]
SYNONYMS = [("obama", "barack obama")]


def build_tiny_kb(
    docs: Sequence[tuple[str, str, list[tuple[str, str, str]]]] = TINY_DOCS,
    synonyms: Sequence[tuple[str, str]] = SYNONYMS,
) -> KnowledgeBase:
    """Build the KB of ``docs`` ``(title, text, triples)`` by hand, following the KnowledgeBase
    node-numbering contract."""
    import igraph as ig

    passages = tuple(Passage(make_doc_id(t, x), t, x) for t, x, _ in docs)
    entities: list[str] = []
    for _, _, trs in docs:
        for s, _, o in trs:
            for e in (s, o):
                if e not in entities:
                    entities.append(e)
    eid = {e: j for j, e in enumerate(entities)}
    n_docs = len(passages)
    triples, tids, edges = [], [], {}
    for i, (_, _, trs) in enumerate(docs):
        for s, r, o in trs:
            triples.append(Triple(s, r, o, passages[i].doc_id))
            tids.append((eid[s], eid[o]))
            for e in (s, o):
                edges.setdefault((i, n_docs + eid[e]), "doc_entity")
            a, b = sorted((n_docs + eid[s], n_docs + eid[o]))
            edges.setdefault((a, b), "relation")
    for x, y in synonyms:
        a, b = sorted((n_docs + eid[x], n_docs + eid[y]))
        edges.setdefault((a, b), "synonymy")
    g = ig.Graph(n=n_docs + len(entities), edges=list(edges), directed=False)
    g.es["kind"] = list(edges.values())
    g.es["weight"] = [1.0] * len(edges)
    rng = np.random.default_rng(0)

    def emb(n: int) -> np.ndarray:
        x = rng.standard_normal((n, 8)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return KnowledgeBase(
        passages=passages,
        entities=tuple(entities),
        triples=tuple(triples),
        triple_entity_ids=np.array(tids, dtype=np.int64),
        graph=g,
        passage_emb=emb(n_docs),
        entity_emb=emb(len(entities)),
        triple_emb=emb(len(triples)),
        embedder_name="random-8d",
    )


_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> set[str]:
    return {t for t in _TOKEN.findall(text.lower()) if len(t) > 2}


class LexicalRetriever:
    """A real (if simple) retriever: top-k passages by token overlap / sqrt(length)."""

    def __init__(self, passages: Sequence[Passage], k: int = 3) -> None:
        self.passages = list(passages)
        self.k = k
        self._toks = [_tokens(p.contents) for p in self.passages]
        self.calls = 0

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        out = []
        for q in queries:
            self.calls += 1
            qt = _tokens(q)
            scores = [len(qt & t) / math.sqrt(len(t) or 1) for t in self._toks]
            order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: self.k]
            hits = tuple(
                RetrievalHit(
                    self.passages[i].doc_id,
                    self.passages[i].title,
                    self.passages[i].text,
                    float(scores[i]),
                    "dense",
                )
                for i in order
                if scores[i] > 0
            )
            out.append(RetrievalResult(query=q, hits=hits))
        return out


@pytest.fixture(scope="session")
def tiny_kb() -> KnowledgeBase:
    return build_tiny_kb()


@pytest.fixture()
def obama_honolulu(tiny_kb: KnowledgeBase):
    """The tiny KB's two-hop path Barack Obama → Honolulu (the bridge entity: honolulu)."""
    from gta_verl.synth.paths import build_path, build_path_index

    index = build_path_index(tiny_kb)
    titles = [p.title for p in tiny_kb.passages]
    return build_path(index, [titles.index("Barack Obama"), titles.index("Honolulu")], [["honolulu"]])


@pytest.fixture()
def lexical_retriever(tiny_kb: KnowledgeBase) -> LexicalRetriever:
    return LexicalRetriever(tiny_kb.passages)


@pytest.fixture(scope="session")
def musique_retriever(musique_kb, embedder):
    """The deployed retriever (training defaults) over the real MuSiQue KB."""
    from gta_verl.retrieval.config import RetrieverConfig
    from gta_verl.retrieval.retriever import GraphRetriever

    return GraphRetriever(musique_kb, embedder, RetrieverConfig())


@pytest.fixture(scope="session")
def musique_synthesis(musique_kb, musique_retriever):
    """One template synthesis run on MuSiQue, shared by the end-to-end tests."""
    from gta_verl.synth.generators.template import TemplateGenerator
    from gta_verl.synth.pipeline import SynthesisConfig, synthesize

    return synthesize(
        musique_kb,
        musique_retriever,
        TemplateGenerator(),
        n=12,
        seed=0,
        progress=False,
        config=SynthesisConfig(batch_size=16),
    )
