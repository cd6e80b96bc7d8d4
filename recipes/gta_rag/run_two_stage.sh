#!/usr/bin/env bash
# GTA-RAG end to end: Stage I (trajectory-guided reward, 20 steps) then Stage II (EM reward,
# 40 steps) starting from Stage I's final checkpoint. The baselines are this script with one
# knob changed (baseline_*.sh).
#
# Prerequisites (README.md): `pip install -e ".[gpu]"`; $STAGE1_KB_DIR and $STAGE2_KB_DIR (both default
# $KB_DIR); $STAGE1_TRAIN; $STAGE2_TRAIN; $VAL_FILES. $STAGE2_KB_DIR must hold ≥ $STAGE2_MIN_COVERAGE
# (0.95) of $STAGE2_TRAIN's gold paragraphs (`gta-verl kb check-coverage`, run first).
#
# Exact command (one node × 8 GPUs):
#   MODEL=3b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/run_two_stage.sh
#   MODEL=7b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/run_two_stage.sh
# Stage II over its own questions' paragraphs (paper §4.1; data/prepare_stage2_hotpotqa.sh):
#   MODEL=3b STAGE1_KB_DIR=/data/kb STAGE2_KB_DIR=/data/kb_stage2 DATA_DIR=/data/gta_rag bash recipes/gta_rag/run_two_stage.sh
# Multi-node: submit_ray_job.sh. Extra Hydra overrides ("$@") apply to both stages.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

require_file "$STAGE1_TRAIN" "Stage-I parquet" "run \`gta-verl synth --kb \$STAGE1_KB_DIR --out \$STAGE1_TRAIN\`"
require_file "$STAGE2_TRAIN" "Stage-II parquet" "prepare HotpotQA with data_prep/ (see README.md)"
require_file "$STAGE1_KB_DIR" "Stage-I KB directory" "run \`gta-verl kb build … --out \$STAGE1_KB_DIR\`"
require_file "$STAGE2_KB_DIR" "Stage-II KB directory" "run \`gta-verl kb build … --out \$STAGE2_KB_DIR\`"
# Stage II's gate runs before Stage I: a KB that lacks Stage II's paragraphs fails in seconds, not
# after Stage I's 20 steps (neither KB changes between the stages).
check_stage2_coverage

echo "[gta_rag] Stage I → $CKPT_DIR/$RUN_NAME/stage1" >&2
run "${LAUNCH[@]}" "${COMMON_ARGS[@]}" "${STAGE1_ARGS[@]}" "$@"
require_file "$STAGE1_HF" "Stage-I HF checkpoint" "Stage I did not save global_step_$STAGE1_STEPS; check its log"
echo "[gta_rag] Stage II from $STAGE2_INIT → $CKPT_DIR/$RUN_NAME/stage2" >&2
run "${LAUNCH[@]}" "${COMMON_ARGS[@]}" "${STAGE2_ARGS[@]}" "$@"
