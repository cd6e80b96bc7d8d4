#!/usr/bin/env bash
# GTA-RAG Stage I: GRPO with the trajectory-guided reward R_traj (eqs 15–18) on the
# validated Stage-I parquet. Paper §4.1: 20 steps × 128 prompts × 5 rollouts.
#
# Prerequisites (README.md): `pip install -e ".[gpu]"` on every node; a KB ($STAGE1_KB_DIR, default $KB_DIR) from
# `gta-verl kb build`; $STAGE1_TRAIN from `gta-verl synth`; $VAL_FILES.
#
# Exact command (one node × 8 GPUs, Qwen2.5-3B):
#   MODEL=3b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/stage1_trajectory_guided.sh
# 7B: MODEL=7b …; extra Hydra overrides go after the script name, e.g. `… trainer.logger='[console,wandb]'`.
# Output: $CKPT_DIR/$RUN_NAME/stage1/global_step_20/actor/huggingface (Stage II's starting point).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

require_file "$STAGE1_TRAIN" "Stage-I parquet" "run \`gta-verl synth --kb \$STAGE1_KB_DIR --out \$STAGE1_TRAIN\`"
require_file "$STAGE1_KB_DIR" "Stage-I KB directory" "run \`gta-verl kb build … --out \$STAGE1_KB_DIR\`"

run "${LAUNCH[@]}" "${COMMON_ARGS[@]}" "${STAGE1_ARGS[@]}" "$@"
