"""Stage II's retrieval corpus from HotpotQA context: sample, dedup, reject, gold ids ⊆ corpus, KB coverage.

Expected counts are read from the bundled file with json/ast here, never through the code under test.
``assets/hotpotqa_train/hotpotqa_train.json``: 100 questions, 99 with 10 context paragraphs and
record 98 with 4 (994 paragraphs, no (title, text) repeated across questions).
"""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gta_verl.data.hotpot_context import (
    build_context_corpus,
    context_examples,
    read_hotpot_context,
    sample_report,
)
from gta_verl.data.loaders import DataFormatError, read_corpus
from gta_verl.data.prep import prepare_hotpot_context
from gta_verl.testing.kb_argv import spacy_build_argv

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "assets" / "hotpotqa_train" / "hotpotqa_train.json"
SCRIPT = REPO / "data_prep" / "hotpotqa.py"
STAGE2_PREP = REPO / "recipes" / "gta_rag" / "data" / "prepare_stage2_hotpotqa.sh"
STAGE2_EM = REPO / "recipes" / "gta_rag" / "stage2_em.sh"


def _raw() -> list[dict]:
    """The bundled records with context/supporting_facts as lists (strings in other HippoRAG copies)."""
    recs = json.loads(BUNDLED.read_text())
    for r in recs:
        for key in ("context", "supporting_facts"):
            if isinstance(r[key], str):
                r[key] = ast.literal_eval(r[key])
    return recs


def _prep(out: Path, n: int = 20, seed: int = 0, **kw) -> tuple[pd.DataFrame, pd.DataFrame]:
    paths = prepare_hotpot_context(BUNDLED, out, sample=n, seed=seed, verbose=False, **kw)
    return pd.read_parquet(paths["qa"]), pd.read_parquet(paths["corpus"])


def _qids(qa: pd.DataFrame) -> list[str]:
    return [e["qid"] for e in qa["extra_info"]]


def _gold(qa: pd.DataFrame) -> list[list[str]]:
    return [list(rm["ground_truth"]["target_doc_ids"]) for rm in qa["reward_model"]]


def _para(title: str, n: int, tag: str = "") -> list:
    return [title, [f"{title} sentence {i}{tag}." for i in range(n)]]


def _record(qid: str, titles: list[str], gold: tuple[int, int] = (0, 1)) -> dict:
    ctx = [_para(t, 2) for t in titles]
    return {
        "_id": qid,
        "question": f"Q {qid}?",
        "answer": "yes",
        "type": "comparison",
        "supporting_facts": [[titles[gold[0]], 0], [titles[gold[1]], 1]],
        "context": ctx,
    }


def _write(path: Path, recs: list) -> Path:
    path.write_text(json.dumps(recs))
    return path


# --------------------------------------------------------------------------- the bundled sample
def test_sample_20_seed_0_counts_and_gold_ids_in_corpus(tmp_path):
    qa, corpus = _prep(tmp_path)
    raw = {r["_id"]: r for r in _raw()}
    kept = [raw[q] for q in _qids(qa)]
    # Hand check: seed 0 keeps 20 questions of 10 paragraphs each (record 98, the 4-paragraph one, is out).
    paragraphs = [(t, "".join(s)) for r in kept for t, s in r["context"]]
    assert (len(qa), len(paragraphs), len(set(paragraphs))) == (20, 200, 200)
    assert len(corpus) == len(set(paragraphs)) == 200
    assert set(zip(corpus["title"], corpus["text"], strict=True)) == set(paragraphs)
    # Kept in file order.
    order = [r["_id"] for r in _raw()]
    assert _qids(qa) == sorted(_qids(qa), key=order.index)
    # Gold = each question's supporting-fact paragraphs, as corpus doc ids.
    ids = dict(zip(zip(corpus["title"], corpus["text"], strict=True), corpus["doc_id"], strict=True))
    for r, gold, rm in zip(kept, _gold(qa), qa["reward_model"], strict=True):
        own = {t: "".join(s) for t, s in r["context"]}
        titles = list(dict.fromkeys(t for t, _ in r["supporting_facts"]))
        assert gold == [ids[(t, own[t])] for t in titles] and len(gold) == 2
        assert list(rm["ground_truth"]["support_texts"]) == [f"{t}\n{own[t]}" for t in titles]
        assert list(rm["ground_truth"]["target"]) == [r["answer"]]
    # `kb build` reads the corpus parquet back with the same doc ids.
    read_back = read_corpus(tmp_path / "hotpotqa_train_corpus.parquet").records
    assert {p.doc_id for p in read_back} == set(ids.values())
    # ... and the same ids as HippoRAG's corpus of these 100 questions ({title: [sentences]}).
    hipporag = read_corpus(BUNDLED.with_name("hotpotqa_train_corpus.json")).records
    assert set(ids.values()) <= {p.doc_id for p in hipporag}


