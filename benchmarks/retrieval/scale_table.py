"""21M passages from the size sweep's measured per-item costs: every figure a measured number multiplied out.

Usage:
    python -m benchmarks.retrieval.scale_table --rows docs/benchmarks/<sweep rows>.json[,more.json]
        [--build-cost docs/benchmarks/build_cost.json]
        [--passages 21000000] [--triples-per-passage 9.1] [--edges-per-passage measured]

Reads the rows that ``python -m benchmarks.retrieval.retriever --sections sweep --rows-out FILE`` wrote (rows
of one size merged, later files winning per key, as the sweep's own ``--plot-with`` does), takes the
largest size as the measured point (1M) and the smallest as the growth point (10k), and prints one
markdown table whose every cell names the number it came from and the arithmetic. Scaling laws, one per
quantity (:func:`law_of`):

* **memory per component**: linear in the component's items (bytes per item × items at the target):
  documents for passage vectors, basis rows and passage indexes; triples for triple vectors and triple
  indexes (target triples = passages × ``--triples-per-passage``: the sweep's KB has 1 triple per
  document, MuSiQue's OpenIE 9.1); CSR non-zeros for the transition (target edges = passages × the measured
  graph's edges per document, Table 5 proportions, or ``--edges-per-passage``).
* **per-query cost of an exact scan** (flat dense scores, flat triple search, the linear PPR's basis GEMV,
  a full-graph power iteration): linear in what it scans.
* **per-query cost of an approximate or local part** (the approximate variant's every part, the
  push-based PPR, the personalization): the measured 1M value times the growth the sweep measured between
  its two sizes, extrapolated as a power law ``t(n) = t(n₁) · (n / n₁)^b`` with
  ``b = log(t(n₁) / t(n₀)) / log(n₁ / n₀)`` (clamped at 0); no smaller size → linear, an upper bound.
* **whole retriever**: the projected parts plus the rest of the measured whole (result building, fusion;
  held constant per query).
* **build seconds** (basis solve, approximate indexes): the same power law from their two sizes.

Pure arithmetic on the JSON (no numpy, no retriever): ``tests/test_scale_table_on_cpu.py`` checks it on
hand-computed values.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_PASSAGES = 21_000_000
#: Triples per passage of the bundled MuSiQue KB's GPT-3.5 OpenIE (docs/scale.md "Per-item costs").
TRIPLES_PER_PASSAGE = 9.1
PARTS = ("triples", "dense", "pers", "ppr")
PART_NAMES = {
    "triples": "triple search",
    "dense": "dense passage scores",
    "pers": "personalization",
    "ppr": "PPR",
    "whole": "whole retriever (encoding excluded)",
}


@dataclass(frozen=True)
class Projection:
    """One measured quantity multiplied out to the target.

    Attributes:
        what: The quantity, e.g. ``"passage vectors (KB, float32)"``.
        unit: ``"B"``, ``"ms/query"`` or ``"s"``.
        source: The row key it was read from.
        measured: Its value at the measured point.
        items: Items at the measured point (``per`` says of what).
        target: Items at the target.
        per: The item: ``"docs"``, ``"triples"``, ``"CSR non-zeros"``, ``"nodes"``.
        law: ``"linear"``, ``"power"`` (module docstring) or ``"sum"`` (the whole retriever: ``total``).
        small: Its value at the smaller size (``power`` only; ``None`` → linear).
        small_items: Items at the smaller size.
        why: The reason for the law, printed beside it (``sum``: the addition).
        total: ``sum`` only: the projected parts plus the measured rest.
    """

    what: str
    unit: str
    source: str
    measured: float
    items: float
    target: float
    per: str
    law: str
    small: float | None = None
    small_items: float | None = None
    why: str = ""
    total: float = 0.0

    @property
    def exponent(self) -> float:
        """1 for ``linear``; the measured growth's ``b`` (≥ 0) for ``power``, 1 without a smaller size.

        >>> round(Projection("x", "s", "k", 20.0, 1e6, 21e6, "docs", "power", 10.0, 1e4).exponent, 6)
        0.150515
        """
        if self.law == "linear" or self.small is None or self.small_items is None:
            return 1.0
        if self.small <= 0 or self.measured <= 0 or self.small_items >= self.items:
            return 1.0
        return max(0.0, math.log(self.measured / self.small) / math.log(self.items / self.small_items))

    @property
    def value(self) -> float:
        if self.law == "sum":
            return self.total
        return self.measured * (self.target / self.items) ** self.exponent

    def law_text(self) -> str:
        if self.law == "sum":
            return f"sum of the projected parts{'' if self.unit == 'B' else ' + the measured rest'}"
        if self.law == "linear" or self.small is None:
            base = "linear in " + self.per
            if self.law == "power":
                base += " (no smaller size measured: an upper bound)"
        else:
            base = (
                f"power law from {fmt(self.small, self.unit)} at {self.small_items:,.0f} → "
                f"{fmt(self.measured, self.unit)} at {self.items:,.0f} {self.per}: b = {self.exponent:.2f}"
            )
        return f"{base}; {self.why}" if self.why else base

    def arithmetic(self) -> str:
        if self.law == "sum":
            return f"{self.why} = **{fmt(self.total, self.unit)}**"
        ratio = f"({self.target:,.0f} / {self.items:,.0f})"
        power = "" if self.exponent == 1.0 else f"^{self.exponent:.2f}"
        return f"{fmt(self.measured, self.unit)} × {ratio}{power} = **{fmt(self.value, self.unit)}**"


def fmt(x: float, unit: str) -> str:
    """Bytes in decimal GB/MB (as docs/scale.md), times with 2 significant decimals.

    >>> fmt(32_256_000_000, "B"), fmt(512_000, "B"), fmt(3.14159, "ms/query"), fmt(1234.5, "s")
    ('32.256 GB', '0.512 MB', '3.14 ms/query', '1,234.5 s')
    """
    if unit == "B":
        return f"{x / 1e9:,.3f} GB" if x >= 1e8 else f"{x / 1e6:,.3f} MB"
    if unit in ("core-h", "M tokens") and x < 1:  # a small measured build: keep 3 significant digits
        return f"{x:.3g} {unit}"
    return (f"{x:,.2f} {unit}" if x < 100 else f"{x:,.1f} {unit}").rstrip()


def merge(files: list[str]) -> list[dict[str, Any]]:
    """Rows of the sweep's ``--rows-out`` files, one per size, later ones winning per key."""
    by_docs: dict[int, dict[str, Any]] = {}
    for f in files:
        for row in json.loads(Path(f).read_text()):
            by_docs.setdefault(int(row["docs"]), {}).update(row)
    return [by_docs[d] for d in sorted(by_docs)]


