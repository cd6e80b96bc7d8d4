"""data_prep/hotpotqa.py --sample: a seeded random sample (Stage II's 10,000 questions), not the first N."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "data_prep" / "hotpotqa.py"
RECIPE = REPO / "recipes" / "gta_rag" / "data" / "prepare_stage2_hotpotqa.sh"
BUNDLED = REPO / "assets" / "hotpotqa" / "hotpot_dev_v1_simplified.json"  # 7,405 questions


def _questions(out: Path, *args: str, name: str = "hotpotqa_dev.parquet") -> list[str]:
    subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args], check=True, cwd=REPO, capture_output=True
    )
    return [r["question"] for r in pd.read_parquet(out / name)["extra_info"]]


def test_seeded_sample_is_reproducible_random_and_not_the_head(tmp_path):
    a = _questions(tmp_path / "a", "--sample", "50", "--seed", "3")
    b = _questions(tmp_path / "b", "--sample", "50", "--seed", "3")
    c = _questions(tmp_path / "c", "--sample", "50", "--seed", "4")
    head = _questions(tmp_path / "h", "--limit", "50")
    assert len(a) == 50 and a == b  # same seed, same questions
    assert a != c and a != head  # another seed / the first 50 differ
    assert len(set(a) & set(head)) < 10  # 50 of 7,405 at random: ~0.3 expected in the first 50


def test_stage2_recipe_step_writes_the_stage2_file(tmp_path):
    """The recipe step reads HotpotQA records with context (more in test_hotpot_context_on_cpu.py)."""
    train = REPO / "assets" / "hotpotqa_train" / "hotpotqa_train.json"  # 100 questions with context
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHON": sys.executable,
        "HOTPOTQA_TRAIN": str(train),
        "DATA_DIR": str(tmp_path),
        "N": "20",
        "SEED": "0",
    }
    subprocess.run(["bash", str(RECIPE)], check=True, env=env, capture_output=True, cwd=REPO)
    df = pd.read_parquet(tmp_path / "hotpotqa_10k_train.parquet")  # STAGE2_TRAIN of recipes/gta_rag
    assert len(df) == 20 and set(df["data_source"]) == {"hotpotqa"}
    assert (tmp_path / "hotpotqa_10k_train_corpus.parquet").is_file()  # Stage II's corpus, for kb build
