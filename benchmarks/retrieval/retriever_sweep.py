"""The ``sweep`` section of ``benchmarks/retrieval/retriever.py``: retriever cost vs corpus size, and its
plot.

Each size is a KB of Table 5 proportions (``make_scaled_graph(scale_spec(HOTPOTQA_10K, n))``) with
an edgeless igraph graph and the transition attached from the edge arrays. Run it through
``python -m benchmarks.retrieval.retriever --sections sweep``.

Besides the exact PPR variants (``--sweep-variants``), ``--sweep-approx`` adds the approximate
retriever: the ``linear`` variant's config with approximate ``passage_index``, ``basis_index`` and
triple ``index`` (``docs/retrieval.md``), timed the same way, and its R(q) recall = the share of the
exact ``linear`` retriever's R(q) documents it returns on the same ``--sweep-recall-queries`` queries.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.retrieval.retriever_memory import (
    MemoryLedger,
    approx_components,
    basis_component,
    kb_components,
    memory_table,
    transition_components,
    triple_components,
)
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
    """One point of the sweep: build a Table-5-proportioned KB of ``n_docs`` and time it.

    Memory per component and the RSS change of every build step go into the row
    (:mod:`benchmarks.retrieval.retriever_memory`, printed by
    :func:`~benchmarks.retrieval.retriever_memory.memory_table`).
    """
    from gta_verl.retrieval.backends import open_kb_retriever

    mem = MemoryLedger()
    t0 = time.perf_counter()
    with mem.step("synthetic graph (benchmark input: edge arrays)"):
        sg = make_scaled_graph(scale_spec(HOTPOTQA_10K, n_docs), seed=args.seed)
    t1 = time.perf_counter()
    n_tr = max(1, int(round(n_docs * args.sweep_triples_per_doc)))
    with mem.step("KB: tables (Python objects), passage and triple vectors"):
        kb = synthetic_kb(
            sg, n_tr, args.seed, args.dim, with_igraph=False, passage_vectors=args.sweep_passage_vectors
        )
    mem.add(*kb_components(kb))
    q = query_vectors(kb.triple_emb, args.sweep_batch, args.seed + 1)
    components = [k for k in args.sweep_component_recall.split(";") if k]
    recall = bool(args.sweep_approx or components)  # R(q) recall of an approximate variant or one index
    n_more = max(0, args.sweep_recall_queries - len(q)) if recall else 0  # the recall's queries
    q_all = np.concatenate([q, query_vectors(kb.triple_emb, n_more, args.seed + 2)]) if n_more else q
    with mem.step("retriever: unique-fact vectors, exact triple index, bf16 copy"):
        r = open_kb_retriever(kb, None, PrecomputedEncoder(q_all))
    mem.add(*triple_components(r, kb))
    with mem.step("PPR transition (CSR from the edge arrays)"):
        attach_graph(r, sg)
    row: dict[str, Any] = {
        "docs": n_docs,
        "nodes": sg.spec.n_nodes,
        "edges": len(sg.edges),
        "triples": n_tr,
        "passage_vectors": args.sweep_passage_vectors,
        "graph_s": t1 - t0,
    }
    del sg
    gc.collect()
    linear = None
    for top, eps in parse_variants(args.sweep_variants):
        rv = r.with_config(variant_config(top, eps))
        t_warm = time.perf_counter()
        with mem.step(f"first call of {variant_label(top, eps)} (push CSR; the linear method's basis)"):
            rv.retrieve(["q0"])  # warm-up; builds the push CSR once (and the linear method's passage basis)
        if str(eps).startswith("linear"):
            row.setdefault("basis_s", time.perf_counter() - t_warm)
            linear = rv
        row.setdefault("build_s", time.perf_counter() - t0)
        row[f"whole_{top}_{eps}"] = time_retrieve(rv, args.sweep_batch)
        st = stage_times(rv, q)
        row.update({f"{k}_{top}_{eps}": v for k, v in st.items()})
    if recall:  # one exact reference: its basis is solved once
        exact = linear or r.with_config(variant_config(0, "linear:1e-6"))
        if args.sweep_approx:
            row.update(bench_approx_variant(exact, q, args, mem))
        for knobs in components:
            row[f"component_recall@{knobs}"] = component_recall(exact, knobs, args)
    mem.add(*transition_components(r.transition), basis_component(getattr(linear, "_basis", None)))
    row["rss"] = current_rss_gib()
    row.update(mem.row_items())
    del r, rv, kb, linear
    gc.collect()
    return row


def approx_kinds(spec: str) -> tuple[str, str, str]:
    """``--sweep-approx``: one index kind for all three, or ``passage,basis,triple`` kinds.

    >>> approx_kinds("hnsw"), approx_kinds("hnsw,hnsw,ivfpq")
    (('hnsw', 'hnsw', 'hnsw'), ('hnsw', 'hnsw', 'ivfpq'))
    """
    kinds = [k.strip() for k in spec.split(",")]
    if len(kinds) == 1:
        kinds *= 3
    if len(kinds) != 3:
        raise ValueError(f"--sweep-approx takes KIND or PASSAGE,BASIS,TRIPLE kinds, got {spec!r}")
    return kinds[0], kinds[1], kinds[2]


def approx_overrides(knobs: str) -> dict[str, Any]:
    """``--sweep-approx-knobs``: ``"hnsw_ef_search=512,index_refine=8"`` → RetrieverConfig overrides, each
    value of its field's type.

    >>> approx_overrides("hnsw_ef_search=512,index_refine=8")
    {'hnsw_ef_search': 512, 'index_refine': 8}
    """
    from gta_verl.retrieval.config import RetrieverConfig

    default = RetrieverConfig()
    out: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in knobs.split(","))):
        name, _, value = item.partition("=")
        if not hasattr(default, name):
            raise ValueError(f"--sweep-approx-knobs: RetrieverConfig has no knob {name!r}")
        cur = getattr(default, name)
        # bool("false") is True: booleans are read as words
        out[name] = value.lower() in ("true", "1") if isinstance(cur, bool) else type(cur)(value)
    return out


def approx_key(spec: str, knobs: str = "") -> str:
    """The row-key suffix of the approximate variant: ``approx_<passage>-<basis>-<triple>[@<knobs>]``."""
    return "approx_" + "-".join(approx_kinds(spec)) + (f"@{knobs}" if knobs else "")


def approx_label(spec: str, knobs: str = "") -> str:
    p, b, t = approx_kinds(spec)
    extra = f", {knobs}" if knobs else ""
    return f"approximate: passages {p}, basis {b}, triples {t}{extra} (linear, push ε=1e-06, all docs)"


def rq_recall(approx: Any, exact: Any, n: int, chunk: int) -> float:
    """Mean share of ``exact``'s R(q) documents that ``approx`` returns, over queries ``q0..q{n−1}``."""
    shares = []
    for start in range(0, n, chunk):
        texts = [f"q{i}" for i in range(start, min(n, start + chunk))]
        for a, e in zip(approx.retrieve(texts), exact.retrieve(texts), strict=True):
            shares.append(len(set(a.doc_ids) & set(e.doc_ids)) / max(1, len(e.doc_ids)))
    return float(sum(shares) / len(shares))


