#!/usr/bin/env bash
# Multi-node PathRouter: submit a recipe script to a running Ray cluster with `ray job submit`.
#
# Prerequisites: a Ray cluster spanning the nodes (`ray start --head` on one, `ray start
# --address=<head>:6379` on the others), gta-verl installed (`pip install -e ".[gpu]"`) on every
# node, and $KB_DIR, $DATA_DIR, $CKPT_DIR on storage every node sees at the same path.
#
# GPU layout: per node GPUS_PER_NODE (actor pool, trainer.nnodes = NNODES) + TEACHER_GPUS_PER_NODE
# (teacher pool, distillation.nnodes = TEACHER_NNODES, default NNODES). Default 2 x (6 + 2):
# 12 actor GPUs, 4 teacher GPUs (4 single-GPU teacher replicas).
#
# Exact command (2 nodes x 8 GPUs, Qwen2.5-7B):
#   RAY_ADDRESS=http://head:8265 NNODES=2 DATA_DIR=/shared/path_router KB_DIR=/shared/kb \
#     CKPT_DIR=/shared/ckpt bash recipes/path_router/submit_ray_job.sh
# SCRIPT=run_qwen2_5_3b_fsdp.sh picks the 3B recipe; ABLATION=... and CONFIG_NAME=gta_path_router
# work as in the single-node scripts; extra Hydra overrides after the script name are forwarded.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}
SCRIPT=${SCRIPT:-run_qwen2_5_7b_fsdp.sh}
NNODES=${NNODES:-2}
PYTHON=${PYTHON:-python3}
DRY_RUN=${DRY_RUN:-0}
export NNODES

# Forward the recipe knobs that are set here to the job's environment.
KNOBS=(MODEL_PATH CONFIG_NAME ABLATION DATA_DIR TRAIN_FILES VAL_FILES KB_DIR CKPT_DIR NNODES GPUS_PER_NODE
       TEACHER_GPUS_PER_NODE TEACHER_NNODES TRAIN_BATCH ROLLOUT_N STEPS THETA_C THETA_P ALPHA ROUTE_WEIGHTS
       TOPK LAMBDA_MAX WARMUP_STEPS PROJECT LOGGER RUN_NAME TP MICRO TEACHER_TP WANDB_API_KEY HF_HOME
       HF_HUB_OFFLINE)
submit_ray_job path_router "$SCRIPT" "${KNOBS[@]}" -- "$@"
