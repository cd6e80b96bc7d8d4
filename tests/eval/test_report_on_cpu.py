"""Report tables, cost section and PNG plots on hand-computed records."""

from __future__ import annotations

import json
import math

import pytest

from gta_verl.eval import plots
from gta_verl.eval.records import EvalRecord
from gta_verl.eval.report import cost_summary, write_report
from tests.eval.test_metrics_on_cpu import A, B, C, D

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _records() -> list[EvalRecord]:
    lat = {"a": (10.0, 20.0, 30.0), "b": (), "c": (40.0, 50.0), "d": (60.0,)}
    toks = {"a": 100, "b": 10, "c": 50, "d": 20}
    return [
        EvalRecord(
            rollout=r.__class__(**{**r.to_dict(), "response_tokens": toks[r.qid]}),
            prompt_tokens=200,
            retrieval_latency_ms=lat[r.qid],
        )
        for r in (A, B, C, D)
    ]


def _is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_cost_summary_hand_computed():
    c = cost_summary(_records())
    assert c["retrieval_calls_timed"] == 6
    assert c["retrieval_latency_p50_ms"] == pytest.approx(35.0)  # median of 10..60
    assert c["retrieval_latency_p95_ms"] == pytest.approx(57.5)  # linear interpolation at rank 0.95·5 = 4.75
    assert c["searches_per_question"] == pytest.approx(1.5)
    assert c["response_tokens_mean"] == pytest.approx(45.0)
    assert c["prompt_tokens_mean"] == 200


def test_write_report_tables_json_and_plots(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_text(
        "\n".join(
            json.dumps(
                {
                    "step": s,
                    "data": {
                        "train/path_router/route_share/C+P+": 0.1 * s,
                        "train/path_router/route_share/C-P-": 1 - 0.1 * s,
                        "actor/loss": 0.3,
                    },
                }
            )
            for s in (1, 2, 3)
        )
        + "\n"
    )
    paths = write_report(_records(), tmp_path / "out", name="tiny", meta={"policy": "tiny"}, metrics_log=log)
    rep = json.loads(paths.json.read_text())
    assert rep["overall"]["target_doc_cov"] == pytest.approx(0.5)
    assert rep["per_dataset"]["nq"]["target_doc_cov"] is None  # undefined -> null
    assert rep["average"]["em"] == pytest.approx(1 / 6)
    assert rep["per_hops"]["2"]["complete_traj_cov"] == 1.0
    md = paths.markdown.read_text()
    # Table 1 layout: per-dataset EM/F1 then the unweighted average (EM 16.7 = (50 + 0 + 0) / 3)
    assert (
        "| Policy | hotpotqa EM | hotpotqa F1 | musique EM | musique F1 | nq EM | nq F1 | Average EM |" in md
    )
    assert "| tiny | 0.0 | 66.7 | 50.0 | 50.0 | 0.0 | 0.0 | 16.7 | 38.9 |" in md
    # Table 3 layout, pooled row: 50.0 % target docs, 66.7 % complete chains, 2 zero-target turns,
    # 2 zero-target queries (one query per search: the same count), 1.50 searches
    assert "| All rollouts (pooled) | 3 | 50.0 | 66.7 | 2 | 0.67 | 2 | 1.50 |" in md
    assert "35.0 / 57.5 over 6 timed calls" in md
    assert "Published numbers" in md and "GTA-RAG, Qwen2.5-7B" in md
    assert set(paths.plots) == {"coverage_by_hops", "search_turns", "routes", "route_shares_over_training"}
    assert all(_is_png(p) for p in paths.plots.values())
    for p in paths.plots.values():
        assert f"plots/{p.name}" in md


def test_read_route_shares_formats(tmp_path):
    csv_path = tmp_path / "m.csv"
    csv_path.write_text(
        "step,path_router/route_share/C+P+,path_router/route_share/C+P-\n2,0.5,0.5\n1,0.25,0.75\n"
    )
    assert plots.read_route_shares(csv_path) == {"C+P+": [(1, 0.25), (2, 0.5)], "C+P-": [(1, 0.75), (2, 0.5)]}
    flat = tmp_path / "flat.jsonl"
    flat.write_text('{"step": 3, "val-aux/path_router/route_share/C-P+": 0.2}\n')
    assert plots.read_route_shares(flat) == {"C-P+": [(3, 0.2)]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        plots.read_route_shares(bad)
    with pytest.raises(ValueError, match="no 'path_router/route_share"):
        none = tmp_path / "none.jsonl"
        none.write_text('{"step": 1, "x": 2}\n')
        plots.read_route_shares(none)


def test_unmeasured_costs_are_undefined_not_zero():
    c = cost_summary([EvalRecord(rollout=A)])  # e.g. rebuilt from a verl dump: no timings, no tokens
    assert c["retrieval_calls_timed"] == 0
    for key in ("retrieval_latency_p50_ms", "response_tokens_mean", "prompt_tokens_mean"):
        assert math.isnan(c[key])
    assert c["searches_per_question"] == 3
