#!/usr/bin/env bash
# GTA-RAG Stage-II data: a seeded random sample of 10,000 HotpotQA training questions and the
# retrieval corpus of those questions' paragraphs (paper §4.1: 10,000 HotpotQA instances, a graph
# of ~18,300 documents; which 10,000 is not said, so the sample and its seed are our choice).
# ~18,300 is the size of the gold paragraphs alone (≈ 1.83 per question); gold + distractors would
# be ≈ 99,400 (9.94 context paragraphs per question). So this step writes the gold-only corpus
# (PARAGRAPHS=gold, the paper's size); PARAGRAPHS=all writes gold + distractors instead.
#
# Input: the official HotpotQA training file (hotpot_train_v1.1.json, 90,447 questions with their
# 10-paragraph `context`; download it yourself, nothing is fetched here), or any file of that format.
# Output, in $DATA_DIR:
#   hotpotqa_10k_train.parquet         STAGE2_TRAIN of common.sh; gold doc ids = supporting facts
#   hotpotqa_10k_train_corpus.parquet  the sampled questions' gold paragraphs (PARAGRAPHS=all: every
#                                      context paragraph), deduplicated
#
#   HOTPOTQA_TRAIN=/data/hotpot_train_v1.1.json DATA_DIR=/data/gta_rag \
#     bash recipes/gta_rag/data/prepare_stage2_hotpotqa.sh
# then build Stage II's KB and point the recipes at it (see the hint printed at the end):
#   gta-verl kb build --corpus $DATA_DIR/hotpotqa_10k_train_corpus.parquet --openie … --out $DATA_DIR/kb_stage2
#   STAGE2_KB_DIR=$DATA_DIR/kb_stage2 bash recipes/gta_rag/run_two_stage.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PYTHON=${PYTHON:-python3}
DATA_DIR=${DATA_DIR:-$HOME/data/gta_rag}
HOTPOTQA_TRAIN=${HOTPOTQA_TRAIN:?set HOTPOTQA_TRAIN to hotpot_train_v1.1.json}
N=${N:-10000}
SEED=${SEED:-0}
PARAGRAPHS=${PARAGRAPHS:-gold}
"$PYTHON" "$REPO/data_prep/hotpotqa.py" --context --input "$HOTPOTQA_TRAIN" --out "$DATA_DIR" \
  --name hotpotqa --split 10k_train --sample "$N" --seed "$SEED" --paragraphs "$PARAGRAPHS"
echo "[gta_rag] next: gta-verl kb build --corpus $DATA_DIR/hotpotqa_10k_train_corpus.parquet --openie … \
--out $DATA_DIR/kb_stage2, then run the recipes with STAGE2_KB_DIR=$DATA_DIR/kb_stage2" >&2