@dataclass(frozen=True)
class Target:
    """The corpus multiplied out to: passages, triples, CSR non-zeros, nodes."""

    passages: float
    triples_per_passage: float
    edges_per_passage: float | None = None  # None: the measured graph's own

    def items(self, per: str, big: dict[str, Any]) -> float:
        """Items of kind ``per`` at the target (``big``: the measured row, for the graph's proportions)."""
        if per == "docs":
            return self.passages
        if per == "triples":
            return self.passages * self.triples_per_passage
        if per == "CSR non-zeros":
            edges = self.edges_per_passage or big["edges"] / big["docs"]
            return self.passages * edges * 2  # an undirected edge is two non-zeros
        if per == "nodes":
            return self.passages * big["nodes"] / big["docs"]
        raise ValueError(f"unknown item kind {per!r}")


def items_at(per: str, row: dict[str, Any]) -> float:
    """Items of kind ``per`` in a sweep row (the sizes the sweep built)."""
    return {
        "docs": row["docs"],
        "triples": row["triples"],
        "CSR non-zeros": 2 * row["edges"],
        "nodes": row["nodes"],
    }[per]


#: ``per`` of a component row (``retriever_memory.Component.per``) → this module's item names.
_PER = {"doc": "docs", "triple": "triples", "edge": "CSR non-zeros", "node": "nodes"}


def memory_projections(big: dict[str, Any], target: Target) -> list[Projection]:
    """Every ``mem:`` component of the measured row, bytes linear in its items."""
    out = []
    for key, c in big.items():
        if not key.startswith("mem:"):
            continue
        per = _PER[c["per"]]
        out.append(
            Projection(
                key[len("mem:") :],
                "B",
                key,
                float(c["bytes"]),
                float(c["items"]),
                target.items(per, big),
                per,
                "linear",
                why=f"{c['bytes'] / max(1, c['items']):,.1f} B per {per[:-1] if per.endswith('s') else per}"
                f" ({c['how']}); served: {c['served']}",
            )
        )
    return out


