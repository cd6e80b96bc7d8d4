"""HotpotQA → verl QA parquet.

Two inputs are understood:
  * ReAct's simplified dev file ``[{question, answer, type}]`` (bundled; answers only), the default;
    the official ``hotpot_train_v1.1.json`` reads the same way (its ``question``/``answer`` keys);
  * with ``--corpus``, a HippoRAG/2Wiki-style question file with ``supporting_facts`` plus its corpus
    (``{title: [sentences]}`` or ``[{title, text}]``), giving gold doc ids as well.

    python data_prep/hotpotqa.py [--input assets/hotpotqa/hotpot_dev_v1_simplified.json] [--out data/hotpotqa]
    python data_prep/hotpotqa.py --input hotpotqa.json --corpus hotpotqa_corpus.json --out data/hotpotqa

GTA-RAG Stage II trains on 10,000 HotpotQA questions (§4.1) without saying which; ``--sample N
--seed S`` draws a seeded uniform random sample of N questions (kept in file order), unlike
``--limit N`` (the first N, which follow the file's ordering). The recipe step
``recipes/gta_rag/prepare_stage2.sh`` writes ``$DATA_DIR/hotpotqa_10k_train.parquet`` this way.
"""

import argparse
import random
from pathlib import Path

from gta_verl.data.loaders import Rejection
from gta_verl.data.prep import QA_READERS, REPO_ASSETS, prepare_qa, prepare_supporting_facts


def sample_records(report, n: int, seed: int):
    """Keep a seeded uniform sample of ``n`` records (file order); the rest are rejected with a reason.

    Counts reconcile: ``n_in = kept + rejected``. With ``n`` ≥ the records read, all are kept.
    """
    if n < 1:
        raise ValueError(f"--sample must be >= 1, got {n}")
    if report.n_ok <= n:
        return report
    keep = set(random.Random(seed).sample(range(report.n_ok), n))
    dropped = [r for i, r in enumerate(report.records) if i not in keep]
    report.records = [r for i, r in enumerate(report.records) if i in keep]
    report.rejected += [Rejection(report.path, -1, f"not sampled: --sample {n} --seed {seed}") for _ in dropped]
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(REPO_ASSETS / "hotpotqa" / "hotpot_dev_v1_simplified.json"))
    ap.add_argument("--corpus", default=None, help="corpus of a supporting_facts question file")
    ap.add_argument("--out", default="data/hotpotqa", help="output directory")
    ap.add_argument("--name", default="hotpotqa", help="data_source (e.g. 2wikimultihopqa)")
    ap.add_argument("--split", default="dev")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--limit", type=int, default=None, help="keep the first N questions (answers-only mode)")
    group.add_argument("--sample", type=int, default=None,
                       help="keep a seeded random sample of N questions (answers-only mode; Stage II: 10000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample")
    a = ap.parse_args()
    if a.corpus:
        if a.sample is not None or a.limit is not None:
            ap.error("--sample/--limit apply to the answers-only mode (no --corpus)")
        prepare_supporting_facts(a.corpus, a.input, Path(a.out), a.name, a.split)
        return
    report = QA_READERS["react_hotpot"](a.input, data_source=a.name, split=a.split)
    if a.sample is not None:
        report = sample_records(report, a.sample, a.seed)
    elif a.limit is not None and report.n_ok > a.limit:
        over = report.records[a.limit:]
        report.records = report.records[: a.limit]
        report.rejected += [Rejection(report.path, -1, f"over limit: --limit {a.limit}") for _ in over]
    prepare_qa(report, Path(a.out) / f"{a.name}_{a.split}.parquet")


if __name__ == "__main__":
    main()
