"""Fusion tuning: the seeded split, the selection rule on hand-made recall tables, the cached-score path."""

from __future__ import annotations

import pytest

from gta_verl.data.types import QAExample
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.evaluate import evaluate_retrieval, recall_at_k
from gta_verl.retrieval.retriever import GraphRetriever
from gta_verl.retrieval.tuning import (
    Dataset,
    FusionChoice,
    default_grid,
    dominates,
    format_tune_report,
    objective,
    select_fusion,
    split_halves,
    tune_fusion,
)


def test_split_halves_is_a_seeded_partition_independent_of_order() -> None:
    ids = [f"q{i}" for i in range(11)]
    tune, held = split_halves(ids, seed=0)
    assert len(tune) == 6 and len(held) == 5  # ⌈11/2⌉ tune
    assert sorted(tune + held) == list(range(11))
    assert split_halves(ids, 0) == (tune, held)
    rev = ids[::-1]
    tune_r, _ = split_halves(rev, 0)
    assert {rev[i] for i in tune_r} == {ids[i] for i in tune}  # same questions whatever the file order
    assert split_halves(ids, 1) != (tune, held)
    with pytest.raises(ValueError, match="unique"):
        split_halves(["a", "a"], 0)


DENSE = {1: 0.30, 2: 0.50, 5: 0.60}
GRAPH = {1: 0.20, 2: 0.50, 5: 0.70}


def test_objective_and_dominance_by_hand() -> None:
    assert objective({1: 0.3, 2: 0.5, 5: 0.7}) == pytest.approx(0.6)  # (0.5 + 0.7) / 2
    assert dominates({1: 0.3, 2: 0.5, 5: 0.7}, [DENSE, GRAPH])  # ties count
    assert not dominates({1: 0.29, 2: 0.9, 5: 0.9}, [DENSE, GRAPH])  # R@1 below dense


def test_select_fusion_prefers_the_best_rule_that_matches_both_retrievers() -> None:
    table = {
        "a": {1: 0.30, 2: 0.50, 5: 0.70},  # passes, objective 0.600
        "b": {1: 0.25, 2: 0.60, 5: 0.80},  # objective 0.700 but R@1 0.25 < dense 0.30
        "c": {1: 0.35, 2: 0.55, 5: 0.70},  # passes, objective 0.625
    }
    assert select_fusion([table], [[DENSE, GRAPH]]) == ("c", True)
    # nothing passes → the smallest worst shortfall, flagged: b misses dense R@1 by 0.30 − 0.25 = 0.05;
    # d has the higher objective (0.9 + 0.9)/2 but misses dense R@1 by 0.30 − 0.10 = 0.20
    d = {1: 0.10, 2: 0.90, 5: 0.90}
    assert select_fusion([{"d": d, "b": table["b"]}], [[DENSE, GRAPH]]) == ("b", False)
    # equal shortfalls (0.05 each) → the better objective: e (0.5 + 0.65)/2 = 0.575 < b 0.700
    e = {1: 0.25, 2: 0.50, 5: 0.65}
    assert select_fusion([{"e": e, "b": table["b"]}], [[DENSE, GRAPH]]) == ("b", False)
    # a tie goes to the first candidate
    assert select_fusion([{"a": table["a"], "a_again": table["a"]}], [[DENSE, GRAPH]]) == ("a", True)


def test_select_fusion_over_two_datasets() -> None:
    refs2 = [{1: 0.40, 2: 0.40, 5: 0.40}]
    t1 = {"c": {1: 0.35, 2: 0.55, 5: 0.70}, "a": {1: 0.30, 2: 0.50, 5: 0.70}}
    # c fails on dataset 2 (R@1 0.35 < 0.40); a passes both
    t2 = {"c": {1: 0.35, 2: 0.90, 5: 0.90}, "a": {1: 0.40, 2: 0.45, 5: 0.50}}
    assert select_fusion([t1, t2], [[DENSE, GRAPH], refs2]) == ("a", True)
    # both pass once the bar is lower: c by mean objective (0.625 + 0.9)/2 vs a (0.6 + 0.475)/2
    low = [{1: 0.0, 2: 0.0, 5: 0.0}]
    assert select_fusion([t1, t2], [low, low]) == ("c", True)
    with pytest.raises(ValueError):
        select_fusion([t1, {"a": t2["a"], "c": t2["c"]}], [low, low])  # different candidate order


def test_default_grid_starts_with_todays_default() -> None:
    grid = default_grid((0, 100))
    d = RetrieverConfig()
    assert grid[0] == FusionChoice(d.fusion, d.dense_head, d.fusion_weight, d.passage_seed_top)
    assert len(grid) == 2 * (3 + 4 + 9)
    assert FusionChoice("score", fusion_weight=0.3).label == "score(λ=0.3)"


