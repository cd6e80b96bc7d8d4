"""Benchmark KB construction: stage times and peak memory, with in-run references.

    python -m benchmarks.kb.kb_build [--spacy-corpus /path/2wikimultihopqa_corpus.json] [--spacy-sample 500]
        [--cold-sample 1000] [--builds new,old] [--only-builds]

Cold build (first table): the whole ``build_kb_from_files`` on the bundled MuSiQue subset, each in a
fresh interpreter with an empty embedding cache, once with the package's encoder (``new``: de-duplicated,
tokenized once, sorted by token count, token-budget batches, threads = CPUs) and once with the plain
reference encoder (``old``, :func:`legacy_encode`: per-batch tokenizer padding of 64 texts sorted
by characters), per stage, with the per-row cosine between the two builds' vectors.

Then the stages, on the bundled MuSiQue subset (precomputed GPT-3.5 triples):
    * OpenIE file load + table normalization;
    * embedding: cold (fresh cache, ``--cold-sample`` texts, after warm-up) vs disk-cached (all texts);
    * synonymy (faiss range search, δ = 0.8, ≤ k = 2047 per entity) vs HippoRAG 2's faiss k-NN search
      + threshold;
    * graph: one ``igraph.Graph`` call from edge lists vs HippoRAG-style per-edge ``add_edge``;
    * spaCy extraction passages/s on ``--spacy-corpus`` (e.g. the 2Wiki corpus, 6,119 passages).
Prints one markdown table; peak RSS is the process high-water mark after each stage.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gta_verl.bundled import MUSIQUE_DIR, MUSIQUE_OPENIE

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
MUSIQUE = MUSIQUE_DIR
OPENIE = MUSIQUE_OPENIE


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, *a, **k):
    t = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t


def legacy_encode(self, texts, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
    """Reference: the plain encoder path, verbatim from ``HFEmbedder.encode`` at commit 12e057c.

    Batches of ``batch_size`` texts sorted by character count, each tokenized with padding.
    """
    from gta_verl.kb.embed import l2_normalize

    texts = [str(t) for t in texts]
    out = np.zeros((len(texts), self.dim), dtype=np.float32)
    if not texts:
        return out
    order = np.argsort([-len(t) for t in texts], kind="stable")
    torch = self._torch
    with self._lock, torch.inference_mode():
        for s in range(0, len(texts), batch_size):
            idx = order[s : s + batch_size]
            enc = self.tokenizer(
                [texts[i] for i in idx],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**enc).last_hidden_state  # [b, L, dim]
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [b, L, 1]
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[idx] = pooled.float().cpu().numpy()
    return l2_normalize(out)


def one_cold_build(mode: str, out: Path) -> dict:
    """Child process: one cold ``build_kb_from_files`` (empty embedding cache set by the parent)."""
    t_start = time.perf_counter()
    import gta_verl.kb.build as build
    import gta_verl.kb.store as store
    from gta_verl.kb.embed import HFEmbedder

    if mode == "old":
        HFEmbedder.encode = legacy_encode
    t_import = time.perf_counter() - t_start
    spent: dict[str, float] = {}

    def clock(name, fn):
        def wrapped(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

        return wrapped

    build.load_embedder = clock("model load (with torch, transformers imports)", build.load_embedder)
    store.save_kb = clock("save (parquet, npy, sha256)", store.save_kb)
    build.extract_passages = clock("read OpenIE file", build.extract_passages)
    t = time.perf_counter()
    kb = build.build_kb_from_files(
        MUSIQUE / "musique_train_corpus.json", "hipporag", f"precomputed:{OPENIE}", out, progress=False
    )
    total = time.perf_counter() - t
    tm = kb.manifest["timings"]
    stages = {
        **spent,
        "normalize → tables": tm["tables_s"],
        "embedding": tm["embedding_s"],
        "synonymy (faiss range search)": tm["synonymy_s"],
        "graph (igraph)": tm["graph_s"],
    }
    stages["read corpus, stats, other"] = total - sum(stages.values())
    stages = {"imports (gta_verl.kb, igraph, faiss)": t_import, **stages}
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "stages": stages,
        "total": t_import + total,
        "peak_mb": peak_mb(),
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "synonymy_edges": kb.manifest["counts"].get("synonymy_edges"),
    }


def bench_cold_builds(modes: list[str], threads: int = 0) -> tuple[list[str], dict[str, dict]]:
    """Each mode in a fresh interpreter with its own empty ``GTA_VERL_CACHE`` (nothing warm)."""
    res: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            env = {**os.environ, "GTA_VERL_CACHE": str(Path(tmp) / f"cache-{mode}")}
            if threads:  # both paths: torch reads OMP_NUM_THREADS at start-up
                env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
            out = Path(tmp) / f"kb-{mode}"
            t = time.perf_counter()
            cmd = [sys.executable, "-m", "benchmarks.kb.kb_build", "--_one-build", mode, "--_out", str(out)]
            proc = subprocess.run(
                cmd,
                env=env,
                cwd=Path(__file__).resolve().parents[2],
                capture_output=True,
                text=True,
                check=False,
            )
            wall = time.perf_counter() - t
            if proc.returncode:
                raise RuntimeError(f"{mode} build failed:\n{proc.stderr[-3000:]}")
            res[mode] = {
                **json.loads(proc.stdout.strip().splitlines()[-1]),
                "wall": wall,
                "load_after": os.getloadavg(),
            }
        lines = _build_table(res)
        if {"old", "new"} <= set(res):
            lines += _agreement(Path(tmp) / "kb-old", Path(tmp) / "kb-new", res)
    return lines, res


def _build_table(res: dict[str, dict]) -> list[str]:
    modes = list(res)
    tail = " | old / new |" if len(modes) > 1 else " |"
    lines = [
        "| stage | " + " | ".join(f"{m} (s)" for m in modes) + tail,
        "|---|" + "---:|" * (len(modes) + (len(modes) > 1)),
    ]
    for stage in res[modes[0]]["stages"]:
        vals = [res[m]["stages"][stage] for m in modes]
        ratio = (
            f" {vals[modes.index('old')] / max(vals[modes.index('new')], 1e-9):.2f}× |"
            if {"old", "new"} <= set(modes)
            else ""
        )
        lines.append(f"| {stage} | " + " | ".join(f"{v:.2f}" for v in vals) + " |" + ratio)
    tot = [res[m]["wall"] for m in modes]
    ratio = f" **{res['old']['wall'] / res['new']['wall']:.2f}×** |" if {"old", "new"} <= set(modes) else ""
    lines.append("| **cold build, process wall** | " + " | ".join(f"**{v:.1f}**" for v in tot) + " |" + ratio)
    both = {"old", "new"} <= set(modes)
    lines.append(
        "| CPU seconds, all threads (user + sys) | "
        + " | ".join(f"{res[m]['cpu_s']:.0f}" for m in modes)
        + " |"
        + (f" {res['old']['cpu_s'] / res['new']['cpu_s']:.2f}× |" if both else "")
    )
    lines.append(
        "| peak RSS (MB) | "
        + " | ".join(f"{res[m]['peak_mb']:,.0f}" for m in modes)
        + " |"
        + (" |" if len(modes) > 1 else "")
    )
    lines.append(
        "| load average (1 min) after | "
        + " | ".join(f"{res[m]['load_after'][0]:.1f}" for m in modes)
        + " |"
        + (" |" if len(modes) > 1 else "")
    )
    return lines


def _agreement(old: Path, new: Path, res: dict[str, dict]) -> list[str]:
    """Per-row cosine of the two builds' vectors (both L2-normalized) and their synonymy edges."""
    out = ["", "| vectors (new vs old build) | rows | min cosine | mean cosine |", "|---|---:|---:|---:|"]
    for name in ("passage_emb", "entity_emb", "triple_emb"):
        a, b = np.load(old / f"{name}.npy"), np.load(new / f"{name}.npy")
        cos = np.einsum("ij,ij->i", a, b)
        out.append(f"| {name} | {len(cos):,} | {cos.min():.7f} | {cos.mean():.7f} |")
    out.append(
        f"\nsynonymy edges: old {res['old']['synonymy_edges']:,}, new {res['new']['synonymy_edges']:,}"
    )
    return out


