#!/usr/bin/env bash
# Baseline "w/o trajectory-guided reward" (answer-only, Search-R1-like): the two-stage schedule
# with R_EM = 1[EM] from the start, i.e. Stage I on the same Stage-I data but with the
# exact_match manager. Everything else (data, steps, retriever) is run_two_stage.sh's.
#
# Prerequisites: those of run_two_stage.sh (README.md): gta-verl[gpu], $KB_DIR, $STAGE1_TRAIN, $STAGE2_TRAIN, $VAL_FILES.
#
# Exact command:  MODEL=3b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/baseline_em_only.sh
# (For EM on natural QA only, from the base model: see stage2_em.sh's header.)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export STAGE1_REWARD=exact_match
export RUN_NAME=${RUN_NAME:-baseline_em_only_${MODEL:-3b}}
exec bash "$HERE/run_two_stage.sh" "$@"
