#!/usr/bin/env bash
# One-GPU smoke of the Stage-I recipe without vLLM: the real `python3 -m verl.trainer.main_ppo` with
# gta_grpo.yaml, 2 GRPO steps of a tiny random Qwen2 (real Qwen2.5 tokenizer, no download) on the
# bundled MuSiQue KB and a template-synthesized Stage-I parquet. Actor and reference train with FSDP2
# on cuda; rollouts come from our Hugging Face `generate()` replica `hf` on the same GPU (verl's V1
# trainer syncs weights through the naive engine, which the replica supports); the Ray retriever
# actor encodes queries on cuda; rewards come from the trajectory-guided reward manager. It checks
# that both steps ran with the rollout on the GPU and says so in one line; it says nothing about
# learning. docs/gpu.md: what to record from a run.
#
# Prerequisites: one CUDA GPU, gta-verl installed with `pip install -e .` (no vLLM needed), run from
# anywhere (it reads the MuSiQue subset bundled in the package). No network access is needed.
#
# Exact command:
#   bash recipes/gta_rag/gpu_smoke.sh
# Knobs: WORK (scratch dir), N_TRAJ (synthesized questions), STEPS (2), DEVICE (cuda: the KB and
# query encoder), EMBEDDER (encoder name or directory for the KB build), STAGE_TIMEOUT (seconds per
# stage, 480), DRY_RUN=1 (print the main_ppo command, one argument per line, then "----"), extra
# Hydra overrides after the name (they win).
set -euo pipefail
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/gta_verl_gpu_smoke}
N_TRAJ=${N_TRAJ:-32}
STEPS=${STEPS:-2}
DRY_RUN=${DRY_RUN:-0}
DEVICE=${DEVICE:-cuda}
STAGE_TIMEOUT=${STAGE_TIMEOUT:-480}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
[[ "$DRY_RUN" == 1 ]] || mkdir -p "$WORK"

# Each stage under its own timeout, its wall time printed ("gpu_smoke: stage NAME N s (exit RC)"): the
# numbers docs/gpu.md asks a first run to record.
stage() {
  local name=$1 start=$SECONDS rc=0
  shift
  timeout "$STAGE_TIMEOUT" "$@" || rc=$?
  echo "gpu_smoke: stage $name $((SECONDS - start)) s (exit $rc)"
  return $rc
}
if [[ "$DRY_RUN" != 1 ]]; then
  "$PYTHON" - <<'PY'
import platform, torch, transformers
try:
    import verl; v = verl.__version__
except Exception as exc:  # the line is for the record, not a check
    v = f"missing ({exc!r})"
dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda device"
print(f"gpu_smoke: versions python {platform.python_version()} torch {torch.__version__} "
      f"cuda {torch.version.cuda} transformers {transformers.__version__} verl {v} device {dev}")
PY
fi

# 1. Tiny policy: random Qwen2ForCausalLM (hidden 64, 2 layers) + the real tokenizer, saved as an HF dir.
if [[ "$DRY_RUN" != 1 && ! -f "$WORK/tiny_qwen2/config.json" ]]; then
  stage model "$PYTHON" - "$WORK/tiny_qwen2" <<'PY'
import sys
from gta_verl.agent.tokenizer import load_qwen_tokenizer, tiny_qwen2
tiny_qwen2().save_pretrained(sys.argv[1])
load_qwen_tokenizer().save_pretrained(sys.argv[1])
PY
fi

# 2. KB from the bundled MuSiQue subset with its precomputed OpenIE triples, encoded on $DEVICE.
if [[ "$DRY_RUN" != 1 && ! -f "$WORK/kb/manifest.json" ]]; then
  MUSIQUE=$("$PYTHON" -c 'from gta_verl.bundled import MUSIQUE_DIR; print(MUSIQUE_DIR)')
  stage kb "$PYTHON" -m gta_verl kb build --corpus "$MUSIQUE/musique_train_corpus.json" --format hipporag \
    --openie "precomputed:$MUSIQUE/openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json" \
    --out "$WORK/kb" --device "$DEVICE" ${EMBEDDER:+--embedder "$EMBEDDER"} --no-progress