@pytest.fixture(scope="module")
def toy_qa(toy_kb) -> list[QAExample]:
    p = {x.title: x.doc_id for x in toy_kb.passages}
    rows = [
        ("Where was the president of France born?", ("France", "Emmanuel Macron", "Amiens")),
        ("capital of Japan", ("Tokyo",)),
        ("highest mountain in Japan", ("Mount Fuji",)),
        ("Where was the chancellor of Germany born?", ("Germany", "Olaf Scholz")),
        ("Which river flows through Amiens?", ("Amiens",)),
        ("What is the capital of Germany?", ("Berlin",)),
        ("Where is the Eiffel Tower?", ("Paris",)),
        ("Which country has Paris as capital?", ("France", "Paris")),
    ]
    return [
        QAExample(str(i), q, ("x",), tuple(p[t] for t in gold), len(gold)) for i, (q, gold) in enumerate(rows)
    ]


def test_tune_fusion_rows_equal_eval_retrieval_on_the_held_out_half(toy_kb, hash_embedder, toy_qa) -> None:
    cfg = RetrieverConfig(k_graph=2, k_dense=2)
    r = GraphRetriever(toy_kb, hash_embedder, cfg)
    ks = (1, 2, 3)
    with pytest.raises(ValueError, match="objective"):
        tune_fusion([Dataset("toy", r, toy_qa)], ks=ks)  # R@5 is not reported
    rep = tune_fusion([Dataset("toy", r, toy_qa)], default_grid(), split_seed=3, ks=ks, objective_ks=(2, 3))
    (d,) = rep.datasets
    _, held = split_halves([q.qid for q in toy_qa], 3)
    held_qa = [toy_qa[i] for i in held]
    assert d.n_held_out == len(held) == 4 and d.n_tune == 4
    ev = evaluate_retrieval(r, held_qa, ks=ks, config=rep.chosen.apply(cfg))["modes"]
    rows = d.held_out
    for mode in ("dense", "graph"):
        assert rows[mode] == {k: ev[mode]["recall"][f"R@{k}"] for k in ks}
    assert rows[f"hybrid (chosen: {rep.chosen.label})"] == {k: ev["hybrid"]["recall"][f"R@{k}"] for k in ks}
    base = evaluate_retrieval(r, held_qa, modes=("hybrid",), ks=ks)["modes"]["hybrid"]["recall"]
    assert rows["hybrid (config: dense_head(3))"] == {k: base[f"R@{k}"] for k in ks}
    # R(q): the K_g ∪ K_d hits retrieve() returns under the chosen order
    hits = r.with_config(rep.chosen.apply(cfg)).retrieve([q.question for q in held_qa])
    want = {
        k: round(
            sum(recall_at_k(h.doc_ids, q.supporting_doc_ids, k) for h, q in zip(hits, held_qa, strict=True))
            / 4,
            4,
        )
        for k in ks
    }
    assert rows["R(q) (chosen; K_g=2, K_d=2)"] == want
    for choice in (FusionChoice("score", fusion_weight=0.3), FusionChoice("rrf")):
        ev_c = evaluate_retrieval(r, held_qa, modes=("hybrid",), ks=ks, config=choice.apply(cfg))
        want_c = {k: ev_c["modes"]["hybrid"]["recall"][f"R@{k}"] for k in ks}
        assert d.held_out_candidates[choice.label] == want_c
    assert rep.chosen.label in d.tune and set(d.held_out_candidates) == {c.label for c in default_grid()}
    assert "held-out half (4 questions" in format_tune_report(rep)


def test_held_out_shortfalls_names_each_k_below_a_single_retriever() -> None:
    from gta_verl.retrieval.tuning import DatasetResult, held_out_shortfalls

    rows = {"dense": {1: 0.4, 2: 0.5}, "graph": {1: 0.3, 2: 0.6}, "hybrid (chosen: rrf)": {1: 0.4, 2: 0.55}}
    res = DatasetResult("x", 2, 2, {}, rows, {})
    assert held_out_shortfalls(res, (1, 2)) == ["R@2 0.550 < graph 0.600"]
    rows["hybrid (chosen: rrf)"] = {1: 0.4, 2: 0.6}
    assert held_out_shortfalls(res, (1, 2)) == []


def test_cli_tune_fusion_prints_the_held_out_table(toy_kb_dir, tmp_path, capsys, monkeypatch) -> None:

    from gta_verl.cli import main
    from gta_verl.testing.toy_kb import TOY_DOCS, HashEmbedder
    from tests.retrieval.qa_json import qa_record, write_qa

    monkeypatch.setattr("gta_verl.kb.embed.load_embedder", lambda *a, **kw: HashEmbedder())
    qa = [
        qa_record(f"q{i}", f"{title} {text.split()[-1]}", title, title, text)
        for i, (title, text, _) in enumerate(TOY_DOCS)
    ]
    path = write_qa(tmp_path / "qa.json", qa)
    argv = [
        "eval-retrieval",
        "--kb",
        str(toy_kb_dir),
        "--qa",
        str(path),
        "--tune-fusion",
        "--split-seed",
        "1",
        "--fusion",
        "score",
        "--fusion-weight",
        "0.7",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "held-out half (5 questions" in out and "tune half (5 questions" in out
    assert "| hybrid (config: score(λ=0.7)) |" in out  # the CLI's own order is reported beside the choice