def build_texts() -> list[str]:
    """Every text the bundled MuSiQue KB build embeds: passages, entities, triples (in that order)."""
    from gta_verl.data.loaders import read_hipporag_corpus
    from gta_verl.kb.build import as_extractions
    from gta_verl.kb.graph import collect_nodes
    from gta_verl.kb.openie.base import run_openie
    from gta_verl.kb.openie.precomputed import PrecomputedOpenIE

    passages = read_hipporag_corpus(MUSIQUE / "musique_train_corpus.json").records
    exs, _ = run_openie(PrecomputedOpenIE(OPENIE), passages, progress=False)
    nodes = collect_nodes(passages, as_extractions(exs))
    return [p.contents for p in passages] + list(nodes.entities) + [t.text for t in nodes.triples]


def bench_embed_sample(step: int) -> list[str]:
    """Encoder only, same model and process: every ``step``-th build text, old vs new path."""
    from gta_verl.kb.embed import load_embedder

    texts = build_texts()
    sample = texts[::step]
    model = load_embedder(cache=False)
    model.encode(["warm up"] * 64)
    legacy_encode(model, ["warm up"] * 64)
    res = {}
    for name, fn in (("old", lambda: legacy_encode(model, sample)), ("new", lambda: model.encode(sample))):
        t, c = time.perf_counter(), time.process_time()
        res[name] = (fn(), time.perf_counter() - t, time.process_time() - c)
    cos = np.einsum("ij,ij->i", res["old"][0], res["new"][0])
    lines = [
        f"encoder only: {len(sample):,} of {len(texts):,} build texts (every {step}th), "
        f"torch threads {__import__('torch').get_num_threads()}",
        "",
        "| path | wall s | CPU s | old / new (CPU) |",
        "|---|---:|---:|---:|",
    ]
    for name in ("old", "new"):
        lines.append(
            f"| {name} | {res[name][1]:.1f} | {res[name][2]:.1f} | {res['old'][2] / res[name][2]:.2f}× |"
        )
    lines.append(f"\nper-row cosine new vs old: min {cos.min():.7f}")
    return lines


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
        for r, c in zip(*np.nonzero(scores >= thr), strict=True):
            a, b = int(idx[s + r]), int(idx[nbrs[r, c]])
            if a != b:
                pairs.add((min(a, b), max(a, b)))
    return len(pairs)


