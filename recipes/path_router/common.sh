# Shared knobs of the PathRouter recipes. Sourced by every script in this folder; not run directly.
#
# Every knob is an environment variable with a default (${VAR:-default}); anything after the
# script name is passed through to verl as Hydra overrides ("$@"), after ours, so it wins.
# DRY_RUN=1 prints the command (one argument per line, then "----") instead of running it;
# tests/algos/test_path_router_recipes_on_cpu.py composes those printed overrides under Hydra.
#
# GPU layout (per node): GPUS_PER_NODE for the actor/rollout/reference pool PLUS
# TEACHER_GPUS_PER_NODE for the frozen gold-evidence teacher (verl's distillation pool,
# distillation.n_gpus_per_node x distillation.nnodes). Default on 8-GPU nodes: 6 + 2.
# The teacher is the same base checkpoint as the actor/reference (MODEL_PATH).

PYTHON=${PYTHON:-python3}
# 3b | 7b | an HF model path or repo id (scripts set it). MODEL_PATH may also be a policy name (gemma-3-270m):
# the recipe's preflight (gta_verl/preflight.py) puts its prepared directory in the config, actor and teacher.
MODEL=${MODEL:-3b}
# path_router (PathRouter alone) | gta_path_router (GTA trajectory-guided reward + PathRouter).
CONFIG_NAME=${CONFIG_NAME:-path_router}
# full | no_route_scaling | answer_only | path_only | no_kl | uniform_kl | constant_lambda | bag_overlap
ABLATION=${ABLATION:-full}
# Settings preset: defaults (gta-verl's own values and reasons, docs/path_router.md) | paper (the paper's
# appendix Table 5 as transcribed in a public paper digest: gta_verl/config/preset/path_router_paper.yaml,
# appended as +preset=path_router_paper; group size 32, alpha 0.5, theta_P 0.1 with bag P, top-K 128, ...).
PRESET=${PRESET:-defaults}
case "$PRESET" in
  defaults) PRESET_ARGS=() ;;
  # The knobs below are passed to verl explicitly, so under the paper preset they default to Table 5's values.
  paper)    PRESET_ARGS=(+preset=path_router_paper)
            ROLLOUT_N=${ROLLOUT_N:-32}; THETA_P=${THETA_P:-0.1}; ALPHA=${ALPHA:-0.5}
            ROUTE_WEIGHTS=${ROUTE_WEIGHTS:-[1.0,0.5,0.3,1.0]}; TOPK=${TOPK:-128} ;;
  *) echo "error: unknown PRESET=$PRESET (defaults|paper)" >&2
     exit 2 ;;
esac
# Prepared parquet files (README.md, "Data"): rows need ground_truth.support_texts (gold evidence).
DATA_DIR=${DATA_DIR:-$HOME/data/path_router}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/val.parquet}
# KB directory from `gta-verl kb build`.
KB_DIR=${KB_DIR:-$DATA_DIR/kb}
# Checkpoint root; must be shared storage for multi-node runs.
CKPT_DIR=${CKPT_DIR:-$HOME/checkpoints/path_router}
NNODES=${NNODES:-1}
# Actor / rollout / reference GPUs per node.
GPUS_PER_NODE=${GPUS_PER_NODE:-6}
# Teacher pool: GPUs per node and nodes (extra GPUs, never shared with the actor).
TEACHER_GPUS_PER_NODE=${TEACHER_GPUS_PER_NODE:-2}
TEACHER_NNODES=${TEACHER_NNODES:-$NNODES}
# Prompts per step; x ROLLOUT_N rollouts must divide by NNODES x GPUS_PER_NODE (120 x 5 = 600).
TRAIN_BATCH=${TRAIN_BATCH:-120}
ROLLOUT_N=${ROLLOUT_N:-5}
STEPS=${STEPS:-120}
# PathRouter knobs (gta.path_router; defaults and reasons in docs/path_router.md).
THETA_C=${THETA_C:-0.5}
# theta_P: our default 0.4 for overlap=best_passage (measured, docs/path_router.md); the paper's
# 0.1 goes with the literal bag-of-tokens P (ABLATION=bag_overlap).
[ "$ABLATION" = bag_overlap ] && THETA_P=${THETA_P:-0.1}
THETA_P=${THETA_P:-0.4}
ALPHA=${ALPHA:-1.0}
ROUTE_WEIGHTS=${ROUTE_WEIGHTS:-[1.0,0.5,0.5,1.0]}
TOPK=${TOPK:-32}
LAMBDA_MAX=${LAMBDA_MAX:-0.1}
WARMUP_STEPS=${WARMUP_STEPS:-20}
PROJECT=${PROJECT:-gta_verl}
# Hydra list, e.g. '[console,wandb]'.
LOGGER=${LOGGER:-[console]}
# A paper-preset run gets its own name (and checkpoint folder).
RUN_SUFFIX=""
[ "$PRESET" = paper ] && RUN_SUFFIX=_paper
RUN_NAME=${RUN_NAME:-${CONFIG_NAME}_${MODEL//\//_}_${ABLATION}${RUN_SUFFIX}}
DRY_RUN=${DRY_RUN:-0}

case "$MODEL" in
  3b) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}; TP=${TP:-1}; MICRO=${MICRO:-4}; TEACHER_TP=${TEACHER_TP:-1} ;;
  7b) MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}; TP=${TP:-2}; MICRO=${MICRO:-2}; TEACHER_TP=${TEACHER_TP:-1} ;;
  *)  MODEL_PATH=${MODEL_PATH:-$MODEL}; TP=${TP:-1}; MICRO=${MICRO:-4}; TEACHER_TP=${TEACHER_TP:-1} ;;
