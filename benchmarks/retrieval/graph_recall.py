"""Why graph retrieval trails: triple coverage, entity linking and seeding, per KB; and the backends' recall.

    python -m benchmarks.retrieval.graph_recall --dataset NAME=KB_DIR:QA_PATH [--dataset ...] [--k 1,2,5,10]
        [--variants default,no_dense_seeds,...] [--backends graph,dense,bm25] [--bundled]

``--bundled`` adds the two bundled sets, each KB built once and cached under ``$GTA_VERL_CACHE/kb``:
``musique`` (1,890 passages, GPT-3.5 triples: the test suite's KB) and ``hotpotqa``
(``assets/hotpotqa_train``, 994 passages, triples by the offline spaCy OpenIE). The backends'
table, one command: ``python -m benchmarks.retrieval.graph_recall --bundled --variants '' --backends
graph,dense,bm25 --k 2,5,10``.

Per dataset (KB + questions with gold passages), printed as markdown:

1. KB coverage: triples per passage, passages (and gold passages) without any triple.
2. Linking: share of questions whose top-n unique facts (the seeds' source,
   ``top_n_triples``) include a fact extracted from a gold passage, and the mean share
   of gold passages adjacent to a seed entity (an entity the personalization seeds);
   a gold passage no seed touches is reached by PPR only through the graph.
3. Graph-mode R@k under retriever variants that change seeding only (the KB is
   fixed): dense passage seeds off / stronger / only the best n, more triples, more
   entities. Synonymy threshold and triple filtering need a rebuilt KB: pass it as
   another ``--dataset``.
4. With ``--backends``: R@k of each retriever backend (``graph`` = its default hybrid
   order, ``dense`` = Search-R1's dense top-k, ``bm25``) on the same KB and questions
   (:func:`gta_verl.retrieval.evaluate.evaluate_backends`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VARIANTS: dict[str, dict] = {
    "default": {},
    "no_dense_seeds": {"passage_node_weight": 0.0},
    "dense_seeds_x4": {"passage_node_weight": 0.2},
    "seed_top_20": {"passage_seed_top": 20},
    "seed_top_100": {"passage_seed_top": 100},
    "triples_10": {"top_n_triples": 10, "max_seed_entities": 10},
    "triples_20": {"top_n_triples": 20, "max_seed_entities": 20},
    "all_entities": {"max_seed_entities": 0},
}


def coverage(kb, gold_idx: list[list[int]]) -> dict[str, float]:
    """Triples per passage and passages without triples (all, and gold)."""
    per_doc = np.zeros(kb.n_docs, np.int64)
    idx = kb.doc_index_by_id()
    for t in kb.triples:
        per_doc[idx[t.doc_id]] += 1
    gold = sorted({d for g in gold_idx for d in g})
    return {
        "triples per passage": float(per_doc.mean()),
        "passages without triples": float((per_doc == 0).mean()),
        "gold passages without triples": float((per_doc[gold] == 0).mean()),
        "entities per passage": kb.n_entities / kb.n_docs,
    }


def linking(r, questions: list[str], gold_idx: list[list[int]]) -> dict[str, float]:
    """Top-n facts from a gold passage; gold passages adjacent to a seed entity."""
    from gta_verl.retrieval.retriever import seed_entities

    kb, c = r.kb, r.config
    idx = kb.doc_index_by_id()
    fact_docs: dict[tuple[str, str, str], set[int]] = {}
    for t in kb.triples:  # same first-occurrence order as GraphRetriever._unique_facts
        fact_docs.setdefault((t.subject, t.relation, t.object), set()).add(idx[t.doc_id])
    docs_of_fact = list(fact_docs.values())
    ent_docs: dict[int, set[int]] = {}
    for (a, b), kind in zip(kb.graph.get_edgelist(), kb.graph.es["kind"], strict=True):
        if kind == "doc_entity":
            d, e = (a, b) if a < kb.n_docs else (b, a)
            ent_docs.setdefault(e - kb.n_docs, set()).add(d)
    q = np.asarray(r.embedder.encode(questions), dtype=np.float32)
    scores, ids, mins = r._fact_index.search_with_min(q, c.top_n_triples)
    fact_hit, seed_cover = [], []
    for b, gold in enumerate(gold_idx):
        top = [int(i) for i in ids[b] if i >= 0]
        fact_hit.append(any(docs_of_fact[i] & set(gold) for i in top))
        span = scores[b, 0] - mins[b]
        norm = (scores[b] - mins[b]) / span if span > 0 else np.ones_like(scores[b])
        ok = (ids[b] >= 0) & (scores[b] > c.min_triple_score)
        ents, _ = seed_entities(
            norm[ok], r._fact_pairs[ids[b][ok]], r._doc_freq, c.max_seed_entities, c.doc_frequency_norm
        )
        reach = set().union(*(ent_docs.get(int(e), set()) for e in ents)) if len(ents) else set()
        seed_cover.append(len(reach & set(gold)) / len(gold))
    return {
        f"questions with a gold fact in the top {c.top_n_triples}": float(np.mean(fact_hit)),
        "gold passages adjacent to a seed entity": float(np.mean(seed_cover)),
    }


REPO = Path(__file__).resolve().parents[2]
HOTPOTQA = REPO / "assets" / "hotpotqa_train"


def bundled_datasets() -> list[str]:
    """``NAME=KB_DIR:QA_PATH`` of the bundled MuSiQue and HotpotQA sets (KBs built once, cached)."""
    from benchmarks.serving.replicas import musique_kb_dir
    from gta_verl.bundled import MUSIQUE_QA
    from gta_verl.kb.build import build_kb_from_files
    from gta_verl.kb.embed import cache_root
    from gta_verl.kb.store import KBLoadError, verify_kb

    hot_kb = cache_root() / "kb" / "hotpotqa_train-spacy"
    try:
        verify_kb(hot_kb)
    except KBLoadError:  # absent or incomplete: build it (spaCy OpenIE; minutes on 2 cores)
        hot_kb.parent.mkdir(parents=True, exist_ok=True)
        build_kb_from_files(HOTPOTQA / "hotpotqa_train_corpus.json", None, "spacy", hot_kb, progress=False)
    hot_qa = HOTPOTQA / "hotpotqa_train.json"
    return [f"musique={musique_kb_dir()}:{MUSIQUE_QA}", f"hotpotqa={hot_kb}:{hot_qa}"]


def _print_recall(rows: list[tuple[str, str, dict]], ks: list[int], label: str) -> None:
    head = " | ".join(f"R@{k}" for k in ks)
    print(f"\n| KB | {label} | {head} |\n|---|---|" + "---:|" * len(ks))
    for name, v, rec in rows:
        print(f"| {name} | {v} | " + " | ".join(f"{rec[f'R@{k}']:.3f}" for k in ks) + " |")


def main(argv: list[str] | None = None) -> int:
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.retrieval.evaluate import evaluate_backends, evaluate_retrieval, load_qa

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", action="append", default=[], help="NAME=KB_DIR:QA_PATH (repeat)")
    p.add_argument("--bundled", action="store_true", help="add the bundled MuSiQue and HotpotQA sets")
    p.add_argument("--k", default="1,2,5,10")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {list(VARIANTS)}")
    p.add_argument("--backends", default="", help="comma list of graph,dense,bm25: their R@k table")
    args = p.parse_args(argv)
    datasets = args.dataset + (bundled_datasets() if args.bundled else [])
    if not datasets:
        p.error("give --dataset NAME=KB_DIR:QA_PATH or --bundled")
    ks = [int(k) for k in args.k.split(",")]
    names = [v for v in args.variants.split(",") if v]
    backends = [b for b in args.backends.split(",") if b]
    print(f"`uptime`: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}\n")
    stats_rows, recall_rows, backend_rows = [], [], []
    for spec in datasets:
        name, _, rest = spec.partition("=")
        kb_dir, _, qa_path = rest.rpartition(":")
        r = open_retriever(kb_dir)
        qa = [x for x in load_qa(qa_path, r.kb.passages) if x.supporting_doc_ids]
        idx = r.kb.doc_index_by_id()
        gold_idx = [[idx[d] for d in x.supporting_doc_ids] for x in qa]
        stats = {**coverage(r.kb, gold_idx), **linking(r, [x.question for x in qa], gold_idx)}
        stats_rows.append((f"{name} ({len(qa)} q)", stats))
        for v in names:
            cfg = dataclasses.replace(r.config, mode="graph", **VARIANTS[v])
            rec = evaluate_retrieval(r, qa, modes=("graph",), ks=ks, config=cfg)["modes"]["graph"]["recall"]
            recall_rows.append((name, v, rec))
        if names:
            dense = evaluate_retrieval(r, qa, modes=("dense",), ks=ks)["modes"]["dense"]["recall"]
            recall_rows.append((name, "(dense, for reference)", dense))
        if backends:
            res = evaluate_backends(r.kb, qa, backends, ks, r.config, r.embedder)
            backend_rows += [(name, b, row["recall"]) for b, row in res["modes"].items()]
    cols = list(stats_rows[0][1])
    print("| KB | " + " | ".join(cols) + " |\n|---|" + "---:|" * len(cols))
    for name, s in stats_rows:
        print(f"| {name} | " + " | ".join(f"{s[c]:.3f}" for c in cols) + " |")
    if recall_rows:
        _print_recall(recall_rows, ks, "graph variant")
    if backend_rows:
        _print_recall(backend_rows, ks, "backend")
    print(f"\n`uptime` after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
