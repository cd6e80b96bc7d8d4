"""Configuration of the retrieval environment R(q) (mirrors the ``gta.retrieval`` YAML node)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeGuard, get_args

from gta_verl.retrieval.ppr.choice import PPR_METHODS, Method, pick_solver
from gta_verl.strict_config import StrictConfig

Backend = Literal["graph", "dense", "bm25"]
Mode = Literal["hybrid", "dense", "graph"]
IndexKind = Literal["flat", "ivf", "hnsw", "ivfpq"]
Fusion = Literal["dense_head", "interleave", "rrf", "graph_first", "dense_first", "score"]

#: The one list of each: the values the type names, in its order.
BACKENDS: tuple[str, ...] = get_args(Backend)
MODES: tuple[str, ...] = get_args(Mode)
INDEX_KINDS: tuple[str, ...] = get_args(IndexKind)
FUSIONS: tuple[str, ...] = get_args(Fusion)
#: What :class:`RetrieverConfig` says of a ``mode`` outside :data:`MODES`.
MODE_RULE = f"must be one of {MODES} (dense = the 'w/o graph retrieval' ablation)"
#: What :class:`RetrieverConfig` says of a ``backend`` outside :data:`BACKENDS`.
BACKEND_RULE = f"must be one of {BACKENDS} (graph = the GTA-RAG hybrid R(q), the default)"


def as_mode(name: str) -> Mode:
    """``name`` as a :data:`Mode`; raises the ``ValueError`` :class:`RetrieverConfig` raises for it."""
    if not _is_mode(name):
        raise ValueError(f"RetrieverConfig.mode={name!r}: {MODE_RULE}")
    return name


def _is_mode(name: str) -> TypeGuard[Mode]:
    return name in MODES


@dataclass(frozen=True)
class RetrieverConfig(StrictConfig):
    """Every knob of the retrieval environment R(q), whichever backend serves it.

    Defaults follow GTA-RAG / HippoRAG 2 (see ``docs/retrieval.md`` for the why).

    Attributes:
        backend: Which retriever :func:`gta_verl.retrieval.backends.open_retriever` opens:
            ``graph`` (default) = GTA-RAG's hybrid R(q) below, every other knob applies;
            ``dense`` = the top ``k_dense`` passages by embedding inner product (Search-R1's
            retriever; equal to ``graph`` with ``mode="dense"``, without building the graph);
            ``bm25`` = the top ``k_dense`` passages by BM25 (``bm25_k1``, ``bm25_b``). The graph
            knobs (``mode``, ``k_graph``, PPR, fusion, triple index) apply to ``graph`` only.
        mode: ``hybrid`` = Dedup(R_g ∪ R_d) (GTA-RAG eq 9); ``dense`` = R_d only (the
            "w/o graph retrieval" ablation); ``graph`` = R_g only (HippoRAG 2 retrieval).
        k_graph: K_g, documents taken from the PPR ranking.
        k_dense: K_d, documents taken from the dense ranking.
        alpha: PPR restart probability α (eq 7); igraph damping = 1 − α.
        top_n_triples: Triples whose scores seed entity nodes (HippoRAG 2 ``linking_top_k``).
        max_seed_entities: Entities kept in the personalization, ranked by mean linked
            triple score (HippoRAG 2 keeps ``linking_top_k``); ``0`` keeps all.
        doc_frequency_norm: Divide an entity's seed weight by the number of documents
            it occurs in (HippoRAG 2), so hub entities do not swamp the walk.
        triple_score_norm: ``minmax`` rescales triple cosines to [0, 1] over all
            triples (HippoRAG 2); ``raw`` uses cosines as they are.
        passage_node_weight: Weight of the min–max-normalized dense passage scores
            added to document nodes of the personalization (HippoRAG 2: 0.05); 0 = off.
        min_triple_score: A linked triple is usable only if its raw cosine exceeds
            this; no usable triple → dense-only result flagged ``no_entities_dense_only``.
        fusion: Order of the hybrid list (see ``docs/retrieval.md``): ``dense_head`` =
            the top ``dense_head`` dense documents first, then the PPR order
            (default, head 3 = K_d: dense precision at the top, PPR depth below it;
            chosen on tune halves of MuSiQue and HotpotQA, ≥ dense and ≥ graph at every
            k on their held-out halves);
            ``interleave`` = g1, d1, g2, d2 …; ``rrf`` = reciprocal-rank fusion;
            ``graph_first`` / ``dense_first`` = one list then the other; ``score`` =
            by ``fusion_weight`` × min–max dense cosine + (1 − ``fusion_weight``) ×
            max-normalized PPR score over the candidates
            (:func:`gta_verl.retrieval.fusion.score_fusion`).
        dense_head: Dense documents placed first by ``fusion="dense_head"``.
        rrf_k: Constant of reciprocal-rank fusion.
        fusion_weight: λ ∈ [0, 1] of ``fusion="score"``: the weight of the dense term.
        index: Faiss index of the triple vectors: ``flat`` (exact, default), ``ivf``, ``hnsw``
            or ``ivfpq`` (approximate, for millions of triples;
            :class:`~gta_verl.retrieval.index.VectorIndex`).
        passage_index: Index of the passage vectors: ``flat`` (default) = exact inner products with
            every passage; ``ivf`` / ``hnsw`` / ``ivfpq`` = approximate candidates (``index_refine`` × k
            of them), rescored exactly, so scores stay cosines and only recall can drop (opt-in for
            corpora of millions; docs/retrieval.md). In the ``graph`` backend it also gives the
            min and max of the dense scores that the personalization's min–max normalization needs
            without a full scan (:mod:`gta_verl.retrieval.dense_candidates`); a PPR solver other
            than ``linear`` still scores every passage for its personalization.
        basis_index: Index of the rows ``[Z | g]`` of the ``linear`` PPR's passage basis: ``flat``
            (default) = the exact GEMV against every row; ``ivf`` / ``hnsw`` / ``ivfpq`` = a
            maximum-inner-product search for ``index_refine`` × k candidate documents, whose
            scores are then computed exactly, together with the documents the entity-seed push
            reached (:mod:`gta_verl.retrieval.ppr.linear_approx`). Read only when ``linear`` runs.
        index_refine: Candidates per wanted row that an approximate ``index``, ``passage_index`` or
            ``basis_index`` returns for exact rescoring (:class:`~gta_verl.retrieval.index.VectorIndex`).
        ivf_nprobe: Lists probed by the IVF index.
        hnsw_m: Graph degree of the HNSW index.
        hnsw_ef_search: Candidates the HNSW index keeps while it searches (faiss ``efSearch``).
        triple_scan: How the exact ``flat`` triple search scores: ``auto`` (default) = a
            bfloat16 pre-scan certified to return the float32 top-n and minimum
            (:class:`gta_verl.retrieval.index.Bf16Scan`) where the CPU multiplies bfloat16 natively
            (AVX512-BF16 / AMX), else float32; ``float32`` / ``bfloat16`` force one.
        max_query_chars: Longer queries are truncated (flag ``query_truncated``).
        max_query_words: Same, counted in whitespace-separated words; 0 = no limit.
        ppr_method: ``linear`` (default) = exact PPR by linearity: the dense-passage part of
            ``p_q`` through a passage basis solved once per KB (one GEMV per query) plus a forward
            push from the ≤ ``max_seed_entities`` entity seeds (:mod:`gta_verl.retrieval.ppr.linear`;
            CPU, every document seeded; otherwise ``fused``). At HotpotQA-10K scale 8× faster than
            ``fused`` with the igraph top-10 on 100 % of queries (docs/benchmarks.md). ``fused`` =
            power iteration as one multithreaded numba pass per step over the query block
            (:mod:`gta_verl.retrieval.ppr.fused_power`; CPU, ``cg`` on a GPU ``device``); ``push`` = local
            forward push of the whole ``p_q`` (:func:`gta_verl.retrieval.ppr.push.push_ppr`; cost
            independent of graph size only with a sparse personalization, ``passage_seed_top`` >
            0); ``cg`` / ``power`` = scipy/torch batched solvers (``batched_ppr``; torch for a GPU
            ``device``). Where the configured solver cannot run, the one that does is picked by
            :func:`gta_verl.retrieval.ppr.choice.choose_solver`, which logs why.
        ppr_push_eps: Residual threshold of ``push`` per unit of weighted degree (score
            error ≤ eps × degree; 3e-8 reproduced the exact ordered top-10 on every bundled MuSiQue
            question, 1e-7 the top-10 sets; see docs/benchmarks.md).
        ppr_linear_eps: Push threshold of ``linear`` per unit of weighted degree, in units of the
            final probability (a document's score is low by at most eps × degree / α; 1e-9 kept
            scores within 2e-8 of the exact solver on the bundled MuSiQue questions).
        passage_seed_top: Documents seeded with their dense score: the best ``n`` by dense
            score (a sparse personalization), or ``0`` = every document (HippoRAG 2).
        ppr_tol: Where PPR stops: L1 change between iterates (``fused``/``power``) or relative
            residual (``cg``); 1e-7 is float32's floor (see ``batched_ppr``).
        ppr_max_iter: PPR iteration cap.
        ppr_block_size: Queries solved together inside one PPR block.
        ppr_dtype: ``float32`` (default: half the memory traffic; scores within 1e-7 of
            igraph) or ``float64`` (with ``ppr_tol=1e-8``: within 1e-10).
        batch_size: Queries embedded and solved per chunk (bounds memory: a chunk
            needs ``batch_size × n_nodes × 8`` bytes of personalization).
        device: ``cpu`` or a torch device for the PPR products.
        encoder_device: ``cpu`` or a torch device for the query encoder (e.g. ``cuda`` on a GPU
            node: the Ray retriever actor asks for no GPU, yet Ray leaves it the node's devices).
        bm25_k1: BM25 term-frequency saturation ``k1`` (``backend="bm25"``; Lucene's 1.2–2, 1.5 here).
        bm25_b: BM25 length normalization ``b`` ∈ [0, 1] (``backend="bm25"``; 0.75).
    """

    WHERE = "RetrieverConfig"

    backend: Backend = "graph"
    mode: Mode = "hybrid"
    k_graph: int = 3
    k_dense: int = 3
    alpha: float = 0.5
    top_n_triples: int = 5
    max_seed_entities: int = 5
    doc_frequency_norm: bool = True
    triple_score_norm: Literal["minmax", "raw"] = "minmax"
    passage_node_weight: float = 0.05
    min_triple_score: float = 0.0
    fusion: Fusion = "dense_head"
    dense_head: int = 3
    rrf_k: float = 60.0
    fusion_weight: float = 0.5
    index: IndexKind = "flat"
    passage_index: IndexKind = "flat"
    basis_index: IndexKind = "flat"
    index_refine: int = 4
    ivf_nprobe: int = 16
    hnsw_m: int = 32
    hnsw_ef_search: int = 128
    triple_scan: Literal["auto", "float32", "bfloat16"] = "auto"
    max_query_chars: int = 2000
    max_query_words: int = 256
    ppr_method: Method = "linear"
    ppr_push_eps: float = 3e-8
    ppr_linear_eps: float = 1e-6
    passage_seed_top: int = 0
    ppr_tol: float = 1e-7
    ppr_max_iter: int = 100
    ppr_block_size: int = 64
    ppr_dtype: Literal["float64", "float32"] = "float32"
    batch_size: int = 256
    device: str = "cpu"
    encoder_device: str = "cpu"
    bm25_k1: float = 1.5
    bm25_b: float = 0.75

    @property
    def uses_passage_basis(self) -> bool:
        """``ppr_method="linear"`` applies: every document seeded (the basis is linear in them), on CPU."""
        return pick_solver(self.ppr_method, self.passage_seed_top, self.device).uses_passage_basis

    def _bad(self, name: str, msg: str) -> ValueError:
        return ValueError(f"RetrieverConfig.{name}={getattr(self, name)!r}: {msg}")

    def __post_init__(self) -> None:
        self._check_choices()
        self._check_counts()
        bad = self._bad
        if not 0.0 < self.ppr_linear_eps < 1.0:
            raise bad("ppr_linear_eps", "must be in (0, 1)")
        if not 0.0 < self.ppr_push_eps < 1.0:
            raise bad("ppr_push_eps", "must be in (0, 1); 3e-8 reproduces the exact top-10")
        if not 0.0 < self.alpha < 1.0:
            raise bad("alpha", "the restart probability must be in (0, 1); HippoRAG 2 uses 0.5")
        if self.passage_node_weight < 0:
            raise bad("passage_node_weight", "must be >= 0 (0 disables dense seeds)")
        if not 0.0 < self.ppr_tol < 1.0:
            raise bad("ppr_tol", "must be in (0, 1); 1e-8 matches igraph to ~1e-10")
        if self.rrf_k <= 0:
            raise bad("rrf_k", "must be > 0")
        if not 0.0 <= self.fusion_weight <= 1.0:
            raise bad("fusion_weight", "the dense weight of fusion='score' must be in [0, 1]")
        if self.bm25_k1 < 0 or not 0.0 <= self.bm25_b <= 1.0:
            raise bad("bm25_k1", f"BM25 needs k1 >= 0 and b in [0, 1], got b={self.bm25_b!r}")

    def _check_choices(self) -> None:
        """Every named choice is one of its type's values."""
        bad = self._bad
        if self.backend not in BACKENDS:
            raise bad("backend", BACKEND_RULE)
        if self.mode not in MODES:
            raise bad("mode", MODE_RULE)
        for name in ("index", "passage_index", "basis_index"):
            if getattr(self, name) not in INDEX_KINDS:
                raise bad(name, f"must be one of {INDEX_KINDS}")
        if self.fusion not in FUSIONS:
            raise bad("fusion", f"must be one of {FUSIONS}")
        if self.triple_scan not in ("auto", "float32", "bfloat16"):
            raise bad("triple_scan", "must be 'auto', 'float32' or 'bfloat16'")
        if self.triple_score_norm not in ("minmax", "raw"):
            raise bad("triple_score_norm", "must be 'minmax' or 'raw'")
        if self.ppr_method not in PPR_METHODS:
            raise bad("ppr_method", f"must be one of {PPR_METHODS}")
        if self.ppr_dtype not in ("float64", "float32"):
            raise bad("ppr_dtype", "must be 'float64' or 'float32'")

    def _check_counts(self) -> None:
        """Counts are in range, and the chosen mode or backend returns something."""
        bad = self._bad
        for name in ("k_graph", "k_dense"):
            if getattr(self, name) < 0:
                raise bad(name, "must be >= 0")
        if self.mode == "hybrid" and self.k_graph + self.k_dense == 0:
            raise bad("k_graph", "k_graph + k_dense must be > 0 in hybrid mode")
        if self.mode == "graph" and self.k_graph == 0 or self.mode == "dense" and self.k_dense == 0:
            raise bad("mode", "the chosen mode returns nothing with its K set to 0")
        if self.backend != "graph" and self.k_dense == 0:
            raise bad("k_dense", f"backend={self.backend!r} returns the top k_dense passages: must be >= 1")
        positive = ("top_n_triples", "ppr_max_iter", "ppr_block_size", "batch_size", "max_query_chars")
        for name in (*positive, "index_refine"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        counts = ("passage_seed_top", "max_seed_entities", "max_query_words", "dense_head", "ivf_nprobe")
        for name in (*counts, "hnsw_m", "hnsw_ef_search"):
            if getattr(self, name) < 0:
                raise bad(name, "must be >= 0")
