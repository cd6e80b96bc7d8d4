#!/usr/bin/env bash
# PathRouter, Qwen2.5-3B-Instruct, one node: route-weighted GRPO + path-aware reward +
# selective gold-evidence teacher top-K KL (gta_verl/config/${CONFIG_NAME:-path_router}.yaml).
#
# GPUs: GPUS_PER_NODE (default 6) for the actor/rollout/reference + TEACHER_GPUS_PER_NODE
# (default 2) for the frozen teacher = 8 per node. ABLATION=no_kl frees the teacher GPUs
# (set GPUS_PER_NODE=8 TEACHER_GPUS_PER_NODE=0 then; TRAIN_BATCH x ROLLOUT_N must divide by 8).
#
# Exact command:
#   MODEL_PATH=Qwen/Qwen2.5-3B-Instruct DATA_DIR=/data/path_router KB_DIR=/data/kb \
#     bash recipes/path_router/run_qwen2_5_3b_fsdp.sh
# Ablations: ABLATION=no_route_scaling|answer_only|path_only|no_kl|uniform_kl|constant_lambda.
# GTA + PathRouter: CONFIG_NAME=gta_path_router (Stage-I parquet as TRAIN_FILES).
# Extra Hydra overrides go after the script name, e.g. `... trainer.logger='[console,wandb]'`.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL=3b
# shellcheck source=common.sh
source "$HERE/common.sh"

run_one_node "$@"