esac

# The ablations of the paper's Tables 2-4, as gta.path_router overrides.
case "$ABLATION" in
  full)             ABLATION_ARGS=() ;;
  no_route_scaling) ABLATION_ARGS=(gta.path_router.route_scaling=false) ;;
  answer_only)      ABLATION_ARGS=(gta.path_router.routing=answer_only) ;;
  path_only)        ABLATION_ARGS=(gta.path_router.routing=path_only) ;;
  no_kl)            ABLATION_ARGS=(gta.path_router.kl.enabled=false) ;;
  uniform_kl)       ABLATION_ARGS=(gta.path_router.kl.selective=false) ;;
  constant_lambda)  ABLATION_ARGS=(gta.path_router.kl.schedule=constant) ;;
  bag_overlap)      ABLATION_ARGS=(gta.path_router.overlap=bag) ;;
  *) echo "error: unknown ABLATION=$ABLATION (full|no_route_scaling|answer_only|path_only|no_kl|uniform_kl|constant_lambda|bag_overlap)" >&2
     exit 2 ;;
esac

# The YAML ships inside the installed package (gta_verl/config/path_router.yaml).
GTA_CONFIG_DIR=${GTA_CONFIG_DIR:-$("$PYTHON" -c 'from gta_verl.bundled import CONFIG_DIR; print(CONFIG_DIR)')}

LAUNCH=("$PYTHON" -m verl.trainer.main_ppo --config-path "$GTA_CONFIG_DIR" --config-name "$CONFIG_NAME")

COMMON_ARGS=(
  data.train_files="$TRAIN_FILES"
  data.val_files="$VAL_FILES"
  data.train_batch_size="$TRAIN_BATCH"
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.actor.ppo_mini_batch_size="$TRAIN_BATCH"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO"
  actor_rollout_ref.rollout.n="$ROLLOUT_N"
  actor_rollout_ref.rollout.tensor_model_parallel_size="$TP"
  trainer.nnodes="$NNODES"
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.total_training_steps="$STEPS"
  trainer.project_name="$PROJECT"
  trainer.experiment_name="$RUN_NAME"
  trainer.logger="$LOGGER"
  trainer.default_local_dir="$CKPT_DIR/$RUN_NAME"
  distillation.n_gpus_per_node="$TEACHER_GPUS_PER_NODE"
  distillation.nnodes="$TEACHER_NNODES"
  distillation.teacher_models.teacher_model.model_path="$MODEL_PATH"
  distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size="$TEACHER_TP"
  gta.retriever.kb_dir="$KB_DIR"
  gta.path_router.theta_c="$THETA_C"
  gta.path_router.theta_p="$THETA_P"
  gta.path_router.alpha="$ALPHA"
  gta.path_router.route_weights="$ROUTE_WEIGHTS"
  gta.path_router.kl.topk="$TOPK"
  gta.path_router.kl.lambda_max="$LAMBDA_MAX"
  gta.path_router.kl.warmup_steps="$WARMUP_STEPS"
)

# run / require_file / submit_ray_job are shared by every recipe folder.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The launch of run_qwen2_5_{3b,7b}_fsdp.sh: check the inputs, then run verl with "$@" (Hydra overrides) last.
run_one_node() {
  require_file "$TRAIN_FILES" "training parquet" "prepare it as in recipes/path_router/README.md (rows need support_texts)"
  require_file "$KB_DIR" "KB directory" "run \`gta-verl kb build ... --out \$KB_DIR\`"
  run "${LAUNCH[@]}" "${PRESET_ARGS[@]}" "${COMMON_ARGS[@]}" "${ABLATION_ARGS[@]}" "$@"
}
