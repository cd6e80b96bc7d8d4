# Shared knobs of the GTA-RAG recipes. Sourced by every script in this folder; not run directly.
#
# Every knob is an environment variable with a default (${VAR:-default}); anything after the
# script name is passed through to verl as Hydra overrides ("$@"), after ours, so it wins.
# DRY_RUN=1 prints each command (one argument per line, then "----") instead of running it;
# tests/recipes/ composes those printed overrides under Hydra.

PYTHON=${PYTHON:-python3}
# 3b | 7b | an HF model path or repo id. MODEL_PATH may also be a policy name (gemma-3-270m): the recipe's
# preflight (gta_verl/preflight.py) puts its prepared directory in the config.
MODEL=${MODEL:-3b}
# Where the prepared parquet files live (see README.md, "Prerequisites").
DATA_DIR=${DATA_DIR:-$HOME/data/gta_rag}
# KB directory from `gta-verl kb build`: both stages retrieve over it unless told otherwise.
KB_DIR=${KB_DIR:-$DATA_DIR/kb}
# Stage I retrieves over the KB its trajectories were synthesized and validated against.
STAGE1_KB_DIR=${STAGE1_KB_DIR:-$KB_DIR}
# Stage II retrieves over a KB of its questions' own paragraphs (paper §4.1; built from the corpus
# that data/prepare_stage2_hotpotqa.sh writes).
STAGE2_KB_DIR=${STAGE2_KB_DIR:-$KB_DIR}
# Stage II stops before training unless $STAGE2_KB_DIR holds at least this mean fraction of
# $STAGE2_TRAIN's gold paragraphs (`gta-verl kb check-coverage`); 0 lets any coverage pass.
STAGE2_MIN_COVERAGE=${STAGE2_MIN_COVERAGE:-0.95}
# Stage-I data: trajectories validated against the deployed retriever (`gta-verl synth`).
STAGE1_TRAIN=${STAGE1_TRAIN:-$DATA_DIR/stage1_validated.parquet}
# The same synthesis run before validation (the "w/o trajectory validation" ablation).
STAGE1_UNVALIDATED=${STAGE1_UNVALIDATED:-$DATA_DIR/stage1_unvalidated.parquet}
# Stage-II data: 10,000 HotpotQA training questions (verl parquet).
STAGE2_TRAIN=${STAGE2_TRAIN:-$DATA_DIR/hotpotqa_10k_train.parquet}
# Validation questions (acc = EM is verl's val-core metric).
VAL_FILES=${VAL_FILES:-$DATA_DIR/hotpotqa_val.parquet}
# Checkpoint root; must be shared storage for multi-node runs.
CKPT_DIR=${CKPT_DIR:-$HOME/checkpoints/gta_rag}
# hybrid (paper) | dense (the "w/o graph retrieval" ablation) | graph.
RETRIEVER_MODE=${RETRIEVER_MODE:-hybrid}
# Stage-I reward manager: trajectory_guided (paper) | exact_match (answer-only ablation).
STAGE1_REWARD=${STAGE1_REWARD:-trajectory_guided}
# Paper §4.1: Stage I 20 steps, Stage II 40 steps.
STAGE1_STEPS=${STAGE1_STEPS:-20}
STAGE2_STEPS=${STAGE2_STEPS:-40}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
PROJECT=${PROJECT:-gta_verl}
# Hydra list, e.g. '[console,wandb]'.
LOGGER=${LOGGER:-[console]}
RUN_NAME=${RUN_NAME:-gta_rag_${MODEL//\//_}_${RETRIEVER_MODE}}
DRY_RUN=${DRY_RUN:-0}

case "$MODEL" in
  3b) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}; TP=${TP:-1}; MICRO=${MICRO:-4} ;;
  7b) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}; TP=${TP:-2}; MICRO=${MICRO:-2} ;;
  *)  MODEL_PATH=${MODEL_PATH:-$MODEL}; TP=${TP:-1}; MICRO=${MICRO:-4} ;;
esac

# Stage I's final checkpoint in HF format (saved because Stage I adds hf_model to save_contents).
STAGE1_HF=${STAGE1_HF:-$CKPT_DIR/$RUN_NAME/stage1/global_step_${STAGE1_STEPS}/actor/huggingface}
# Stage II starts from Stage I's checkpoint; set STAGE2_INIT=$MODEL_PATH to start from the base model.
STAGE2_INIT=${STAGE2_INIT:-$STAGE1_HF}

