#!/usr/bin/env bash
# Baseline "w/o trajectory validation": Stage I on the synthesized trajectories before the
# retriever-replay validation ($STAGE1_UNVALIDATED, written by the same `gta-verl synth` run),
# then Stage II as usual.
#
# Prerequisites: those of run_two_stage.sh (README.md), with $STAGE1_UNVALIDATED from
#   `gta-verl synth … --keep-unvalidated $STAGE1_UNVALIDATED` instead of the validated set.
#
# Exact command:  MODEL=3b KB_DIR=/data/kb DATA_DIR=/data/gta_rag bash recipes/gta_rag/baseline_no_validation.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DATA_DIR=${DATA_DIR:-$HOME/data/gta_rag}
export STAGE1_TRAIN=${STAGE1_UNVALIDATED:-$DATA_DIR/stage1_unvalidated.parquet}
export RUN_NAME=${RUN_NAME:-baseline_no_validation_${MODEL:-3b}}
exec bash "$HERE/run_two_stage.sh" "$@"
