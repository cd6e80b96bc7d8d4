#!/usr/bin/env bash
# GTA-RAG Stage II: GRPO with the exact-match reward R_EM = 1[EM] (eq 19) on natural QA,
# starting from Stage I's checkpoint. Paper §4.1: 40 steps on 10,000 HotpotQA questions.
#
# Prerequisites (README.md): Stage I finished (its HF checkpoint at $STAGE2_INIT, default
# $CKPT_DIR/$RUN_NAME/stage1/global_step_$STAGE1_STEPS/actor/huggingface); $STAGE2_TRAIN; $STAGE2_KB_DIR
# (default $KB_DIR) holding ≥ $STAGE2_MIN_COVERAGE (0.95) of $STAGE2_TRAIN's gold paragraphs, checked
# first with `gta-verl kb check-coverage` (README.md, "Stage II's KB").
#
# Exact command (one node × 8 GPUs, Qwen2.5-3B, same knobs as Stage I):
#   MODEL=3b STAGE2_KB_DIR=/data/kb_stage2 DATA_DIR=/data/gta_rag bash recipes/gta_rag/stage2_em.sh
# Search-R1-like EM-only run from the base model instead:
#   STAGE2_INIT=Qwen/Qwen2.5-3B-Instruct RUN_NAME=em_only_3b bash recipes/gta_rag/stage2_em.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

require_file "$STAGE2_TRAIN" "Stage-II parquet" "prepare HotpotQA with data_prep/ (see README.md)"
require_file "$STAGE2_KB_DIR" "Stage-II KB directory" "run \`gta-verl kb build … --out \$STAGE2_KB_DIR\`"
if [[ "$STAGE2_INIT" == /* ]]; then
  require_file "$STAGE2_INIT" "Stage-I checkpoint" "run stage1_trajectory_guided.sh first or set STAGE2_INIT"
fi
check_stage2_coverage

run "${LAUNCH[@]}" "${COMMON_ARGS[@]}" "${STAGE2_ARGS[@]}" "$@"
