"""FlashRAG / Search-R1 data → parquet.

* QA jsonl ``{id, question, golden_answers, metadata}`` → verl QA parquet (``--input``);
* corpus jsonl ``{id, contents: "\\"title\\"\\ntext"}`` → corpus parquet (``--corpus``).

  python data_prep/flashrag.py --input nq/test.jsonl --out data/flashrag --name nq --split test
  python data_prep/flashrag.py --corpus wiki18.jsonl --out data/flashrag
"""

import argparse
from pathlib import Path

from gta_verl.data.prep import prepare_answers_only, prepare_corpus

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=None, help="FlashRAG QA jsonl")
    ap.add_argument("--corpus", default=None, help="FlashRAG/Search-R1 corpus jsonl")
    ap.add_argument("--out", default="data/flashrag", help="output directory")
    ap.add_argument("--name", default="flashrag", help="data_source")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args()
    if not a.input and not a.corpus:
        ap.error("give --input (QA jsonl) and/or --corpus (corpus jsonl)")
    if a.corpus:
        prepare_corpus(a.corpus, Path(a.out) / f"{a.name}_corpus.parquet", "flashrag")
    if a.input:
        prepare_answers_only(
            "flashrag", a.input, Path(a.out) / f"{a.name}_{a.split}.parquet", a.name, a.split, a.limit
        )
