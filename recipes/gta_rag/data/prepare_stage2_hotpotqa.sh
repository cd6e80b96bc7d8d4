#!/usr/bin/env bash
# GTA-RAG Stage-II data: a seeded random sample of 10,000 HotpotQA training questions (paper §4.1
# uses 10,000 HotpotQA instances without naming them; the sample and its seed are our choice).
#
# Input: the official HotpotQA training file (hotpot_train_v1.1.json, 90,447 questions; download it
# yourself, nothing is fetched here) or any [{question, answer}] JSON list.
# Output: $DATA_DIR/hotpotqa_10k_train.parquet (STAGE2_TRAIN of common.sh), rows of make_verl_row.
#
#   HOTPOTQA_TRAIN=/data/hotpot_train_v1.1.json DATA_DIR=/data/gta_rag \
#     bash recipes/gta_rag/data/prepare_stage2_hotpotqa.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PYTHON=${PYTHON:-python3}
DATA_DIR=${DATA_DIR:-$HOME/data/gta_rag}
HOTPOTQA_TRAIN=${HOTPOTQA_TRAIN:?set HOTPOTQA_TRAIN to hotpot_train_v1.1.json}
N=${N:-10000}
SEED=${SEED:-0}
exec "$PYTHON" "$REPO/data_prep/hotpotqa.py" --input "$HOTPOTQA_TRAIN" --out "$DATA_DIR" \
  --name hotpotqa --split 10k_train --sample "$N" --seed "$SEED"
