"""HotpotQA → verl QA parquet (and, with ``--context``, Stage II's retrieval corpus).

Three inputs are understood:
  * ReAct's simplified dev file ``[{question, answer, type}]`` (bundled; answers only), the default;
    the official ``hotpot_train_v1.1.json`` reads the same way (its ``question``/``answer`` keys);
  * with ``--corpus``, a HippoRAG/2Wiki-style question file with ``supporting_facts`` plus its corpus
    (``{title: [sentences]}`` or ``[{title, text}]``), giving gold doc ids as well;
  * with ``--context``, HotpotQA records with their own ``context`` paragraphs (the official
    ``hotpot_train_v1.1.json``, or HippoRAG's ``assets/hotpotqa_train/hotpotqa_train.json``): writes
    ``<name>_<split>.parquet`` (gold doc ids = the supporting-fact paragraphs) and
    ``<name>_<split>_corpus.parquet``, the kept questions' context paragraphs (deduplicated by
    title + text), for ``gta-verl kb build --corpus``: ``--paragraphs all`` (default) = gold +
    distractors (9.94 per question: ≈ 99,400 documents for 10,000 questions), ``--paragraphs gold``
    = the supporting-fact paragraphs alone, the size of the paper's Stage-II graph (~18,300
    documents for 10,000 questions, ≈ 1.83 per question).

    python data_prep/hotpotqa.py [--input assets/hotpotqa/hotpot_dev_v1_simplified.json] [--out data/hotpotqa]
    python data_prep/hotpotqa.py --input hotpotqa.json --corpus hotpotqa_corpus.json --out data/hotpotqa
    python data_prep/hotpotqa.py --context --input hotpot_train_v1.1.json --sample 10000 --seed 0 \\
        --split 10k_train --out data/gta_rag

GTA-RAG Stage II trains on 10,000 HotpotQA questions (§4.1) without saying which; ``--sample N
--seed S`` draws a seeded uniform random sample of N questions (kept in file order), unlike
``--limit N`` (the first N, which follow the file's ordering). The recipe step
``recipes/gta_rag/data/prepare_stage2_hotpotqa.sh`` writes ``$DATA_DIR/hotpotqa_10k_train.parquet``
and its corpus this way, with ``--paragraphs gold`` (the paper's corpus size).
"""

import argparse
from pathlib import Path

from gta_verl.data.hotpot_context import head_report, sample_report
from gta_verl.data.loaders import DataFormatError
from gta_verl.data.prep import (
    QA_READERS,
    prepare_hotpot_context,
    prepare_qa,
    prepare_supporting_facts,
)

#: The repository's datasets (a checkout's assets/; they do not ship in the wheel).
REPO_ASSETS = Path(__file__).resolve().parents[1] / "assets"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--input",
        default=None,
        help="question file (default: assets/hotpotqa/hotpot_dev_v1_simplified.json; "
        "with --context: assets/hotpotqa_train/hotpotqa_train.json)",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--corpus", default=None, help="corpus of a supporting_facts question file")
    mode.add_argument(
        "--context",
        action="store_true",
        help="HotpotQA records with context: also write their paragraphs as a corpus",
    )
    ap.add_argument("--out", default="data/hotpotqa", help="output directory")
    ap.add_argument("--name", default="hotpotqa", help="data_source (e.g. 2wikimultihopqa)")
    ap.add_argument("--split", default=None, help="split name (default: dev; with --context: train)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument(
        "--limit", type=int, default=None, help="keep the first N questions (not with --corpus)"
    )
    group.add_argument(
        "--sample",
        type=int,
        default=None,
        help="keep a seeded random sample of N questions (not with --corpus; Stage II: 10000)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample")
    ap.add_argument(
        "--strict", action="store_true", help="with --context: fail on the first malformed record"
    )
    ap.add_argument(
        "--paragraphs",
        choices=("all", "gold"),
        default="all",
        help="with --context: corpus of every context paragraph (all: gold + distractors, default) "
        "or of the gold paragraphs alone (gold: the paper's Stage-II corpus size)",
    )
    a = ap.parse_args()
    for flag, value in (("--sample", a.sample), ("--limit", a.limit)):
        if value is not None and value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    if Path(a.out).exists() and not Path(a.out).is_dir():
        ap.error(f"--out {a.out}: exists and is not a directory")
    try:
        _run(a, ap)
    except (DataFormatError, OSError) as exc:  # bad input or an unwritable --out: one line, no traceback
        ap.exit(2, f"{ap.prog}: error: {exc}\n")


def _run(a: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    if a.context:
        prepare_hotpot_context(
            a.input or REPO_ASSETS / "hotpotqa_train" / "hotpotqa_train.json",
            a.out,
            a.name,
            a.split or "train",
            sample=a.sample,
            seed=a.seed,
            limit=a.limit,
            strict=a.strict,
            paragraphs=a.paragraphs,
        )
        return
    split = a.split or "dev"
    qa_in = a.input or str(REPO_ASSETS / "hotpotqa" / "hotpot_dev_v1_simplified.json")
    if a.corpus:
        if a.sample is not None or a.limit is not None:
            ap.error("--sample/--limit do not apply with --corpus (use --context for HotpotQA records)")
        prepare_supporting_facts(a.corpus, qa_in, Path(a.out), a.name, split)
        return
    report = QA_READERS["react_hotpot"](qa_in, data_source=a.name, split=split)
    if a.sample is not None:
        report = sample_report(report, a.sample, a.seed)
    elif a.limit is not None:
        report = head_report(report, a.limit)
    prepare_qa(report, Path(a.out) / f"{a.name}_{split}.parquet")


if __name__ == "__main__":
    main()