def test_sample_is_seeded_and_file_order_kept(tmp_path):
    a_qa, a_c = _prep(tmp_path / "a")
    b_qa, b_c = _prep(tmp_path / "b")
    c_qa, c_c = _prep(tmp_path / "c", seed=1)
    assert _qids(a_qa) == _qids(b_qa) and list(a_c["doc_id"]) == list(b_c["doc_id"])
    assert _qids(a_qa) != _qids(c_qa)
    # The seed's contract: random.Random(seed).sample over the records, kept in file order.
    order = [r["_id"] for r in _raw()]
    assert _qids(c_qa) == [order[i] for i in sorted(random.Random(1).sample(range(100), 20))]
    assert len(c_c) == 19 * 10 + 4  # seed 1 keeps record 98 (4 paragraphs): hand count 194


def test_counts_reconcile_and_are_printed(tmp_path, capsys):
    prepare_hotpot_context(BUNDLED, tmp_path, sample=20, seed=0)
    out = capsys.readouterr().out
    assert "100 rows in, 20 written, 80 rejected [ok]" in out
    assert "200 rows in, 200 written, 0 rejected [ok]" in out


def test_cli_and_recipe_step(tmp_path):
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--context",
            "--input",
            str(BUNDLED),
            "--sample",
            "20",
            "--seed",
            "0",
            "--out",
            str(tmp_path / "cli"),
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    api_qa, api_c = _prep(tmp_path / "api")
    cli_qa = pd.read_parquet(tmp_path / "cli" / "hotpotqa_train.parquet")
    cli_c = pd.read_parquet(tmp_path / "cli" / "hotpotqa_train_corpus.parquet")
    assert _qids(cli_qa) == _qids(api_qa) and list(cli_c["doc_id"]) == list(api_c["doc_id"])
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHON": sys.executable,
        "HOTPOTQA_TRAIN": str(BUNDLED),
        "DATA_DIR": str(tmp_path / "recipe"),
        "N": "20",
        "SEED": "0",
    }
    proc = subprocess.run(
        ["bash", str(STAGE2_PREP)], check=True, env=env, capture_output=True, text=True, cwd=REPO
    )
    qa = pd.read_parquet(tmp_path / "recipe" / "hotpotqa_10k_train.parquet")  # STAGE2_TRAIN of common.sh
    corpus = pd.read_parquet(tmp_path / "recipe" / "hotpotqa_10k_train_corpus.parquet")
    # The recipe writes the gold-only corpus (the paper's size): 20 questions × 2 gold paragraphs = 40
    # (no two of these questions share a gold paragraph); the whole contexts would be 200.
    assert _qids(qa) == _qids(api_qa) and len(corpus) == 20 * 2 and len(api_c) == 200
    assert set(corpus["doc_id"]) == {d for g in _gold(qa) for d in g}
    assert {e["split"] for e in qa["extra_info"]} == {"10k_train"}
    assert "STAGE2_KB_DIR" in proc.stderr  # the next step is named


