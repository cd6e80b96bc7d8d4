"""The hybrid graph retriever R(q) of GTA-RAG (eqs 6–9), in process and batched.

Pipeline for a batch of queries (one call = one batched PPR):

1. encode the queries with the KB's encoder (``h_q``);
2. dense scores ``cos(h_q, h_d)`` for every passage → R_d = top-K_d;
3. triple scores ``s(q, t) = cos(h_q, h_t)`` (eq 6, faiss inner product); the top-n
   triples give their (min–max-normalized) scores to their subject/object entities,
   divided by each entity's document frequency and averaged (HippoRAG 2), plus
   ``passage_node_weight`` × min–max dense scores on document nodes → ``p_q``;
4. ``r_q = α p_q + (1 − α) Pᵀ r_q`` (eq 7) for the whole batch → R_g = top-K_g documents;
5. R = Dedup(R_g ∪ R_d) (eq 9), ordered by :func:`gta_verl.retrieval.fusion.fuse`.

Every step is exact by default. Opt-in, for corpora of millions, three approximate indexes take
the place of the three scans whose cost grows with the corpus (each proposes candidates that are
then scored exactly, so only recall can drop): ``index`` (step 3's triple search), ``passage_index``
(step 2: R_d and the dense scores' min and max, :mod:`gta_verl.retrieval.dense_candidates`) and
``basis_index`` (step 4's GEMV of the ``linear`` solver, :mod:`gta_verl.retrieval.ppr.linear_approx`).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from gta_verl.data.types import HitSource, RetrievalHit, RetrievalResult
from gta_verl.retrieval import gemm
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.dense_candidates import (
    DenseBatch,
    DenseRow,
    dense_candidates,
    passage_index_settings,
    passage_vector_index,
    top_dense,
)
from gta_verl.retrieval.fusion import fuse
from gta_verl.retrieval.index import VectorIndex
from gta_verl.retrieval.passages import check_encoder
from gta_verl.retrieval.ppr import (
    BasisIndex,
    PassageBasis,
    Solver,
    Transition,
    build_basis_index,
    build_passage_basis,
    build_transition,
    choose_solver,
    minmax_rows,
    passage_part,
    ppr_top_docs,
    topk_stable,
)
from gta_verl.retrieval.queries import FLAG_TRUNCATED, prepare_queries, query_cost
from gta_verl.retrieval.seeds import entity_doc_frequency, seed_entities
from gta_verl.retrieval.stage_clock import StageClock

__all__ = [
    "FLAG_NO_ENTITIES",
    "FLAG_TRUNCATED",
    "GraphRetriever",
    "entity_doc_frequency",
    "seed_entities",
    "topk_stable",
]

logger = logging.getLogger(__name__)

FLAG_NO_ENTITIES = "no_entities_dense_only"


class GraphRetriever:
    """R(q): dense + PPR graph retrieval over a :class:`~gta_verl.kb.knowledge_base.KnowledgeBase`.

    The ``graph`` backend: open it with :func:`gta_verl.retrieval.backends.open_retriever`.

    Args:
        kb: The knowledge base.
        embedder: Encoder with ``name``, ``dim`` and ``encode(texts) -> float32 [n, dim]``
            (L2-normalized); must be the encoder the KB was built with.
        config: Knobs; defaults = GTA-RAG/HippoRAG 2.
        fact_index: The unique-fact index built for these settings (a node cache's); default: built here.

    Raises:
        ValueError: If the embedder differs from the KB's (name or dimension).
    """

    def __init__(
        self,
        kb: Any,
        embedder: Any,
        config: RetrieverConfig | None = None,
        fact_index: VectorIndex | None = None,
    ) -> None:
        self.kb = kb
        self.embedder = embedder
        self.config = config or RetrieverConfig()
        check_encoder(kb, embedder)
        self._passage_emb = np.ascontiguousarray(kb.passage_emb, dtype=np.float32)
        self._doc_freq = entity_doc_frequency(kb)
        self._fact_pairs, fact_emb = self._unique_facts(kb)
        self._fact_emb = fact_emb
        self._fact_index: VectorIndex | None = fact_index
        if fact_index is None:
            self._build_fact_index()
        else:
            fact_index.check_shape(self._fact_emb.shape, "the KB's unique facts")
        self._passage_index = passage_vector_index(self._passage_emb, self.config)
        self._transition: Transition | None = None
        self._basis: PassageBasis | None = None
        self._basis_index: BasisIndex | None = None
        #: Seconds per stage of every batch scored (encode, dense, triples, seeds, ppr, results): a served
        #: replica reports them in its stats (:mod:`gta_verl.retrieval.stage_clock`).
        self.clock = StageClock()

    def with_config(self, config: RetrieverConfig) -> GraphRetriever:
        """A retriever sharing this one's KB, encoder and graph, with another config."""
        other = copy.copy(self)
        other.config = config
        knobs = ("index", "ivf_nprobe", "hnsw_m", "hnsw_ef_search", "index_refine", "triple_scan")
        if any(getattr(config, k) != getattr(self.config, k) for k in knobs):
            other._build_fact_index()
        if passage_index_settings(config) != passage_index_settings(self.config):
            other._passage_index = passage_vector_index(self._passage_emb, config)
        return other

    @staticmethod
    def _unique_facts(kb: Any) -> tuple[np.ndarray, np.ndarray]:
        # The KB keeps one row per (triple, doc); a fact extracted from two documents
        # would otherwise fill two of the top-n slots (HippoRAG 2 indexes unique facts).
        seen: dict[tuple[str, str, str], int] = {}
        for i, t in enumerate(kb.triples):
            seen.setdefault((t.subject, t.relation, t.object), i)
        keep = np.fromiter(seen.values(), dtype=np.int64, count=len(seen))
        pairs = np.asarray(kb.triple_entity_ids, dtype=np.int64).reshape(-1, 2)[keep]
        emb = np.asarray(kb.triple_emb, dtype=np.float32)[keep] if len(keep) else np.zeros((0, 1), np.float32)
        return pairs, emb

    def _build_fact_index(self) -> None:
        c = self.config
        if len(self._fact_pairs):
            self._fact_index = VectorIndex(
                self._fact_emb,
                c.index,
                c.ivf_nprobe,
                c.hnsw_m,
                c.triple_scan,
                c.hnsw_ef_search,
                c.index_refine,
            )
        else:
            logger.warning("KB has no triples: graph retrieval falls back to dense for every query")
            self._fact_index = None

    @property
    def transition(self) -> Transition:
        """The PPR transition of the KB graph (built on first graph query)."""
        if self._transition is None:
            self._transition = build_transition(self.kb.graph)
        return self._transition

    def warm(self) -> GraphRetriever:
        """Build what the first graph query would (transition; passage basis and its index for ``linear``)."""
        if self.config.mode != "dense" and self._fact_index is not None:
            _ = self.transition
            if self.uses_passage_basis:
                _ = self.basis_index
        return self

    # ------------------------------------------------------------------ queries
    def prepare_queries(self, queries: Sequence[str]) -> tuple[list[str], list[tuple[str, ...]]]:
        """:func:`gta_verl.retrieval.queries.prepare_queries` under this config's limits."""
        return prepare_queries(queries, self.config)

    def query_cost(self, query: str) -> int:
        """:func:`gta_verl.retrieval.queries.query_cost` under this config's limits."""
        return query_cost(query, self.config)

    # ------------------------------------------------------------------ scoring
    def entity_seeds(
        self, triple_scores: np.ndarray, triple_ids: np.ndarray, min_scores: np.ndarray
    ) -> tuple[sp.csr_matrix, np.ndarray]:
        """The sparse part of ``p_q``: entity seeds from the top-n triples (HippoRAG 2).

        Args:
            triple_scores: ``float [B, n]`` raw cosines of the top-n unique triples.
            triple_ids: ``int [B, n]`` their indices (−1 = none).
            min_scores: ``float [B]`` lowest triple cosine per query (for min–max).

        Returns:
            ``(seeds csr float64 [B, N], seeded bool [B])``: entity weights on the entity nodes;
            rows without a usable triple are empty and ``seeded`` False (→ dense-only).
        """
        c, kb = self.config, self.kb
        n_b = len(triple_scores)
        seeded = np.zeros(n_b, dtype=bool)
        norm = (
            minmax_rows(triple_scores, min_scores, triple_scores[:, 0])
            if c.triple_score_norm == "minmax"
            else triple_scores
        )
        rows, cols, vals = [], [], []
        for b in range(n_b):
            usable = (triple_ids[b] >= 0) & (triple_scores[b] > c.min_triple_score)
            ids, w = seed_entities(
                norm[b, usable],
                self._fact_pairs[triple_ids[b, usable]],
                self._doc_freq,
                c.max_seed_entities,
                c.doc_frequency_norm,
            )
            if w.sum() <= 0:
                continue
            seeded[b] = True
            rows.append(np.full(len(ids), b, dtype=np.int64))
            cols.append(kb.n_docs + ids)
            vals.append(w)
        n_nodes = kb.n_docs + kb.n_entities
        if not rows:
            return sp.csr_matrix((n_b, n_nodes)), seeded
        seeds = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_b, n_nodes)
        )
        seeds.sum_duplicates()
        return seeds, seeded

    def personalization(
        self, triple_scores: np.ndarray, triple_ids: np.ndarray, min_scores: np.ndarray, dense: np.ndarray
    ) -> tuple[sp.csr_matrix, np.ndarray]:
        """Build ``p_q`` for a batch from its triple search and dense scores.

        Args:
            triple_scores: ``float [B, n]`` raw cosines of the top-n unique triples.
            triple_ids: ``int [B, n]`` their indices (−1 = none).
            min_scores: ``float [B]`` lowest triple cosine per query (for min–max).
            dense: ``float [B, n_docs]`` passage cosines.

        Returns:
            ``(p csr float64 [B, N], seeded bool [B])``, sparse: the entity seeds plus
            ``passage_node_weight`` × min–max dense score on the documents (all of them,
            or the best ``passage_seed_top``); rows without a usable triple are empty and
            ``seeded`` False (→ dense-only).
        """
        c = self.config
        seeds, seeded = self.entity_seeds(triple_scores, triple_ids, min_scores)
        if c.passage_node_weight <= 0 or not seeded.any():
            return seeds, seeded
        docs_part = passage_part(
            dense, np.flatnonzero(seeded), c.passage_node_weight, c.passage_seed_top, seeds.shape
        )
        pers = (seeds + docs_part).tocsr()
        pers.sum_duplicates()
        return pers, seeded

    def dense_part(self, q: np.ndarray, k_dense: int) -> DenseBatch:
        """The dense scores of query embeddings ``q`` ``float32 [B, dim]`` (steps 2 of the module docstring).

        Returns:
            Every passage's cosine, ``float32 [B, n_docs]`` (``passage_index="flat"``, or when
            ``index_refine × k_dense`` candidates would be every passage anyway); else the approximate
            index's best ``k_dense`` rescored candidates and the scores' min–max range
            (:class:`~gta_verl.retrieval.dense_candidates.DenseCandidates`).
        """
        if self._passage_index is None or k_dense * self.config.index_refine >= self.kb.n_docs:
            return gemm.scores(q, self._passage_emb)
        return dense_candidates(self._passage_index, q, k_dense, self._passage_emb)

    def score(
        self, texts: Sequence[str], k_graph: int | None = None, k_dense: int | None = None
    ) -> tuple[DenseBatch, tuple[np.ndarray, np.ndarray] | None, np.ndarray]:
        """Dense scores and the PPR top documents of prepared query texts (one chunk).

        Args:
            texts: Prepared queries.
            k_graph: PPR documents kept per query (default ``config.k_graph``).
            k_dense: Dense documents wanted per query (default the larger of ``config.k_dense`` and
                ``k_graph``); read only by an approximate ``passage_index``, which ranks that many.

        Returns:
            ``(dense, graph, seeded bool [B])``: ``dense`` as :meth:`dense_part` (``float32
            [B, n_docs]`` by default; ``dense[b]`` is row ``b`` either way), ``graph`` =
            ``(doc ids int64 [B, k], PPR scores float64 [B, k])`` best first (id −1 =
            none; ties by document index), or ``None`` in dense mode; unseeded rows are
            all −1.
        """
        c = self.config
        k = max(1, min(c.k_graph if k_graph is None else k_graph, self.kb.n_docs))
        k_d = max(1, min(max(c.k_dense, k) if k_dense is None else k_dense, self.kb.n_docs))
        t0 = time.perf_counter()
        q = np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)
        t1 = time.perf_counter()
        dense = self.dense_part(q, k_d)
        t2 = time.perf_counter()
        seeded = np.zeros(len(texts), dtype=bool)
        g_ids = np.full((len(texts), k), -1, dtype=np.int64)
        g_scores = np.zeros((len(texts), k))
        if c.mode == "dense" or self._fact_index is None:
            self.clock.add(len(texts), encode=t1 - t0, dense=t2 - t1)
            return dense, (None if c.mode == "dense" else (g_ids, g_scores)), seeded
        if c.triple_score_norm == "minmax":
            t_scores, t_ids, mins = self._fact_index.search_with_min(q, c.top_n_triples)
        else:
            t_scores, t_ids = self._fact_index.search(q, c.top_n_triples)
            mins = t_scores[:, -1]
        t3 = time.perf_counter()
        seeds, seeded = self.entity_seeds(t_scores, t_ids, mins)
        t4 = time.perf_counter()
        if seeded.any():
            ids, scores, _ = self.ppr_top(seeds[seeded], q[seeded], dense[seeded], k)
            g_ids[seeded], g_scores[seeded] = ids, scores
        t5 = time.perf_counter()
        self.clock.add(len(texts), encode=t1 - t0, dense=t2 - t1, triples=t3 - t2, seeds=t4 - t3, ppr=t5 - t4)
        return dense, (g_ids, g_scores), seeded

    @property
    def solver(self) -> Solver:
        """The PPR solver this config runs (:func:`~gta_verl.retrieval.ppr.choice.choose_solver`)."""
        c = self.config
        return choose_solver(c.ppr_method, c.passage_seed_top, c.device)

    @property
    def uses_passage_basis(self) -> bool:
        """The ``linear`` solver runs (see :attr:`RetrieverConfig.uses_passage_basis`)."""
        return self.solver.uses_passage_basis

    @property
    def passage_basis(self) -> PassageBasis:
        """The graph's precomputed response to dense passage seeds (built on first use, once per KB)."""
        if self._basis is None or self._basis.alpha != self.config.alpha:
            self._basis = build_passage_basis(self.transition, self._passage_emb, self.config.alpha)
        return self._basis

    @property
    def basis_index(self) -> BasisIndex | None:
        """The ``basis_index`` over the passage basis's rows (built on first use); ``None`` for ``flat`` or
        when the ``linear`` solver does not run."""
        c = self.config
        if c.basis_index == "flat" or not self.uses_passage_basis:
            return None
        basis = self.passage_basis
        settings = (c.basis_index, c.ivf_nprobe, c.hnsw_m, c.hnsw_ef_search)
        if (
            self._basis_index is None
            or self._basis_index.basis is not basis
            or self._basis_index.settings != settings
        ):
            self._basis_index = build_basis_index(basis, *settings)
        return self._basis_index

    def ppr_top(
        self, seeds: sp.csr_matrix, q: np.ndarray, dense: DenseBatch, k: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Top-``k`` PPR documents of seeded queries by :func:`~gta_verl.retrieval.ppr.solve.ppr_top_docs`.

        Args:
            seeds: ``csr [b, N]`` entity seeds (:meth:`entity_seeds`), every row seeded.
            q: ``float32 [b, dim]`` the queries' embeddings.
            dense: Their dense part (:meth:`dense_part`, ``b`` rows). A solver other than ``linear``
                needs every passage's cosine: from an approximate passage index, they are computed here.
            k: Documents kept per query.

        Returns:
            ``(ids int64 [b, k], scores float64 [b, k], nodes the push touched int64 [b] or None)``.
        """
        given: np.ndarray | tuple[np.ndarray, np.ndarray] = (
            dense
            if isinstance(dense, np.ndarray)
            else ((dense.lo, dense.hi) if self.uses_passage_basis else gemm.scores(q, self._passage_emb))
        )
        return ppr_top_docs(
            self.solver,
            self.transition,
            seeds,
            given,
            q,
            k,
            self.config,
            lambda: self.passage_basis,
            lambda: self.basis_index,
        )

    # ------------------------------------------------------------------ results
    def _hit(self, doc: int, source: HitSource, score: float) -> RetrievalHit:
        p = self.kb.passages[doc]
        return RetrievalHit(doc_id=p.doc_id, title=p.title, text=p.text, score=score, source=source)

    def _ordered(
        self,
        dense: np.ndarray | DenseRow,
        graph: tuple[np.ndarray, np.ndarray] | None,
        ok: bool,
        k_g: int,
        k_d: int,
    ) -> list[RetrievalHit]:
        """Hits of one query: top-k_g graph ∪ top-k_d dense, fused, with provenance.

        Graph hits carry their PPR probability as score, dense-only hits their cosine.
        A PPR ranking shorter than ``k_g`` (the walk reached fewer documents) is
        continued with unreached documents in index order, as a full sort of their
        zero scores would.
        """
        c = self.config
        d_order = top_dense(dense, k_d) if k_d else np.zeros(0, np.int64)
        if c.mode == "dense" or not ok or graph is None:
            return [self._hit(d, "dense", float(dense[d])) for d in d_order.tolist()]
        ids, scores = graph[0][:k_g], graph[1][:k_g]
        g_order = ids[ids >= 0]
        ppr = dict(zip(g_order.tolist(), scores[ids >= 0].tolist(), strict=True))
        want = min(k_g, len(dense))
        if len(g_order) < want:
            rest = np.setdiff1d(np.arange(want + len(g_order)), g_order)
            g_order = np.concatenate([g_order, rest[: want - len(g_order)]])
        if c.mode == "graph":
            return [self._hit(int(d), "graph", ppr.get(int(d), 0.0)) for d in g_order]
        g_set, d_set = set(g_order.tolist()), set(d_order.tolist())
        hits = []
        # only score fusion reads scores; padded unreached documents have PPR 0
        g_scores = [ppr.get(int(d), 0.0) for d in g_order] if c.fusion == "score" else None
        fused = fuse(
            g_order,
            d_order,
            c.fusion,
            c.dense_head,
            c.rrf_k,
            graph_scores=g_scores,
            dense_scores=dense,
            dense_weight=c.fusion_weight,
        )
        for d in fused:
            if d in g_set:
                hits.append(self._hit(d, "both" if d in d_set else "graph", ppr.get(d, 0.0)))
            else:
                hits.append(self._hit(d, "dense", float(dense[d])))
        return hits

    def fused_hits(
        self,
        dense: np.ndarray | DenseRow,
        graph: tuple[np.ndarray, np.ndarray] | None,
        seeded: bool,
        k_g: int,
        k_d: int,
    ) -> list[RetrievalHit]:
        """Hits of one query from its :meth:`score` row, ordered by this retriever's config.

        The ordering step of :meth:`retrieve` / :meth:`rank` on its own, so fusion rules
        can be compared on scores computed once (``gta_verl.retrieval.tuning``).
        """
        return self._ordered(dense, graph, seeded, k_g, k_d)

    def _run(
        self, queries: Sequence[str], k_g: int, k_d: int, limit: int | None = None
    ) -> list[RetrievalResult]:
        texts, flags = self.prepare_queries(queries)
        results: list[RetrievalResult] = []
        for start in range(0, len(texts), self.config.batch_size):
            t0 = time.perf_counter()
            chunk = texts[start : start + self.config.batch_size]
            dense, graph, seeded = self.score(chunk, k_g, k_d)
            t1 = time.perf_counter()
            ms = (t1 - t0) * 1000
            for b, text in enumerate(chunk):
                f = flags[start + b]
                if self.config.mode != "dense" and not seeded[b]:
                    f = f + (FLAG_NO_ENTITIES,)
                g_b = None if graph is None else (graph[0][b], graph[1][b])
                hits = self._ordered(dense[b], g_b, bool(seeded[b]), k_g, k_d)
                hits = hits[:limit] if limit is not None else hits
                results.append(RetrievalResult(query=text, hits=tuple(hits), flags=f, latency_ms=ms))
            self.clock.add_seconds(results=time.perf_counter() - t1)
        return results

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """R(q) for every query (GTA-RAG eq 9): K_g graph + K_d dense hits, deduplicated.

        Raises:
            ValueError / TypeError: On an empty, whitespace or non-string query (the
                Ray and HTTP clients turn this into an error result).
        """
        c = self.config
        k_d = c.k_dense if c.mode != "graph" else max(c.k_graph, 1)  # graph fallback = dense top-K_g
        return self._run(queries, c.k_graph, k_d)

    def rank(self, queries: Sequence[str], k: int | None = None) -> list[RetrievalResult]:
        """A full ranking of the first ``k`` documents per query (for recall@k).

        The hybrid order is the configured ``fusion`` of the PPR and dense rankings
        (each cut at ``k``), truncated to ``k``; ``source`` says which of the two
        top-``k`` lists holds a document.
        """
        k = self.kb.n_docs if k is None else min(k, self.kb.n_docs)
        if k < 1:
            raise ValueError(f"rank() needs k >= 1, got {k}")
        return self._run(queries, k, k, limit=k)
