#!/usr/bin/env bash
# GTA-RAG end to end: Stage I (trajectory-guided reward, 20 steps) then Stage II (EM reward,
# 40 steps) starting from Stage I's final checkpoint. The baselines are this script with one
# knob changed (baseline_*.sh).
#
# Prerequisites (README.md): `pip install -e ".[gpu]"`; $KB_DIR; $STAGE1_TRAIN; $STAGE2_TRAIN; $VAL_FILES.
#
# Exact command (one node × 8 GPUs):
#   MODEL=3b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/run_two_stage.sh
#   MODEL=7b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/run_two_stage.sh
# Multi-node: submit_ray_job.sh. Extra Hydra overrides ("$@") apply to both stages.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

require_file "$STAGE1_TRAIN" "Stage-I parquet" "run \`gta-verl synth --kb \$KB_DIR --out \$STAGE1_TRAIN\`"
require_file "$STAGE2_TRAIN" "Stage-II parquet" "prepare HotpotQA with data_prep/ (see README.md)"
require_file "$KB_DIR" "KB directory" "run \`gta-verl kb build … --out \$KB_DIR\`"

echo "[gta_rag] Stage I → $CKPT_DIR/$RUN_NAME/stage1" >&2
run "${LAUNCH[@]}" "${COMMON_ARGS[@]}" "${STAGE1_ARGS[@]}" "$@"
require_file "$STAGE1_HF" "Stage-I HF checkpoint" "Stage I did not save global_step_$STAGE1_STEPS; check its log"
echo "[gta_rag] Stage II from $STAGE2_INIT → $CKPT_DIR/$RUN_NAME/stage2" >&2
run "${LAUNCH[@]}" "${COMMON_ARGS[@]}" "${STAGE2_ARGS[@]}" "$@"
