"""MuSiQue (HippoRAG format) → corpus parquet + verl QA parquet.

    python data_prep/musique.py [--corpus CORPUS_JSON] [--input QUESTIONS_JSON] [--out data/musique]
        [--split train]

Defaults: the subset bundled in the package (gta_verl/assets/musique/).
"""

import argparse
from pathlib import Path

from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_QA
from gta_verl.data.prep import prepare_hipporag_style

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(MUSIQUE_QA), help="question file")
    ap.add_argument("--corpus", default=str(MUSIQUE_CORPUS))
    ap.add_argument("--out", default="data/musique", help="output directory")
    ap.add_argument("--split", default="train")
    ap.add_argument("--strict", action="store_true", help="stop at the first malformed record")
    a = ap.parse_args()
    prepare_hipporag_style(a.corpus, a.input, Path(a.out), "musique", a.split, strict=a.strict)