def bench_approx_variant(
    exact: Any, q: Any, args: argparse.Namespace, mem: MemoryLedger | None = None
) -> dict[str, Any]:
    """Time the approximate variant (built from the exact ``linear`` one: same basis) and its R(q) recall.

    Its three indexes are built one at a time (triples, passages, basis rows), each a build step of
    ``mem`` with its faiss arrays recorded as a component.
    """
    p, b, t = approx_kinds(args.sweep_approx)
    knobs = approx_overrides(args.sweep_approx_knobs)
    v = approx_key(args.sweep_approx, args.sweep_approx_knobs)
    mem = mem or MemoryLedger()
    t0 = time.perf_counter()
    # triples first: the knobs then rebuild no exact flat index on the way (passage_index is still flat)
    with mem.step(f"triple index {t} [{v}]"):
        av = exact.with_config(dataclasses.replace(exact.config, index=t, **knobs))
    with mem.step(f"passage index {p} [{v}]"):
        av = av.with_config(dataclasses.replace(av.config, passage_index=p, basis_index=b))
    with mem.step(f"basis index {b} [{v}]"):
        av.warm()  # the basis index (the basis is the exact variant's)
    build = time.perf_counter() - t0
    mem.add(*approx_components(av, v))
    av.retrieve(["q0"])  # warm-up: numba compiles the candidate push once
    out: dict[str, Any] = {f"index_build_s_{v}": build, f"whole_{v}": time_retrieve(av, args.sweep_batch)}
    out.update({f"{k}_{v}": x for k, x in stage_times(av, q).items()})
    out[f"recall_{v}"] = rq_recall(av, exact, args.sweep_recall_queries, max(args.sweep_batch, 32))
    del av
    gc.collect()
    return out


def component_recall(exact: Any, knobs: str, args: argparse.Namespace) -> float:
    """R(q) recall of the exact ``linear`` retriever with only ``knobs`` changed (e.g. ``index=ivfpq``):
    which approximate index loses which share of the exact R(q) documents (``--sweep-component-recall``)."""
    av = exact.with_config(dataclasses.replace(exact.config, **approx_overrides(knobs)))
    out = rq_recall(av, exact, args.sweep_recall_queries, max(args.sweep_batch, 32))
    del av
    gc.collect()
    return out