def in_serving_set(component: str, variant: str) -> bool:
    """Whether a replica serving ``variant`` holds ``component``: the exact variants hold no approximate
    index; an approximate one holds its own three instead of the exact triple index and its bf16 copy
    (the unique-fact vectors stay: its candidates are rescored against them)."""
    if "[approx_" in component:
        return component.endswith(f"[{variant}]")
    if variant.startswith("approx_"):
        return not component.startswith(("exact triple index", "triple vectors bf16"))
    return True


def memory_totals(memory: list[Projection], variant_keys: list[str]) -> list[Projection]:
    """Per variant, the sum of the components a replica serving it holds (:func:`in_serving_set`)."""
    out: list[Projection] = []
    for v in variant_keys if memory else []:
        held = [p for p in memory if in_serving_set(p.what, v)]
        out.append(
            Projection(
                f"all components a replica serving [{v}] holds",
                "B",
                "sum of the mem: rows above",
                sum(p.measured for p in held),
                1.0,
                1.0,
                "",
                "sum",
                total=sum(p.value for p in held),
                why=" + ".join(fmt(p.value, "B") for p in held),
            )
        )
    return out


def variants(row: dict[str, Any]) -> list[str]:
    """The variants a row has a whole-retriever time for (``0_linear:1e-06``, ``approx_hnsw-hnsw-hnsw``)."""
    return sorted(k[len("whole_") :] for k in row if k.startswith("whole_"))


def law_of(variant: str, part: str) -> tuple[str, str, str]:
    """``(law, items, why)`` of a per-query ``part`` of ``variant`` (module docstring)."""
    if variant.startswith("approx_"):
        per = "triples" if part == "triples" else "docs"
        return "power", per, "approximate index / local push: measured growth extrapolated"
    if part == "triples":
        return "linear", "triples", "exact flat scan of every triple vector"
    if part == "dense":
        return "linear", "docs", "exact flat scan of every passage vector"
    if part == "pers":
        return "power", "docs", "≤ 5 entity seeds + the dense part's min/max: measured growth extrapolated"
    if "linear" in variant:
        return "linear", "docs", "the basis GEMV scans every document (the push from the seeds is local)"
    if "fused" in variant:
        return "linear", "CSR non-zeros", "power iteration over the whole graph"
    return "power", "docs", "forward push: local, measured growth extrapolated"


def query_projections(big: dict[str, Any], small: dict[str, Any] | None, target: Target) -> list[Projection]:
    """Per-query parts and the whole retriever of every variant of the measured row."""
    out = []
    for v in variants(big):
        parts = []
        for part in PARTS:
            key = f"{part}_{v}"
            if key not in big:
                continue
            law, per, why = law_of(v, part)
            s = small.get(key) if small is not None and law == "power" else None
            parts.append(
                Projection(
                    f"{PART_NAMES[part]} [{v}]",
                    "ms/query",
                    key,
                    float(big[key]),
                    items_at(per, big),
                    target.items(per, big),
                    per,
                    law,
                    None if s is None else float(s),
                    None if s is None or small is None else items_at(per, small),
                    why,
                )
            )
        out += parts
        whole = float(big[f"whole_{v}"])
        over = sum(p.measured for p in parts) - whole
        rest = max(0.0, -over)  # the parts are timed apart from the whole: their sum may exceed it (noise)
        note = "rest of the measured whole, held per query" + (
            f"; the separately timed parts exceeded the whole by {over:,.2f}, so 0" if over > 0 else ""
        )
        out.append(
            Projection(
                f"{PART_NAMES['whole']} [{v}]",
                "ms/query",
                f"whole_{v}",
                whole,
                1.0,
                1.0,
                "queries",
                "sum",
                total=sum(p.value for p in parts) + rest,
                why=" + ".join(fmt(p.value, "") for p in parts) + f" (parts above) + {rest:,.2f} ({note})",
            )
        )
    return out


def build_projections(big: dict[str, Any], small: dict[str, Any] | None, target: Target) -> list[Projection]:
    """Build seconds: the linear PPR's basis solve and each approximate variant's indexes (power law)."""
    out = []
    for key in sorted(k for k in big if k == "basis_s" or k.startswith("index_build_s_")):
        s = small.get(key) if small is not None else None
        what = "passage basis solve (once per KB)" if key == "basis_s" else f"index build [{key[14:]}]"
        out.append(
            Projection(
                what,
                "s",
                key,
                float(big[key]),
                float(big["docs"]),
                target.passages,
                "docs",
                "power",
                None if s is None else float(s),
                None if s is None or small is None else float(small["docs"]),
                "measured growth extrapolated",
            )
        )
    return out


