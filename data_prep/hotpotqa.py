"""HotpotQA → verl QA parquet.

Two inputs are understood:
  * ReAct's simplified dev file ``[{question, answer, type}]`` (bundled; answers only), the default;
  * with ``--corpus``, a HippoRAG/2Wiki-style question file with ``supporting_facts`` plus its corpus
    (``{title: [sentences]}`` or ``[{title, text}]``), giving gold doc ids as well.

    python data_prep/hotpotqa.py [--input assets/hotpotqa/hotpot_dev_v1_simplified.json] [--out data/hotpotqa]
    python data_prep/hotpotqa.py --input hotpotqa.json --corpus hotpotqa_corpus.json --out data/hotpotqa
"""

import argparse
from pathlib import Path

from gta_verl.data.prep import REPO_ASSETS, prepare_answers_only, prepare_supporting_facts

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(REPO_ASSETS / "hotpotqa" / "hotpot_dev_v1_simplified.json"))
    ap.add_argument("--corpus", default=None, help="corpus of a supporting_facts question file")
    ap.add_argument("--out", default="data/hotpotqa", help="output directory")
    ap.add_argument("--name", default="hotpotqa", help="data_source (e.g. 2wikimultihopqa)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--limit", type=int, default=None, help="keep the first N questions (answers-only mode)")
    a = ap.parse_args()
    if a.corpus:
        prepare_supporting_facts(a.corpus, a.input, Path(a.out), a.name, a.split)
    else:
        prepare_answers_only("react_hotpot", a.input, Path(a.out) / f"{a.name}_{a.split}.parquet", a.name,
                             a.split, a.limit)