def plot_sweep(rows: list[dict[str, Any]], path: Path, title: str, variants: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.9))
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
    for v in approx_keys(rows):  # the approximate variants, R(q) recall written beside each point
        for what, mark in (("ppr", "^"), ("whole", "D")):
            have = [r for r in rows if f"{what}_{v}" in r]
            xs, ys = [r["docs"] for r in have], [r[f"{what}_{v}"] for r in have]
            name = "PPR" if what == "ppr" else "whole retriever"
            ax.plot(xs, ys, marker=mark, linestyle="-", linewidth=2.2, label=f"{name}: {label_of_key(v)}")
            for r, x, y in zip(have, xs, ys, strict=True):
                if what == "whole" and f"recall_{v}" in r:
                    ax.annotate(
                        f"R(q) recall {r[f'recall_{v}']:.3f}",
                        (x, y),
                        textcoords="offset points",
                        xytext=(6, -12),
                        fontsize=7,
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


def approx_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The approximate variants (``approx_<passage>-<basis>-<triple>``) some row has numbers for."""
    return sorted({k[len("whole_") :] for r in rows for k in r if k.startswith("whole_approx_")})


def label_of_key(key: str) -> str:
    """:func:`approx_label` of an :func:`approx_key`."""
    kinds, _, knobs = key[len("approx_") :].partition("@")
    return approx_label(kinds.replace("-", ","), knobs)


def _table_row(n: int, r: dict[str, Any], v: str, label: str) -> str:
    recall = (
        f"{r[f'recall_{v}']:.3f}" if f"recall_{v}" in r else ("exact" if v.startswith("0_linear") else "")
    )
    return (
        f"| {n:,} | {r['nodes']:,} | {r['edges']:,} | {r['triples']:,} | {r['build_s']:.0f} | "
        f"{label} | {r[f'whole_{v}']:.2f} | {recall} | {r[f'ppr_{v}']:.2f} | "
        f"{r[f'triples_{v}']:.2f} | {r[f'dense_{v}']:.2f} | {r[f'pers_{v}']:.2f} | "
        f"{r[f'touched_{v}']:,.0f} | {r['rss']:.1f} |"
    )


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
        f"triple vector(s) per document, {args.sweep_passage_vectors} passage vectors, "
        f"batch {args.sweep_batch}, encoding excluded)\n",
        "| docs | nodes | edges | triples | build s | PPR settings | whole ms/query | R(q) recall vs exact | "
        "PPR ms/query | triple search | dense | personalization | nodes touched | RSS GiB |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    title = f"Retriever cost vs corpus size ({args.sweep_triples_per_doc:g} triple/doc; 2-core CPU)"
    if not args.sweep_docs:  # re-plot earlier runs' --rows-out files only
        plot_sweep(merge_rows(args.plot_with, []), Path(args.plot), title, args.sweep_variants)
        return [f"\nPlot: `{args.plot}` (from {args.plot_with})"]
    mem_lines: list[list[str]] = []  # one memory table per size, printed as it comes, collected below
    for n in [int(x) for x in args.sweep_docs.split(",")]:
        r = bench_size(n, args)
        rows.append(r)
        if args.rows_out:  # raw rows, so that runs at different sizes can be plotted together
            Path(args.rows_out).write_text(json.dumps(rows, indent=1))
        variants = [
            (f"{top}_{eps}", variant_label(top, eps)) for top, eps in parse_variants(args.sweep_variants)
        ]
        if args.sweep_approx:
            knobs = args.sweep_approx_knobs
            variants.append((approx_key(args.sweep_approx, knobs), approx_label(args.sweep_approx, knobs)))
        for v, label in variants:
            lines.append(_table_row(n, r, v, label))
            print(lines[-1], flush=True)
        mem_lines.append(memory_table(r))
        print("\n".join(mem_lines[-1]), flush=True)
        if args.plot:  # after every size: a later, larger size may run out of memory
            plot_sweep(merge_rows(args.plot_with, rows), Path(args.plot), title, args.sweep_variants)
    lines += [
        f"\nLinear method's passage basis at {r['docs']:,} documents: solved in {r['basis_s']:.0f} s "
        "(once per KB, first call)."
        for r in rows
        if "basis_s" in r
    ]
    lines += [
        f"\nApproximate variant at {r['docs']:,} documents: its three indexes built in "
        f"{r[f'index_build_s_{v}']:.0f} s; R(q) recall over {args.sweep_recall_queries} queries."
        for r in rows
        for v in approx_keys([r])
    ]
    lines += [
        f"\nR(q) recall at {r['docs']:,} docs with only `{k[len('component_recall@') :]}` changed: {v:.3f}"
        for r in rows
        for k, v in r.items()
        if k.startswith("component_recall@")
    ]
    for table in mem_lines:
        lines += table
    if args.plot:
        lines.append(f"\nPlot: `{args.plot}`")
    return lines