fi

# 3. Stage-I parquet: template generator, validated against the same retriever.
if [[ "$DRY_RUN" != 1 && ! -f "$WORK/stage1.parquet" ]]; then
  stage synth "$PYTHON" -m gta_verl synth --kb "$WORK/kb" --out "$WORK/stage1.parquet" --generator template \
    --n "$N_TRAJ" --seed 0 --no-progress
fi

GTA_CONFIG_DIR=${GTA_CONFIG_DIR:-$("$PYTHON" -c 'from gta_verl.bundled import CONFIG_DIR; print(CONFIG_DIR)')}
# The hf rollout and its needs (docs/gpu.md): log-probs from the rollout, FSDP2, sdpa attention,
# no torch.compile, one TransferQueue storage unit; the retriever's query encoder on $DEVICE.
SMOKE_ARGS=(
  actor_rollout_ref.model.path="$WORK/tiny_qwen2"
  actor_rollout_ref.rollout.name=hf
  actor_rollout_ref.rollout.calculate_log_probs=true
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.actor.strategy=fsdp2
  actor_rollout_ref.actor.use_torch_compile=false
  +actor_rollout_ref.model.override_config.attn_implementation=sdpa
  data.train_files="$WORK/stage1.parquet"
  data.val_files="$WORK/stage1.parquet"
  data.train_batch_size=4
  data.max_prompt_length=1024
  data.max_response_length=512
  data.dataloader_num_workers=0
  actor_rollout_ref.rollout.n=2
  actor_rollout_ref.actor.ppo_mini_batch_size=4
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.agent.num_workers=1
  actor_rollout_ref.model.use_remove_padding=false
  actor_rollout_ref.model.enable_gradient_checkpointing=false
  reward.num_workers=1
  reward.reward_manager.name=trajectory_guided
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  trainer.device=cuda
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  trainer.total_training_steps="$STEPS"
  trainer.save_freq=-1
  trainer.test_freq=-1
  trainer.val_before_train=false
  trainer.logger=[console]
  trainer.experiment_name=gpu_smoke
  trainer.default_local_dir="$WORK/ckpt"
  gta.retriever.kb_dir="$WORK/kb"
  gta.retriever.num_cpus=2
  +gta.retriever.encoder_device="$DEVICE"
)
CMD=("$PYTHON" -m verl.trainer.main_ppo --config-path "$GTA_CONFIG_DIR" --config-name gta_grpo "${SMOKE_ARGS[@]}" "$@")
if [[ "$DRY_RUN" == 1 ]]; then
  printf '%s\n' "${CMD[@]}"
  echo "----"
  exit 0
fi

# 4. Train; the console logger prints one "step:N" line per step. The hf replica warns when its
# server found no GPU ("hf rollout server ... on cpu"): then the rollout did not run where it should.
set +e
stage main_ppo "${CMD[@]}" 2>&1 | tee "$WORK/main_ppo.log"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc != 0 ]] || ! grep -q "step:$STEPS" "$WORK/main_ppo.log"; then
  echo "gpu_smoke: FAILED — exit $rc, no 'step:$STEPS' line or an error in $WORK/main_ppo.log" >&2
  exit 1
fi
if grep -q "hf rollout server .* on cpu" "$WORK/main_ppo.log"; then
  echo "gpu_smoke: FAILED — $STEPS steps ran but the hf rollout generated on the CPU (log: $WORK/main_ppo.log)" >&2
  exit 1
fi
echo "gpu_smoke: PASSED — $STEPS GRPO steps of Stage I on one GPU, hf rollout on cuda (log: $WORK/main_ppo.log)"