def build_cost_projections(cost: dict[str, Any], target: Target) -> list[Projection]:
    """A KB build's measured cost (``benchmarks.kb.build_cost --rows-out``), linear in passages.

    Ray Data stages: core-hours (stage seconds × the CPUs it held; actor start-up included, so an upper
    bound per passage); the LLM OpenIE path: millions of prompt (prefill) and reply (decode) tokens.
    """
    out = []
    spacy = cost.get("ray_spacy")
    if spacy:
        n = float(spacy["passages"])
        for st in spacy["stages"]:
            if st["stage"] == "corpus":
                continue
            out.append(
                Projection(
                    f"Ray Data build, spaCy OpenIE path: {st['stage']}",
                    "core-h",
                    f"ray_spacy:{st['stage']}",
                    st["seconds"] * st["cpus"] / 3600,
                    n,
                    target.passages,
                    "docs",
                    "linear",
                    why=f"{st['core_s_per_passage']:.4f} core-s per passage, start-up included",
                )
            )
    tokens = cost.get("tokens")
    if tokens:
        n = float(tokens["passages"])
        for key, name in (("prefill", "prompt (prefill)"), ("decode", "reply (decode)")):
            mean = float(tokens[key]["mean"])
            out.append(
                Projection(
                    f"LLM OpenIE path: {name} tokens",
                    "M tokens",
                    f"tokens:{key}",
                    mean * n / 1e6,
                    n,
                    target.passages,
                    "docs",
                    "linear",
                    why=f"{mean:.1f} per passage",
                )
            )
    return out


def scale_table(rows: list[dict[str, Any]], target: Target, source: str) -> list[str]:
    """The markdown table of every projection (module docstring)."""
    big = rows[-1]
    small = rows[0] if len(rows) > 1 else None
    head = (
        f"\n### {target.passages:,.0f} passages from the sweep's measured point at {big['docs']:,} documents "
        f"({source}"
        + (f"; growth measured from {small['docs']:,}" if small else "; no smaller size: linear bounds")
        + f"; {target.triples_per_passage:g} triples per passage)\n"
    )
    lines = [
        head,
        "| quantity | measured (row key) | scaling law | at the target |",
        "|---|---|---|---|",
    ]
    memory = memory_projections(big, target)
    groups = (
        ("memory", memory + memory_totals(memory, variants(big))),
        ("per query", query_projections(big, small, target)),
        ("build", build_projections(big, small, target)),
    )
    for name, projections in groups:
        for p in projections:
            at = "" if p.law == "sum" else f" at {p.items:,.0f} {p.per}"
            measured = f"{fmt(p.measured, p.unit)}{at} (`{p.source}`)"
            lines.append(f"| {name}: {p.what} | {measured} | {p.law_text()} | {p.arithmetic()} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="", help="comma-separated sweep --rows-out JSON files")
    ap.add_argument(
        "--build-cost", default="", help="benchmarks.kb.build_cost --rows-out JSON: the build's rows"
    )
    ap.add_argument("--passages", type=float, default=TARGET_PASSAGES)
    ap.add_argument("--triples-per-passage", type=float, default=TRIPLES_PER_PASSAGE)
    ap.add_argument(
        "--edges-per-passage",
        type=float,
        default=None,
        help="graph edges per passage at the target (default: the measured graph's, Table 5 proportions)",
    )
    args = ap.parse_args(argv)
    files = [f for f in args.rows.split(",") if f]
    rows = merge(files)
    if not rows and not args.build_cost:
        raise SystemExit("no sweep rows in " + repr(args.rows) + " and no --build-cost")
    target = Target(args.passages, args.triples_per_passage, args.edges_per_passage)
    if rows:
        print("\n".join(scale_table(rows, target, ", ".join(files))))
    if args.build_cost:
        print(
            "\n".join(
                build_cost_table(json.loads(Path(args.build_cost).read_text()), target, args.build_cost)
            )
        )
    return 0


def build_cost_table(cost: dict[str, Any], target: Target, source: str) -> list[str]:
    """The markdown table of :func:`build_cost_projections`."""
    lines = [
        f"\n### Building {target.passages:,.0f} passages from measured build costs per passage ({source})\n",
        "| quantity | measured (row key) | scaling law | at the target |",
        "|---|---|---|---|",
    ]
    for p in build_cost_projections(cost, target):
        measured = f"{fmt(p.measured, p.unit)} at {p.items:,.0f} {p.per} (`{p.source}`)"
        lines.append(f"| build: {p.what} | {measured} | {p.law_text()} | {p.arithmetic()} |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
