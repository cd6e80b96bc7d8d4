"""NQ-open jsonl ({question, answer: [...]}) → verl QA parquet (answers only, no gold passages).

python data_prep/nq_open.py [--input assets/nq_open/NQ-open.dev.jsonl] [--out data/nq_open/nq_dev.parquet]
"""

import argparse
from pathlib import Path

from gta_verl.data.prep import prepare_answers_only

#: The repository's datasets (a checkout's assets/; they do not ship in the wheel).
REPO_ASSETS = Path(__file__).resolve().parents[1] / "assets"

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(REPO_ASSETS / "nq_open" / "NQ-open.dev.jsonl"))
    ap.add_argument("--out", default="data/nq_open/nq_dev.parquet")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--limit", type=int, default=None, help="keep the first N questions")
    a = ap.parse_args()
    prepare_answers_only("nq_open", a.input, a.out, "nq", a.split, a.limit)
