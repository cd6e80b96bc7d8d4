"""``benchmarks/retrieval/scale_table.py``: the 21M arithmetic on hand-computed values (no retriever runs)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.retrieval.scale_table import Projection, Target, in_serving_set, main, merge, scale_table

APPROX = "approx_hnsw-hnsw-hnsw"
EXACT = "0_linear:1e-06"


def _mem(bytes_: int, items: int, per: str) -> dict:
    return {"bytes": bytes_, "how": "nbytes", "mapped": 0, "items": items, "per": per, "served": "mapped"}


def _row(docs: int, dense: float, triples: float, ppr: float, pers: float, whole: float, **extra) -> dict:
    row = {"docs": docs, "nodes": 8 * docs, "edges": 73 * docs, "triples": docs}
    row.update({f"dense_{EXACT}": dense, f"triples_{EXACT}": triples, f"ppr_{EXACT}": ppr})
    row.update({f"pers_{EXACT}": pers, f"whole_{EXACT}": whole})
    row.update(extra)
    return row


def test_linear_bytes_per_passage() -> None:
    # 1,536 B per passage (384-d float32) × 21,000,000 = 32,256,000,000 B = 32.256 GB
    p = Projection("passage vectors", "B", "mem:x", 1_536_000_000, 1_000_000, 21_000_000, "docs", "linear")
    assert p.exponent == 1.0 and p.value == 32_256_000_000
    assert p.arithmetic() == "1.536 GB × (21,000,000 / 1,000,000) = **32.256 GB**"


def test_power_law_from_the_measured_growth() -> None:
    # 10 ms at 10k → 20 ms at 1M: b = ln 2 / ln 100 = 0.150515;
    # 21^b = e^(0.150515 × 3.044522 = 0.458246) = 1.58130
    p = Projection("part", "ms/query", "k", 20.0, 1e6, 21e6, "docs", "power", 10.0, 1e4)
    assert p.exponent == pytest.approx(0.150515, abs=1e-6)
    assert p.value == pytest.approx(20 * 1.58130, rel=1e-5)  # 31.63 ms
    assert "b = 0.15" in p.law_text()
    flat = Projection("part", "ms/query", "k", 5.0, 1e6, 21e6, "docs", "power", 6.0, 1e4)
    assert flat.exponent == 0.0 and flat.value == 5.0  # a shrinking cost is held, not extrapolated down
    lone = Projection("part", "ms/query", "k", 5.0, 1e6, 21e6, "docs", "power")
    assert lone.value == 105.0 and "upper bound" in lone.law_text()  # no small size: linear


def test_serving_sets() -> None:
    assert in_serving_set("exact triple index (faiss flat copy)", EXACT)
    assert not in_serving_set("exact triple index (faiss flat copy)", APPROX)
    assert not in_serving_set(f"passage index hnsw [{APPROX}]", EXACT)
    assert in_serving_set(f"passage index hnsw [{APPROX}]", APPROX)
    assert not in_serving_set("passage index hnsw [approx_ivf-ivf-ivf]", APPROX)


def test_table_cells_are_the_hand_computed_products() -> None:
    small = _row(10_000, dense=1.0, triples=0.5, ppr=1.5, pers=0.1, whole=4.0, basis_s=10.0)
    small.update({f"ppr_{APPROX}": 2.0, f"whole_{APPROX}": 3.0, f"index_build_s_{APPROX}": 2.0})
    big = _row(1_000_000, dense=126.0, triples=54.0, ppr=154.0, pers=0.2, whole=340.0, basis_s=1000.0)
    big.update({f"ppr_{APPROX}": 4.0, f"whole_{APPROX}": 9.0, f"index_build_s_{APPROX}": 200.0})
    big["mem:passage vectors (KB, float32)"] = _mem(1_536_000_000, 1_000_000, "doc")
    big["mem:triple vectors (KB, float32)"] = _mem(1_536_000_000, 1_000_000, "triple")
    big["mem:PPR transition (CSR M and S, strength, perm)"] = _mem(1_752_000_000, 146_000_000, "edge")
    big["mem:exact triple index (faiss flat copy)"] = _mem(1_536_000_000, 1_000_000, "triple")
    big[f"mem:passage index hnsw [{APPROX}]"] = _mem(1_800_000_000, 1_000_000, "doc")
    text = "\n".join(scale_table([small, big], Target(21_000_000, 9.1), "rows.json"))
    # triples: 21,000,000 × 9.1 = 191,100,000; × 1,536 B = 293,529,600,000 B
    assert "1.536 GB × (191,100,000 / 1,000,000) = **293.530 GB**" in text
    # transition: 12 B per CSR non-zero; 21 M × 73 edges × 2 = 3,066,000,000 non-zeros → 36.792 GB
    assert "1.752 GB × (3,066,000,000 / 146,000,000) = **36.792 GB**" in text
    # dense flat scan: 126 ms × 21 = 2,646 ms; triple flat scan: 54 ms × 191.1 = 10,319.4 ms
    assert "126.0 ms/query × (21,000,000 / 1,000,000) = **2,646.0 ms/query**" in text
    assert "54.00 ms/query × (191,100,000 / 1,000,000) = **10,319.4 ms/query**" in text
    # linear PPR: the basis GEMV, 154 × 21 = 3,234; personalization 0.1 → 0.2: b = ln 2 / ln 100
    assert "154.0 ms/query × (21,000,000 / 1,000,000) = **3,234.0 ms/query**" in text
    pers = 0.2 * 21 ** (math.log(2) / math.log(100))  # 0.316 ms
    # whole: parts 10,319.4 + 2,646 + 0.32 + 3,234 plus the rest 340 − (126 + 54 + 154 + 0.2) = 5.8 ms
    whole = 10_319.4 + 2_646.0 + pers + 3_234.0 + 5.8
    assert f"= **{whole:,.1f} ms/query**" in text
    # approximate PPR: 2 → 4 ms from 10k to 1M: b = 0.15, 4 × 1.58130 = 6.33 ms
    assert "4.00 ms/query × (21,000,000 / 1,000,000)^0.15 = **6.33 ms/query**" in text
    # builds: basis 10 s → 1,000 s (b = 1): 21,000 s; indexes 2 → 200 s (b = 1): 4,200 s
    assert "1,000.0 s × (21,000,000 / 1,000,000) = **21,000.0 s**" in text
    assert "200.0 s × (21,000,000 / 1,000,000) = **4,200.0 s**" in text
    # totals: the exact replica holds the flat index, not the approximate passage index
    exact_total = 32.256 + 293.5296 + 36.792 + 293.5296
    assert f"all components a replica serving [{EXACT}] holds" in text
    assert f"= **{exact_total:,.3f} GB**" in text
    approx_total = 32.256 + 293.5296 + 36.792 + 1.8 * 21
    assert f"= **{approx_total:,.3f} GB**" in text


def test_cli_merges_files(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([_row(10_000, 1.0, 0.5, 1.5, 0.1, 4.0)]))
    b.write_text(json.dumps([_row(1_000_000, 126.0, 54.0, 154.0, 0.2, 340.0), {"docs": 10_000, "x": 1}]))
    rows = merge([str(a), str(b)])
    assert [r["docs"] for r in rows] == [10_000, 1_000_000]
    assert rows[0]["x"] == 1 and rows[0]["dense_" + EXACT] == 1.0  # later files win per key only
    assert main(["--rows", f"{a},{b}", "--passages", "2000000"]) == 0
    out = capsys.readouterr().out
    assert "126.0 ms/query × (2,000,000 / 1,000,000) = **252.0 ms/query**" in out


def test_build_cost_rows_multiply_measured_per_passage_costs(tmp_path, capsys) -> None:
    from benchmarks.retrieval.scale_table import build_cost_projections

    cost = {
        "ray_spacy": {
            "passages": 1_000,
            "stages": [
                {"stage": "corpus", "seconds": 0.1, "cpus": 1.0, "core_s_per_passage": 0.0001},
                {"stage": "OpenIE", "seconds": 18.0, "cpus": 2.0, "core_s_per_passage": 0.036},
            ],
        },
        "tokens": {"passages": 1_000, "prefill": {"mean": 750.0}, "decode": {"mean": 200.0}},
    }
    target = Target(21_000_000, 9.1)
    p = build_cost_projections(cost, target)
    assert [x.source for x in p] == ["ray_spacy:OpenIE", "tokens:prefill", "tokens:decode"]  # corpus skipped
    # OpenIE: 18 s × 2 CPUs = 36 core-s = 0.01 core-h for 1,000 passages; × 21,000 = 210 core-h
    assert p[0].measured == pytest.approx(0.01)
    assert p[0].value == pytest.approx(210.0)
    # prefill: 750 × 1,000 = 0.75 M tokens; × 21,000 = 15,750 M tokens
    assert p[1].value == pytest.approx(15_750.0)
    # decode: 200 × 21,000,000 = 4,200 M tokens
    assert p[2].value == pytest.approx(4_200.0)
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(cost))
    assert main(["--build-cost", str(path)]) == 0
    out = capsys.readouterr().out
    assert "0.01 core-h × (21,000,000 / 1,000) = **210.0 core-h**" in out