# --------------------------------------------------------------------------- malformed input
def test_malformed_records_rejected_with_file_index_and_reason(tmp_path):
    good = _record("g", [f"T{i}" for i in range(3)])
    no_ctx = {k: v for k, v in _record("a", ["A0", "A1"]).items() if k != "context"}
    ctx_int = {**_record("b", ["B0", "B1"]), "context": 5}
    ctx_junk = {**_record("c", ["C0", "C1"]), "context": "not a list ["}
    bad_item = {**_record("d", ["D0", "D1"]), "context": [["D0", "no sentence list"]]}
    gold_absent = {**_record("e", ["E0", "E1"]), "supporting_facts": [["Elsewhere", 0]]}
    no_answer = {**_record("f", ["F0", "F1"]), "answer": ""}
    recs = [good, no_ctx, ctx_int, ctx_junk, bad_item, gold_absent, no_answer, 7]
    path = _write(tmp_path / "bad.json", recs)
    rep = read_hotpot_context(path)
    assert [r.qid for r in rep.records] == ["g"]
    assert rep.n_in == 8 and rep.reconciles()
    why = {r.index: str(r) for r in rep.rejected}
    assert sorted(why) == [1, 2, 3, 4, 5, 6, 7]
    assert all(s.startswith(f"{path}:{i}: ") for i, s in why.items())
    assert why[1].endswith("missing field: context")
    assert "context must be a non-empty list" in why[2] and "got int" in why[2]
    assert "context must be a non-empty list" in why[3] and "got str" in why[3]
    assert "context[0] must be [title, [sentences]]" in why[4]
    assert "gold title not in context: 'Elsewhere'" in why[5]
    assert why[6].endswith("no gold answer") and "expected a JSON object" in why[7]
    with pytest.raises(DataFormatError, match=r"bad\.json:1: missing field: context"):
        read_hotpot_context(path, strict=True)


def test_string_literal_fields_as_in_hipporag_copies(tmp_path):
    rec = _record("s", [f"S{i}" for i in range(4)])
    rec["context"], rec["supporting_facts"] = str(rec["context"]), str(rec["supporting_facts"])
    (parsed,) = read_hotpot_context(_write(tmp_path / "s.json", [rec])).records
    assert parsed.gold_titles == ("S0", "S1") and len(parsed.paragraphs) == 4
    assert parsed.paragraphs[0] == ("S0", "S0 sentence 0.S0 sentence 1.")  # sentences joined as HotpotQA does


# --------------------------------------------------------------------------- dedup and conflicts
def test_shared_paragraph_is_one_passage(tmp_path):
    """Two questions of 10 paragraphs sharing one (title, text): 19 passages, not 20; one duplicate."""
    a = _record("a", ["Shared"] + [f"A{i}" for i in range(9)])
    b = _record("b", [f"B{i}" for i in range(9)] + ["Shared"], gold=(9, 0))
    rep = read_hotpot_context(_write(tmp_path / "two.json", [a, b]))
    corpus = build_context_corpus(rep.records, rep.path)
    assert (corpus.n_paragraphs, len(corpus.passages), len(corpus.rejected)) == (20, 19, 1)
    assert corpus.reconciles() and corpus.title_conflicts == ()
    assert corpus.rejected[0].index == 1 and "duplicate passage: 'Shared'" in corpus.rejected[0].reason
    qa_a, qa_b = context_examples(rep.records, corpus)
    assert qa_a.supporting_doc_ids[0] == qa_b.supporting_doc_ids[0]  # both point at the one passage
    ids = {p.doc_id for p in corpus.passages}
    assert set(qa_a.supporting_doc_ids + qa_b.supporting_doc_ids) <= ids


def test_surrounding_whitespace_dedups_like_the_corpus_readers(tmp_path):
    a = _record("a", ["X", "A1"])
    b = _record("b", ["X", "B1"])
    b["context"][0][1][0] = " " + b["context"][0][1][0]  # the same paragraph with a leading space
    rep = read_hotpot_context(_write(tmp_path / "ws.json", [a, b]))
    corpus = build_context_corpus(rep.records, rep.path)
    assert len(corpus.passages) == 3 and corpus.title_conflicts == ()
    assert corpus.rejected[0].reason.startswith("duplicate passage: 'X'")
    ids = {p.doc_id for p in corpus.passages}
    assert all(set(q.supporting_doc_ids) <= ids for q in context_examples(rep.records, corpus))


