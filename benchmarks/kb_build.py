"""Benchmark KB construction: stage times and peak memory, with in-run references.

    python benchmarks/kb_build.py [--spacy-corpus /path/2wikimultihopqa_corpus.json] [--spacy-sample 500]
        [--cold-sample 1000]

Measures on the bundled MuSiQue subset (precomputed GPT-3.5 triples):
    * OpenIE file load + table normalization;
    * embedding: cold (fresh cache, ``--cold-sample`` texts, after warm-up) vs disk-cached (all texts);
    * synonymy (faiss range search, δ = 0.8, ≤ k = 2047 per entity) vs HippoRAG 2's faiss k-NN search + threshold;
    * graph: one ``igraph.Graph`` call from edge lists vs HippoRAG-style per-edge ``add_edge``;
    * spaCy extraction passages/s on ``--spacy-corpus`` (e.g. the 2Wiki corpus, 6,119 passages).
Prints one markdown table; peak RSS is the process high-water mark after each stage.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
MUSIQUE = REPO / "assets" / "musique"
OPENIE = MUSIQUE / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, *a, **k):
    t = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t


def knn_synonymy(emb: np.ndarray, ok: np.ndarray, thr: float, k: int) -> int:
    """Reference (HippoRAG 2 way): faiss k-NN search with k + 1 results per entity, then threshold."""
    import faiss

    idx = np.flatnonzero(ok)
    e = np.ascontiguousarray(emb[idx])
    index = faiss.IndexFlatIP(e.shape[1])
    index.add(e)
    pairs = set()
    for s in range(0, len(idx), 2048):
        scores, nbrs = index.search(e[s : s + 2048], min(k + 1, len(idx)))
        for r, c in zip(*np.nonzero(scores >= thr)):
            a, b = int(idx[s + r]), int(idx[nbrs[r, c]])
            if a != b:
                pairs.add((min(a, b), max(a, b)))
    return len(pairs)


def per_edge_graph(n: int, edges, weights, kinds):
    """Reference: HippoRAG-style construction, one ``add_edge`` call per edge."""
    import igraph as ig

    g = ig.Graph(n=n, directed=False)
    for (a, b), w, kd in zip(edges, weights, kinds):
        g.add_edge(a, b, weight=w, kind=kd)
    return g


def bench_musique(cold_sample: int) -> list[tuple[str, float, str]]:
    from gta_verl.data.loaders import read_hipporag_corpus
    from gta_verl.kb.build import KBConfig
    from gta_verl.kb.embed import HFEmbedder, load_embedder
    from gta_verl.kb.graph import assemble_graph, collect_nodes, relation_edges, synonymy_edges
    from gta_verl.kb.normalize import alnum_count
    from gta_verl.kb.openie.base import run_openie
    from gta_verl.kb.openie.precomputed import PrecomputedOpenIE

    rows: list[tuple[str, float, str]] = []
    passages = read_hipporag_corpus(MUSIQUE / "musique_train_corpus.json").records
    (exs, _), t = timed(lambda: run_openie(PrecomputedOpenIE(OPENIE), passages, progress=False))
    rows.append(("OpenIE file load (1,890 passages)", t, ""))
    nodes, t = timed(collect_nodes, passages, exs)
    rows.append((f"normalize → tables ({len(nodes.entities):,} entities, {len(nodes.triples):,} triples)", t, ""))
    texts = [p.contents for p in passages] + nodes.entities + [tr.text for tr in nodes.triples]

    emb = load_embedder()
    emb.encode(["warm up"] * 64)  # first forward in a process is 3-4x slower
    with tempfile.TemporaryDirectory() as tmp:
        from gta_verl.kb.embed import CachedEmbedder, EmbeddingCache

        inner = emb.inner if hasattr(emb, "inner") else emb
        assert isinstance(inner, HFEmbedder)
        cold = CachedEmbedder(inner, EmbeddingCache(inner.identity, Path(tmp)))
        sample = texts[:: max(1, len(texts) // cold_sample)][:cold_sample]
        _, t_cold = timed(cold.encode, sample)
    rate = len(sample) / t_cold
    rows.append((f"embedding, cold ({len(sample):,} texts, warm model)", t_cold,
                 f"{rate:.0f} texts/s → all {len(texts):,} ≈ {len(texts) / rate:.0f} s"))
    _, t_cached = timed(emb.encode, texts)  # the second call is always a cache hit
    vecs, t_cached = timed(emb.encode, texts)
    rows.append((f"embedding, disk-cached (all {len(texts):,} texts)", t_cached,
                 f"{(len(texts) / rate) / t_cached:.0f}× faster than cold"))
    ent = vecs[len(passages) : len(passages) + len(nodes.entities)]
    cfg = KBConfig()
    syn, t_faiss = timed(synonymy_edges, ent, nodes.entities, cfg.synonymy_threshold, cfg.synonymy_k)
    ok = np.array([alnum_count(e) >= 3 for e in nodes.entities])
    n_ref, t_knn = timed(knn_synonymy, ent, ok, cfg.synonymy_threshold, cfg.synonymy_k)
    rows.append((f"synonymy, faiss range search capped at k ({len(syn):,} pairs)", t_faiss,
                 f"{t_knn / t_faiss:.1f}× vs faiss k-NN k=2047 then threshold ({t_knn:.1f} s, {n_ref:,} pairs)"))
    rel = relation_edges(nodes.triple_entity_ids)
    (g, _), t_graph = timed(assemble_graph, len(passages), len(nodes.entities), nodes.doc_entity, rel, syn)
    _, t_ref = timed(per_edge_graph, g.vcount(), g.get_edgelist(), g.es["weight"], g.es["kind"])
    rows.append((f"graph, one igraph call ({g.ecount():,} edges)", t_graph,
                 f"{t_ref / t_graph:.0f}× vs per-edge add_edge ({t_ref:.1f} s)"))
    rows.append(("peak RSS after MuSiQue stages", 0.0, f"{peak_mb():,.0f} MB"))
    return rows


def bench_spacy(corpus: Path, sample: int) -> list[tuple[str, float, str]]:
    from gta_verl.data.loaders import read_corpus
    from gta_verl.kb.openie.spacy_backend import SpacyOpenIE

    passages = read_corpus(corpus).records
    step = max(1, len(passages) // sample)
    chosen = passages[::step][:sample]
    be = SpacyOpenIE()
    list(be.extract(passages[:8]))  # warm-up
    exs, t = timed(lambda: list(be.extract(chosen)))
    n_tr = sum(len(e.triples) for e in exs)
    return [(f"spaCy NER+SVO on {corpus.name} ({len(chosen):,} of {len(passages):,} passages)", t,
             (f"{len(chosen) / t:.1f} passages/s, {n_tr / len(chosen):.1f} triples/passage → full corpus "
              f"≈ {len(passages) / (len(chosen) / t):.0f} s"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spacy-corpus", type=Path, default=None, help="corpus for spaCy throughput")
    ap.add_argument("--spacy-sample", type=int, default=500)
    ap.add_argument("--cold-sample", type=int, default=1000, help="texts embedded without cache")
    a = ap.parse_args()
    rows = bench_musique(a.cold_sample)
    if a.spacy_corpus:
        rows += bench_spacy(a.spacy_corpus, a.spacy_sample)
    print(f"\nCPU cores: {os.cpu_count()}\n")
    print("| stage | seconds | notes |\n|---|---:|---|")
    for name, sec, note in rows:
        print(f"| {name} | {sec:.2f} | {note} |")


if __name__ == "__main__":
    main()
