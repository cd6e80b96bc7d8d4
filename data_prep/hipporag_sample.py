"""HippoRAG's 1-question sample → corpus parquet + verl QA parquet (tiny smoke data).

python data_prep/hipporag_sample.py [--input assets/hipporag_sample/sample.json]
    [--corpus assets/hipporag_sample/sample_corpus.json] [--out data/hipporag_sample]
"""

import argparse
from pathlib import Path

from gta_verl.data.prep import prepare_hipporag_style

#: The repository's datasets (a checkout's assets/; they do not ship in the wheel).
REPO_ASSETS = Path(__file__).resolve().parents[1] / "assets"

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(REPO_ASSETS / "hipporag_sample" / "sample.json"))
    ap.add_argument("--corpus", default=str(REPO_ASSETS / "hipporag_sample" / "sample_corpus.json"))
    ap.add_argument("--out", default="data/hipporag_sample")
    a = ap.parse_args()
    prepare_hipporag_style(a.corpus, a.input, Path(a.out), "hipporag_sample", "test")