def test_title_with_two_texts_is_reported_and_each_question_keeps_its_own(tmp_path, capsys):
    a = _record("a", ["Same", "A1", "A2"])
    b = _record("b", ["Same", "B1", "B2"])
    b["context"][0] = _para("Same", 2, tag=" (other revision)")
    path = _write(tmp_path / "conflict.json", [a, b])
    rep = read_hotpot_context(path)
    corpus = build_context_corpus(rep.records, rep.path)
    assert len(corpus.passages) == 6
    (conflict,) = corpus.title_conflicts
    assert (conflict.title, conflict.n_texts, conflict.records) == ("Same", 2, (0, 1))
    qa_a, qa_b = context_examples(rep.records, corpus)
    by_id = {p.doc_id: p.text for p in corpus.passages}
    assert "other revision" not in by_id[qa_a.supporting_doc_ids[0]]
    assert "other revision" in by_id[qa_b.supporting_doc_ids[0]]
    prepare_hotpot_context(path, tmp_path / "out")
    assert "warning: title 'Same' has 2 different texts (records 0, 1)" in capsys.readouterr().out


def test_sampling_skips_malformed_records(tmp_path):
    recs = [_record(str(i), [f"P{i}a", f"P{i}b"]) for i in range(6)] + [{"question": "no context?"}]
    rep = sample_report(read_hotpot_context(_write(tmp_path / "m.json", recs)), 3, seed=0)
    assert rep.n_ok == 3 and rep.n_in == 7 and rep.reconciles()
    assert sum(r.reason.startswith("not sampled") for r in rep.rejected) == 3


# --------------------------------------------------------------------------- a real KB and the gate
@pytest.mark.slow  # one `kb build --openie spacy` of 100 paragraphs: 15–45 s on 2 loaded cores
def test_kb_from_the_corpus_covers_its_questions_and_the_gate_stops_others(tmp_path):
    _prep(tmp_path / "a", n=10, seed=0)
    _prep(tmp_path / "b", n=10, seed=1)  # shares one question (record 97) with seed 0
    kb = tmp_path / "kb_a"
    cli = [sys.executable, "-m", "gta_verl", "kb"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gta_verl",
            *spacy_build_argv(tmp_path / "a" / "hotpotqa_train_corpus.parquet", kb),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    own_qa = tmp_path / "a" / "hotpotqa_train.parquet"
    own = subprocess.run(
        [*cli, "check-coverage", "--kb", str(kb), "--qa", str(own_qa)], capture_output=True, text=True
    )
    assert own.returncode == 0 and "| 10 | 10 | 1.000 | 10 | 0 |" in own.stdout
    other_qa = tmp_path / "b" / "hotpotqa_train.parquet"
    other = subprocess.run(
        [*cli, "check-coverage", "--kb", str(kb), "--qa", str(other_qa)], capture_output=True, text=True
    )
    assert other.returncode == 2 and "| 10 | 10 | 0.100 | 1 | 9 |" in other.stdout
    # The recipe gate (not a dry run): stage2_em.sh stops before verl with exit 2 and says why.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE", "KB_DIR", "DRY_RUN"))}
    env.update(
        PYTHON=sys.executable,
        GTA_CONFIG_DIR="/nonexistent",
        STAGE2_KB_DIR=str(kb),
        STAGE2_TRAIN=str(other_qa),
        STAGE2_INIT="Qwen/Qwen2.5-3B-Instruct",
    )
    gate = subprocess.run(["bash", str(STAGE2_EM)], capture_output=True, text=True, env=env, timeout=120)
    assert gate.returncode == 2, gate.stderr
    assert "Stage II stopped by its coverage gate" in gate.stderr
    assert "STAGE2_MIN_COVERAGE=0.95" in gate.stderr
    assert "holds 10.0% of the questions' gold paragraphs" in gate.stderr  # check-coverage's own line
    assert "main_ppo" not in gate.stdout + gate.stderr


def test_gold_only_corpus_is_the_papers_size_and_all_is_five_times_larger(tmp_path):
    # Counted here from the raw JSON, independently of the code under test: the 100 bundled
    # questions carry 994 context paragraphs (9.94 per question, as in the full HotpotQA training
    # set), all distinct, of which 2 per question are gold: 200 distinct gold paragraphs.
    raw = _raw()
    every = {(t.strip(), "".join(s).strip()) for r in raw for t, s in r["context"]}
    gold = {
        (t.strip(), "".join(s).strip())
        for r in raw
        for t, s in r["context"]
        if t in {f[0] for f in r["supporting_facts"]}
    }
    assert sum(len(r["context"]) for r in raw) == 994 and len(every) == 994 and len(gold) == 2 * 100
    qa_all, c_all = _prep(tmp_path / "all", n=100)
    qa_gold, c_gold = _prep(tmp_path / "gold", n=100, paragraphs="gold")
    assert len(c_all) == 994 and len(c_gold) == 200
    # 994 / 200 = 4.97 here; at the paper's scale 9.94 · 10,000 ≈ 99,400 vs ~18,300 gold: 5.4×.
    assert len(c_all) / len(c_gold) == pytest.approx(994 / 200)
    # Same questions, same gold ids: a gold id is the same content hash in both corpora.
    assert _gold(qa_gold) == _gold(qa_all)
    assert set(c_gold["doc_id"]) == {d for g in _gold(qa_gold) for d in g}
    assert {(t.strip(), x.strip()) for t, x in zip(c_gold["title"], c_gold["text"], strict=True)} == gold


# --------------------------------------------------------------------------- non-finite and boolean answers
def test_non_finite_and_boolean_answers_are_rejected_not_stringified(tmp_path):
    # Before: JSON NaN, Infinity and true became the gold strings "nan", "inf", "True" (rc 0).
    titles = ["A0", "A1"]
    recs = [
        {**_record("nan", titles), "answer": float("nan")},
        {**_record("inf", titles), "answer": float("inf")},
        {**_record("true", titles), "answer": True},
        {**_record("year", titles), "answer": 1990},
    ]
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(recs))  # json writes NaN / Infinity / true literally
    rep = read_hotpot_context(path)
    assert [(r.qid, r.answers) for r in rep.records] == [("year", ("1990",))]
    why = {r.index: str(r) for r in rep.rejected}
    assert sorted(why) == [0, 1, 2] and rep.reconciles()
    assert all("answer must be a string or a finite number" in w for w in why.values())


