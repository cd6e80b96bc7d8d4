"""The ``sweep`` section of ``benchmarks/retriever.py``: retriever cost vs corpus size, and its plot.

Each size is a KB of Table 5 proportions (``make_scaled_graph(scale_spec(HOTPOTQA_10K, n))``) with
an edgeless igraph graph and the transition attached from the edge arrays. Run it through
``python -m benchmarks.retriever --sections sweep``.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.retriever_synth import (
    PrecomputedEncoder,
    attach_graph,
    current_rss_gib,
    parse_variants,
    query_vectors,
    stage_times,
    synthetic_kb,
    time_retrieve,
    variant_config,
    variant_label,
)
from gta_verl.testing.synthetic_graphs import HOTPOTQA_10K, make_scaled_graph, scale_spec


def bench_size(n_docs: int, args: argparse.Namespace) -> dict[str, Any]:
    """One point of the sweep: build a Table-5-proportioned KB of ``n_docs`` and time it."""
    from gta_verl.retrieval.backends import open_kb_retriever

    t0 = time.perf_counter()
    sg = make_scaled_graph(scale_spec(HOTPOTQA_10K, n_docs), seed=args.seed)
    t1 = time.perf_counter()
    n_tr = max(1, int(round(n_docs * args.sweep_triples_per_doc)))
    kb = synthetic_kb(sg, n_tr, args.seed, args.dim, with_igraph=False)
    q = query_vectors(kb.triple_emb, args.sweep_batch, args.seed + 1)
    r = open_kb_retriever(kb, None, PrecomputedEncoder(q))
    attach_graph(r, sg)
    row: dict[str, Any] = {
        "docs": n_docs,
        "nodes": sg.spec.n_nodes,
        "edges": len(sg.edges),
        "triples": n_tr,
        "graph_s": t1 - t0,
    }
    del sg
    gc.collect()
    for top, eps in parse_variants(args.sweep_variants):
        rv = r.with_config(variant_config(top, eps))
        t_warm = time.perf_counter()
        rv.retrieve(["q0"])  # warm-up; builds the push CSR once (and the linear method's passage basis)
        if str(eps).startswith("linear"):
            row.setdefault("basis_s", time.perf_counter() - t_warm)
        row.setdefault("build_s", time.perf_counter() - t0)
        row[f"whole_{top}_{eps}"] = time_retrieve(rv, args.sweep_batch)
        st = stage_times(rv, q)
        row.update({f"{k}_{top}_{eps}": v for k, v in st.items()})
    row["rss"] = current_rss_gib()
    del r, rv, kb
    gc.collect()
    return row


def plot_sweep(rows: list[dict[str, Any]], path: Path, title: str, variants: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.6))
    for (top, eps), line in zip(parse_variants(variants), ("--", "-", ":", "-.", (0, (1, 3))), strict=False):
        for what, mark in (("ppr", "o"), ("whole", "s")):
            have = [r for r in rows if f"{what}_{top}_{eps}" in r]  # merged runs may lack a variant at a size
            if not have:
                continue
            ax.plot(
                [r["docs"] for r in have],
                [r[f"{what}_{top}_{eps}"] for r in have],
                marker=mark,
                linestyle=line,
                label=f"{'PPR' if what == 'ppr' else 'whole retriever'}: {variant_label(top, eps)}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents (Table 5 proportions: ×8 nodes, ×73 edges)")
    ax.set_ylabel("ms per query (encoding excluded)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # below: never over the data
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merge_rows(files: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sweep rows of the ``--rows-out`` files (comma-separated) and of this run, one per size.

    Rows of the same size are merged, later ones winning per key: a re-run of one variant at
    one size replaces that variant's numbers and keeps the others'.
    """
    by_docs: dict[int, dict[str, Any]] = {}
    for row in [x for f in files.split(",") if f for x in json.loads(Path(f).read_text())] + rows:
        by_docs.setdefault(row["docs"], {}).update(row)
    return [by_docs[d] for d in sorted(by_docs)]


def bench_sweep(args: argparse.Namespace) -> list[str]:
    """Section (b): per-query PPR and whole-retriever time vs corpus size, and the plot."""
    rows = []
    lines = [
        f"\n### Cost vs corpus size (HotpotQA-10K Table 5 proportions, {args.sweep_triples_per_doc:g} "
        f"triple vector(s) per document, batch {args.sweep_batch}, encoding excluded)\n",
        "| docs | nodes | edges | triples | build s | PPR settings | whole ms/query | PPR ms/query | "
        "triple search | dense | personalization | nodes touched | RSS GiB |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    title = f"Retriever cost vs corpus size ({args.sweep_triples_per_doc:g} triple/doc; 2-core CPU)"
    if not args.sweep_docs:  # re-plot earlier runs' --rows-out files only
        plot_sweep(merge_rows(args.plot_with, []), Path(args.plot), title, args.sweep_variants)
        return [f"\nPlot: `{args.plot}` (from {args.plot_with})"]
    for n in [int(x) for x in args.sweep_docs.split(",")]:
        r = bench_size(n, args)
        rows.append(r)
        if args.rows_out:  # raw rows, so that runs at different sizes can be plotted together
            Path(args.rows_out).write_text(json.dumps(rows, indent=1))
        for top, eps in parse_variants(args.sweep_variants):
            v = f"{top}_{eps}"
            lines.append(
                f"| {n:,} | {r['nodes']:,} | {r['edges']:,} | {r['triples']:,} | {r['build_s']:.0f} | "
                f"{variant_label(top, eps)} | {r[f'whole_{v}']:.2f} | {r[f'ppr_{v}']:.2f} | "
                f"{r[f'triples_{v}']:.2f} | {r[f'dense_{v}']:.2f} | {r[f'pers_{v}']:.2f} | "
                f"{r[f'touched_{v}']:,.0f} | {r['rss']:.1f} |"
            )
            print(lines[-1], flush=True)
        if args.plot:  # after every size: a later, larger size may run out of memory
            plot_sweep(merge_rows(args.plot_with, rows), Path(args.plot), title, args.sweep_variants)
    lines += [
        f"\nLinear method's passage basis at {r['docs']:,} documents: solved in {r['basis_s']:.0f} s "
        "(once per KB, first call)."
        for r in rows
        if "basis_s" in r
    ]
    if args.plot:
        lines.append(f"\nPlot: `{args.plot}`")
    return lines
