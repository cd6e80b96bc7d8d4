"""MuSiQue (HippoRAG format) → corpus parquet + verl QA parquet.

    python data_prep/musique.py [--corpus assets/musique/musique_train_corpus.json]
        [--input assets/musique/musique_train.json] [--out data/musique] [--split train]
"""

import argparse
from pathlib import Path

from gta_verl.data.prep import REPO_ASSETS, prepare_hipporag_style

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(REPO_ASSETS / "musique" / "musique_train.json"), help="question file")
    ap.add_argument("--corpus", default=str(REPO_ASSETS / "musique" / "musique_train_corpus.json"))
    ap.add_argument("--out", default="data/musique", help="output directory")
    ap.add_argument("--split", default="train")
    ap.add_argument("--strict", action="store_true", help="stop at the first malformed record")
    a = ap.parse_args()
    prepare_hipporag_style(a.corpus, a.input, Path(a.out), "musique", a.split, strict=a.strict)