def per_edge_graph(n: int, edges, weights, kinds):
    """Reference: HippoRAG-style construction, one ``add_edge`` call per edge."""
    import igraph as ig

    g = ig.Graph(n=n, directed=False)
    for (a, b), w, kd in zip(edges, weights, kinds, strict=True):
        g.add_edge(a, b, weight=w, kind=kd)
    return g


def _embedding_rows(texts: list[str], cold_sample: int) -> tuple[list[tuple[str, float, str]], np.ndarray]:
    """(the cold and disk-cached embedding rows, the vectors of ``texts``)."""
    from gta_verl.kb.embed import CachedEmbedder, EmbeddingCache, HFEmbedder, load_embedder

    emb = load_embedder()
    emb.encode(["warm up"] * 64)  # first forward in a process is 3-4x slower
    with tempfile.TemporaryDirectory() as tmp:
        inner = emb.inner if hasattr(emb, "inner") else emb
        assert isinstance(inner, HFEmbedder)
        cold = CachedEmbedder(inner, EmbeddingCache(inner.identity, Path(tmp)))
        sample = texts[:: max(1, len(texts) // cold_sample)][:cold_sample]
        _, t_cold = timed(cold.encode, sample)
    rate = len(sample) / t_cold
    _, t_cached = timed(emb.encode, texts)  # the second call is always a cache hit
    vecs, t_cached = timed(emb.encode, texts)
    rows = [
        (
            f"embedding, cold ({len(sample):,} texts, warm model)",
            t_cold,
            f"{rate:.0f} texts/s → all {len(texts):,} ≈ {len(texts) / rate:.0f} s",
        ),
        (
            f"embedding, disk-cached (all {len(texts):,} texts)",
            t_cached,
            f"{(len(texts) / rate) / t_cached:.0f}× faster than cold",
        ),
    ]
    return rows, vecs


def _graph_rows(n_docs: int, nodes: Any, ent: np.ndarray) -> list[tuple[str, float, str]]:
    """The synonymy row (vs faiss k-NN then threshold) and the graph row (vs per-edge ``add_edge``)."""
    from gta_verl.kb.build import KBConfig
    from gta_verl.kb.graph import assemble_graph, relation_edges, synonymy_edges
    from gta_verl.kb.normalize import alnum_count

    cfg = KBConfig()
    syn, t_faiss = timed(synonymy_edges, ent, nodes.entities, cfg.synonymy_threshold, cfg.synonymy_k)
    ok = np.array([alnum_count(e) >= 3 for e in nodes.entities])
    n_ref, t_knn = timed(knn_synonymy, ent, ok, cfg.synonymy_threshold, cfg.synonymy_k)
    rel = relation_edges(nodes.triple_entity_ids)
    (g, _), t_graph = timed(assemble_graph, n_docs, len(nodes.entities), nodes.doc_entity, rel, syn)
    _, t_ref = timed(per_edge_graph, g.vcount(), g.get_edgelist(), g.es["weight"], g.es["kind"])
    return [
        (
            f"synonymy, faiss range search capped at k ({len(syn):,} pairs)",
            t_faiss,
            f"{t_knn / t_faiss:.1f}× vs faiss k-NN k=2047 then threshold ({t_knn:.1f} s, {n_ref:,} pairs)",
        ),
        (
            f"graph, one igraph call ({g.ecount():,} edges)",
            t_graph,
            f"{t_ref / t_graph:.0f}× vs per-edge add_edge ({t_ref:.1f} s)",
        ),
    ]


def bench_musique(cold_sample: int) -> list[tuple[str, float, str]]:
    from gta_verl.data.loaders import read_hipporag_corpus
    from gta_verl.kb.graph import collect_nodes
    from gta_verl.kb.openie.base import run_openie
    from gta_verl.kb.openie.precomputed import PrecomputedOpenIE

    rows: list[tuple[str, float, str]] = []
    passages = read_hipporag_corpus(MUSIQUE / "musique_train_corpus.json").records
    (exs, _), t = timed(lambda: run_openie(PrecomputedOpenIE(OPENIE), passages, progress=False))
    rows.append(("OpenIE file load (1,890 passages)", t, ""))
    nodes, t = timed(collect_nodes, passages, exs)
    rows.append(
        (f"normalize → tables ({len(nodes.entities):,} entities, {len(nodes.triples):,} triples)", t, "")
    )
    texts = [p.contents for p in passages] + nodes.entities + [tr.text for tr in nodes.triples]
    embedding_rows, vecs = _embedding_rows(texts, cold_sample)
    rows += embedding_rows
    ent = vecs[len(passages) : len(passages) + len(nodes.entities)]
    rows += _graph_rows(len(passages), nodes, ent)
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
    return [
        (
            f"spaCy NER+SVO on {corpus.name} ({len(chosen):,} of {len(passages):,} passages)",
            t,
            (
                f"{len(chosen) / t:.1f} passages/s, {n_tr / len(chosen):.1f} triples/passage → full corpus "
                f"≈ {len(passages) / (len(chosen) / t):.0f} s"
            ),
        )
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spacy-corpus", type=Path, default=None, help="corpus for spaCy throughput")
    ap.add_argument("--spacy-sample", type=int, default=500)
    ap.add_argument("--cold-sample", type=int, default=1000, help="texts embedded without cache")
    ap.add_argument("--builds", default="new,old", help="cold whole builds to run, in this order ('' = none)")
    ap.add_argument("--only-builds", action="store_true", help="skip the per-stage table")
    ap.add_argument(
        "--embed-sample",
        type=int,
        default=0,
        help="also time the encoder alone, old vs new, on every Nth build text",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS for both builds (1: CPU seconds that contention does not inflate)",
    )
    ap.add_argument("--_one-build", dest="one_build", choices=("new", "old"), help=argparse.SUPPRESS)
    ap.add_argument("--_out", dest="out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one_build:
        print(json.dumps(one_cold_build(a.one_build, a.out)))
        return
    print(f"\nCPU cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.1f}\n")
    if a.embed_sample:
        print("\n".join(bench_embed_sample(a.embed_sample)) + "\n", flush=True)
    modes = [m for m in a.builds.split(",") if m]
    if modes:
        lines, _ = bench_cold_builds(modes, a.threads)
        print("\n".join(lines) + "\n", flush=True)
    if a.only_builds:
        return
    rows = bench_musique(a.cold_sample)
    if a.spacy_corpus:
        rows += bench_spacy(a.spacy_corpus, a.spacy_sample)
    print("| stage | seconds | notes |\n|---|---:|---|")
    for name, sec, note in rows:
        print(f"| {name} | {sec:.2f} | {note} |")


if __name__ == "__main__":
    main()