# The YAML ships inside the installed package (gta_verl/config/gta_grpo.yaml).
GTA_CONFIG_DIR=${GTA_CONFIG_DIR:-$("$PYTHON" -c 'from gta_verl.bundled import CONFIG_DIR; print(CONFIG_DIR)')}

LAUNCH=("$PYTHON" -m verl.trainer.main_ppo --config-path "$GTA_CONFIG_DIR" --config-name gta_grpo)

COMMON_ARGS=(
  trainer.nnodes="$NNODES"
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.project_name="$PROJECT"
  trainer.logger="$LOGGER"
  actor_rollout_ref.rollout.tensor_model_parallel_size="$TP"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO"
  data.val_files="$VAL_FILES"
  gta.retriever.mode="$RETRIEVER_MODE"
)

STAGE1_ARGS=(
  data.train_files="$STAGE1_TRAIN"
  gta.retriever.kb_dir="$STAGE1_KB_DIR"
  actor_rollout_ref.model.path="$MODEL_PATH"
  reward.reward_manager.name="$STAGE1_REWARD"
  trainer.total_training_steps="$STAGE1_STEPS"
  trainer.save_freq="$STAGE1_STEPS"
  trainer.test_freq="$STAGE1_STEPS"
  trainer.experiment_name="${RUN_NAME}_stage1"
  trainer.default_local_dir="$CKPT_DIR/$RUN_NAME/stage1"
  # Also write HF weights, so Stage II loads the checkpoint with actor_rollout_ref.model.path.
  "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
)

STAGE2_ARGS=(
  data.train_files="$STAGE2_TRAIN"
  gta.retriever.kb_dir="$STAGE2_KB_DIR"
  actor_rollout_ref.model.path="$STAGE2_INIT"
  reward.reward_manager.name=exact_match
  trainer.total_training_steps="$STAGE2_STEPS"
  trainer.save_freq="$STAGE2_STEPS"
  trainer.test_freq="$STAGE2_STEPS"
  trainer.experiment_name="${RUN_NAME}_stage2"
  trainer.default_local_dir="$CKPT_DIR/$RUN_NAME/stage2"
  "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
)

# run / require_file / submit_ray_job are shared by every recipe folder.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# Gate before Stage II: the EM reward would otherwise pay for parametric answers over a KB that lacks
# the evidence. Printed, not run, under DRY_RUN=1 (like every command of `run`).
check_stage2_coverage() {
  local rc=0 allow=()
  # A gate at 0 lets anything pass, questions without gold ids included.
  [[ $STAGE2_MIN_COVERAGE =~ ^0*(\.0*)?$ ]] && allow=(--allow-without-gold)
  run "$PYTHON" -m gta_verl kb check-coverage --kb "$STAGE2_KB_DIR" --qa "$STAGE2_TRAIN" \
    --min "$STAGE2_MIN_COVERAGE" "${allow[@]}" || rc=$?
  if [[ $rc == 2 ]]; then
    # check-coverage exits 2 both below --min and on an unreadable KB/parquet; its own line above says which.
    echo "error: Stage II stopped by its coverage gate (the gta-verl error above): STAGE2_KB_DIR=$STAGE2_KB_DIR" \
      "must hold at least STAGE2_MIN_COVERAGE=$STAGE2_MIN_COVERAGE of the gold paragraphs of" \
      "STAGE2_TRAIN=$STAGE2_TRAIN. Build it from those questions' own paragraphs" \
      "(recipes/gta_rag/data/prepare_stage2_hotpotqa.sh, then \`gta-verl kb build --corpus" \
      "\$DATA_DIR/hotpotqa_10k_train_corpus.parquet … --out \$STAGE2_KB_DIR\`); a STAGE2_TRAIN without gold" \
      "doc ids counts as 0 coverage, one mostly without gold ids fails (STAGE2_MIN_COVERAGE=0 lets any" \
      "coverage pass)." >&2
    exit 2
  elif [[ $rc != 0 ]]; then
    echo "error: the Stage II coverage check failed (exit $rc); see its message above" >&2
    exit "$rc"
  fi
}