def test_a_duplicate_id_is_rejected_naming_the_first(tmp_path):
    # Before: both records were written, the question twice.
    recs = [_record("q1", ["A0", "A1"]), _record("q2", ["B0", "B1"]), _record("q1", ["C0", "C1"])]
    rep = read_hotpot_context(_write(tmp_path / "dup.json", recs))
    assert [r.qid for r in rep.records] == ["q1", "q2"] and rep.n_in == 3 and rep.reconciles()
    (rej,) = rep.rejected
    assert rej.index == 2 and "duplicate _id 'q1': first at record 0" in str(rej)


@pytest.mark.parametrize(
    ("case", "args", "says"),
    [
        ("top-level object", [], "expected a JSON list"),
        ("truncated JSON", [], "not valid JSON"),
        ("--sample 0", ["--sample", "0"], "--sample must be >= 1"),
        ("--limit -1", ["--limit", "-1"], "--limit must be >= 1"),
        ("--out is a file", [], "exists and is not a directory"),
    ],
)
def test_cli_bad_input_is_one_line_not_a_traceback(tmp_path, case, args, says):
    inp = _write(tmp_path / "in.json", [_record("q1", ["A0", "A1"])])
    out = tmp_path / "out"
    if case == "top-level object":
        inp.write_text(json.dumps({"q1": _record("q1", ["A0", "A1"])}))
    elif case == "truncated JSON":
        inp.write_text(inp.read_text()[:40])
    elif case == "--out is a file":
        out.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--context", "--input", str(inp), "--out", str(out), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if "error:" in x]  # after argparse's usage, if any
    assert says in line and (case.startswith("--") or str(inp) in line or str(out) in line), line
