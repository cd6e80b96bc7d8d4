#!/usr/bin/env bash
# Baseline "w/o graph retrieval": the two-stage schedule with R(q) = dense top-K_d only
# (gta.retriever.mode=dense). The Stage-I data stay the ones validated against the hybrid
# retriever, as in the paper's ablation.
#
# Prerequisites: those of run_two_stage.sh (README.md): gta-verl[gpu], $KB_DIR, $STAGE1_TRAIN, $STAGE2_TRAIN, $VAL_FILES.
#
# Exact command:  MODEL=3b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/baseline_no_graph.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export RETRIEVER_MODE=dense
export RUN_NAME=${RUN_NAME:-baseline_no_graph_${MODEL:-3b}}
exec bash "$HERE/run_two_stage.sh" "$@"
