#!/usr/bin/env bash
# Evaluation through verl's own path on CPU: stock `python -m verl.trainer.main_ppo` with
# trainer.val_only=True writes verl's validation dump (trainer.validation_data_dir/0.jsonl), which
# `gta-verl eval --from-verl-dump` scores; COMPARE=1 (default) then runs the same policy on the same
# questions through our own runner (`gta-verl eval --policy`) and compares the two metric tables.
#
# Prerequisites: the README set-up (`bash scripts/setup.sh`); inputs are built on first use like
# recipes/cpu/run.sh (`gta-verl cpu prepare`, cached under $GTA_VERL_CACHE/cpu_recipes).
#
# Exact command (from the repo root):
#   PYTHON=.venv/bin/python bash recipes/cpu/val_only.sh [gta_stage2|gta_stage1|...] [HYDRA_OVERRIDE...]
# Knobs: VAL_N (questions, default 8), OUT_DIR, COMPARE (1), MODEL_PATH / KB_DIR / QA_FILES, DRY_RUN=1.
# Greedy decoding on both sides (verl's val_kwargs: temperature 0, n=1; runner: --temperature 0), the
# same prompt/response budgets (256 / 128 tokens) and action budget, so the two paths must agree.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
RECIPE=${1:-gta_stage2}
[[ $# -gt 0 ]] && shift
VAL_N=${VAL_N:-8}
COMPARE=${COMPARE:-1}
DRY_RUN=${DRY_RUN:-0}
OUT_DIR=${OUT_DIR:-${TMPDIR:-/tmp}/gta_verl_cpu/val_only_$RECIPE}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [[ -z "${MODEL_PATH:-}" || -z "${KB_DIR:-}" || -z "${QA_FILES:-}" ]]; then
  if [[ "$DRY_RUN" == 1 ]]; then
    MODEL_PATH=${MODEL_PATH:-MODEL_PATH} KB_DIR=${KB_DIR:-KB_DIR} QA_FILES=${QA_FILES:-QA_FILES}
  else
    PREPARED=$("$PYTHON" -m gta_verl cpu prepare ${KB_DIR:+--kb "$KB_DIR"})
    while IFS='=' read -r key value; do
      [[ -z "${!key:-}" ]] && printf -v "$key" '%s' "$(eval "echo $value")"
    done <<< "$PREPARED"
  fi
fi

# The first VAL_N questions, as one parquet both paths read (verl's val_max_samples may shuffle).
VAL_FILE=$OUT_DIR/val_questions.parquet
if [[ "$DRY_RUN" != 1 ]]; then
  mkdir -p "$OUT_DIR"
  "$PYTHON" - "$QA_FILES" "$VAL_FILE" "$VAL_N" <<'PY'
import sys
import pandas as pd
pd.read_parquet(sys.argv[1]).head(int(sys.argv[3])).to_parquet(sys.argv[2])
PY
fi
VAL_DIR=$OUT_DIR/verl_val_dump

# 1. verl's validation (no training step): dump at step 0.
MODEL_PATH=$MODEL_PATH KB_DIR=$KB_DIR QA_FILES=$VAL_FILE STAGE1_TRAIN=${STAGE1_TRAIN:-$VAL_FILE} OUT_DIR=$OUT_DIR \
  bash "$HERE/run.sh" "$RECIPE" \
  data.val_files="$VAL_FILE" trainer.val_before_train=true trainer.val_only=true \
  trainer.validation_data_dir="$VAL_DIR" actor_rollout_ref.rollout.val_kwargs.n=1 \
  actor_rollout_ref.rollout.val_kwargs.temperature=0 actor_rollout_ref.rollout.val_kwargs.do_sample=false "$@"

# shellcheck source=../lib.sh
source "$HERE/../lib.sh"
# 2. score verl's dump with our metrics.
run "$PYTHON" -m gta_verl eval --from-verl-dump "$VAL_DIR" --data "$VAL_FILE" --kb "$KB_DIR" \
  --name verl_val_only --out "$OUT_DIR/eval_verl_dump" --no-progress
[[ "$COMPARE" == 1 ]] || exit 0
# 3. the same policy and questions through our runner (same loop, budgets and greedy decoding).
run "$PYTHON" -m gta_verl eval --policy "$MODEL_PATH" --data "$VAL_FILE" --kb "$KB_DIR" --backend hf \
  --temperature 0 --prompt-length 256 --response-length 128 --max-actions 5 \
  --name runner --out "$OUT_DIR/eval_runner" --no-progress
# 4. the two tables must agree.
run "$PYTHON" -m gta_verl.eval.verl_dumps compare "$OUT_DIR/eval_verl_dump" "$OUT_DIR/eval_runner"
