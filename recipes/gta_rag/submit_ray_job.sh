#!/usr/bin/env bash
# Multi-node: submit a GTA-RAG script to a running Ray cluster with `ray job submit`.
#
# Prerequisites: a Ray cluster spanning the nodes (`ray start --head` on one, `ray start
# --address=<head>:6379` on the others), gta-verl installed (`pip install -e ".[gpu]"`) on every
# node, and $KB_DIR, $DATA_DIR, $CKPT_DIR on storage every node sees at the same path.
#
# Exact command (2 nodes × 8 GPUs, Qwen2.5-7B, both stages):
#   RAY_ADDRESS=http://head:8265 NNODES=2 MODEL=7b KB_DIR=/shared/kb DATA_DIR=/shared/gta_rag \
#     CKPT_DIR=/shared/ckpt bash recipes/gta_rag/submit_ray_job.sh
# SCRIPT=stage1_trajectory_guided.sh (or any script here) picks another recipe; extra Hydra
# overrides after the script name are forwarded.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}
SCRIPT=${SCRIPT:-run_two_stage.sh}
PYTHON=${PYTHON:-python3}
DRY_RUN=${DRY_RUN:-0}

# Forward the recipe knobs that are set here to the job's environment.
KNOBS=(MODEL MODEL_PATH DATA_DIR KB_DIR STAGE1_KB_DIR STAGE2_KB_DIR STAGE2_MIN_COVERAGE STAGE1_TRAIN
       STAGE1_UNVALIDATED STAGE2_TRAIN VAL_FILES CKPT_DIR
       RETRIEVER_MODE STAGE1_REWARD STAGE1_STEPS STAGE2_STEPS NNODES GPUS_PER_NODE PROJECT LOGGER
       RUN_NAME STAGE2_INIT TP MICRO WANDB_API_KEY HF_HOME HF_HUB_OFFLINE)
submit_ray_job gta_rag "$SCRIPT" "${KNOBS[@]}" -- "$@"
