"""PathRouter's P on real retrieval outputs of the bundled MuSiQue KB: gold found vs missed.

Usage:
    python -m benchmarks.retrieval.p_distribution [--kb-dir DIR] [--max-obs-tokens 512]

For each of the 100 bundled MuSiQue questions, deterministic rollouts are run through the
real graph retriever (PPR + dense, default K_g = K_d = 3) and the agent loop's observation
fitting (:func:`gta_verl.agent.observation.fit_observation`, Qwen2.5 tokenizer, the default
cap): only the passages shown, as shown, enter P, exactly as in training. Rollouts:

* ``decomposition``: one search per MuSiQue sub-question (2–4 searches; ``#k`` replaced by
  hop k's answer) — a competent agent;
* ``question``: one search with the full question;
* ``first_hop``: the first sub-question only;
* ``other_question``: the sub-questions of another question (i+1) — searches that miss.

Each rollout is labelled by how much of S(x) it was shown (all / some / none) and P is
computed with both readings (``best_passage``, ``bag``). Prints markdown tables: P
quantiles per label, and for candidate θ_P the share of rollouts routed P↑ per label.
Results and the command are recorded in docs/benchmarks/p_distribution.md.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from gta_verl.agent.observation import fit_observation
from gta_verl.agent.tokenizer import load_qwen_tokenizer
from gta_verl.bundled import MUSIQUE_DIR
from gta_verl.data.loaders import read_hipporag_corpus, read_musique_qa
from gta_verl.rewards.path_router import path_overlap

ASSETS = MUSIQUE_DIR
THETAS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
LABELS = ("all gold shown", "some gold shown", "no gold shown")


def _kb_dir(arg: str | None) -> Path:
    """``--kb-dir``, else a verified cached MuSiQue KB, else build one into the cache."""
    from gta_verl.kb.embed import cache_root
    from gta_verl.kb.store import KBLoadError, verify_kb

    if arg:
        return Path(arg)
    root = cache_root() / "kb"
    for cand in sorted(root.glob("musique-*"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            verify_kb(cand)
            return cand
        except KBLoadError:
            continue
    from gta_verl.kb.build import build_kb_from_files

    out = root / "musique-p-distribution"
    openie = ASSETS / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"
    build_kb_from_files(
        ASSETS / "musique_train_corpus.json", "hipporag", f"precomputed:{openie}", out, progress=False
    )
    return out


def _decomposition(rec: dict) -> list[str]:
    """Sub-questions with ``#k`` replaced by hop k's answer (what a competent agent asks)."""
    steps = rec["question_decomposition"]
    answers = [s["answer"] for s in steps]
    return [re.sub(r"#(\d+)", lambda m: answers[int(m.group(1)) - 1], s["question"]) for s in steps]


def _plans(raw: list[dict]) -> list[tuple[int, str, list[str]]]:
    plans = []
    for i, rec in enumerate(raw):
        sub = _decomposition(rec)
        other = _decomposition(raw[(i + 1) % len(raw)])
        plans += [
            (i, "decomposition", sub),
            (i, "question", [rec["question"]]),
            (i, "first_hop", sub[:1]),
            (i, "other_question", other),
        ]
    return plans


def _label(shown_ids: set[str], gold: set[str]) -> str:
    found = len(shown_ids & gold)
    return LABELS[0] if found == len(gold) else LABELS[1] if found else LABELS[2]


def run(kb_dir: Path, cap: int) -> list[dict]:
    """One row per rollout: label, strategy, #passages shown, P (both readings)."""
    from gta_verl.retrieval.backends import open_retriever

    tok = load_qwen_tokenizer()

    def encode(s):
        return list(tok.encode(s, add_special_tokens=False))

    def decode(ids):
        return tok.decode(list(ids), skip_special_tokens=False)

    corpus = {p.doc_id: p for p in read_hipporag_corpus(ASSETS / "musique_train_corpus.json").records}
    qa = read_musique_qa(ASSETS / "musique_train.json", corpus_ids=corpus).records
    by_qid = {ex.qid: ex for ex in qa}
    raw = json.loads((ASSETS / "musique_train.json").read_text(encoding="utf-8"))
    retriever = open_retriever(kb_dir)
    plans = _plans(raw)
    queries = sorted({q for _, _, qs in plans for q in qs})
    results = dict(zip(queries, retriever.retrieve(queries), strict=True))
    rows = []
    for i, strategy, qs in plans:
        ex = by_qid.get(str(raw[i]["id"]))
        if ex is None or not ex.supporting_texts:
            continue
        shown = [
            h
            for q in qs
            for h in fit_observation(results[q].hits, results[q].error, cap, encode, decode).shown
        ]
        texts = [f"{h.title}\n{h.text}" for h in shown]
        rows.append(
            {
                "label": _label({h.doc_id for h in shown}, set(ex.supporting_doc_ids)),
                "strategy": strategy,
                "n_shown": len(shown),
                "best_passage": path_overlap(texts, ex.supporting_texts, "best_passage"),
                "bag": path_overlap(texts, ex.supporting_texts, "bag"),
            }
        )
    return rows


def _quantile_table(rows: list[dict]) -> str:
    out = [
        "| reading | rollouts | n | passages shown (mean) | min | p10 | p25 | median | p75 | p90 | max |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for reading in ("best_passage", "bag"):
        for label in LABELS:
            sel = [r for r in rows if r["label"] == label]
            if not sel:
                continue
            p = np.array([r[reading] for r in sel])
            q = np.quantile(p, [0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0])
            shown = np.mean([r["n_shown"] for r in sel])
            cells = " | ".join(f"{v:.3f}" for v in q)
            out.append(f"| {reading} | {label} | {len(sel)} | {shown:.1f} | {cells} |")
    return "\n".join(out)


def _theta_table(rows: list[dict]) -> str:
    head = "| reading | θ_P | " + " | ".join(f"P↑ share: {lab}" for lab in LABELS) + " |"
    out = [head, "|---|---:|" + "---:|" * len(LABELS)]
    for reading in ("best_passage", "bag"):
        for theta in THETAS:
            cells = []
            for label in LABELS:
                sel = [r[reading] for r in rows if r["label"] == label]
                cells.append(f"{np.mean([p >= theta for p in sel]):.2f}" if sel else "–")
            out.append(f"| {reading} | {theta:g} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb-dir", default=None)
    parser.add_argument("--max-obs-tokens", type=int, default=512)
    args = parser.parse_args()
    kb_dir = _kb_dir(args.kb_dir)
    rows = run(kb_dir, args.max_obs_tokens)
    strategies = dict.fromkeys(r["strategy"] for r in rows)
    by_strategy = {s: sum(r["strategy"] == s for r in rows) for s in strategies}
    print(f"KB: {kb_dir}  rollouts: {len(rows)} {by_strategy}  max_obs_tokens: {args.max_obs_tokens}\n")
    print(_quantile_table(rows) + "\n")
    print(_theta_table(rows))


if __name__ == "__main__":
    main()
