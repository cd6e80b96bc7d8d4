#!/usr/bin/env bash
# GPU smoke of the Stage-I recipe: the real `python3 -m verl.trainer.main_ppo` with gta_grpo.yaml,
# a tiny random Qwen2 (real Qwen2.5 tokenizer, no download), the bundled MuSiQue KB, a template-
# synthesized Stage-I parquet, 2 steps on 1 GPU, the retriever actor on CPU. Checks that both
# steps ran; it says nothing about learning.
#
# Prerequisites: one CUDA GPU, gta-verl installed with `pip install -e ".[gpu]"` (vLLM), run from
# anywhere (it reads the MuSiQue subset bundled in the package). No network access is needed.
#
# Exact command:
#   bash recipes/gta_rag/gpu_smoke.sh
# Knobs: WORK (scratch dir), N_TRAJ (synthesized questions), extra Hydra overrides after the name.
set -euo pipefail
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/gta_verl_gpu_smoke}
N_TRAJ=${N_TRAJ:-32}
STEPS=${STEPS:-2}
DRY_RUN=${DRY_RUN:-0}
export HF_HUB_OFFLINE=1
mkdir -p "$WORK"

# 1. Tiny policy: random Qwen2ForCausalLM (hidden 64, 2 layers) + the real tokenizer, saved as an HF dir.
if [[ "$DRY_RUN" != 1 && ! -f "$WORK/tiny_qwen2/config.json" ]]; then
  "$PYTHON" - "$WORK/tiny_qwen2" <<'PY'
import sys
from gta_verl.agent.tokenizer import load_qwen_tokenizer, tiny_qwen2
tiny_qwen2().save_pretrained(sys.argv[1])
load_qwen_tokenizer().save_pretrained(sys.argv[1])
PY
fi

# 2. KB from the bundled MuSiQue subset with its precomputed OpenIE triples.
MUSIQUE=$("$PYTHON" -c 'from gta_verl.bundled import MUSIQUE_DIR; print(MUSIQUE_DIR)')
if [[ "$DRY_RUN" != 1 && ! -f "$WORK/kb/manifest.json" ]]; then
  gta-verl kb build --corpus "$MUSIQUE/musique_train_corpus.json" --format hipporag \
    --openie "precomputed:$MUSIQUE/openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json" \
    --out "$WORK/kb" --no-progress
fi

# 3. Stage-I parquet: template generator, validated against the same retriever.
if [[ "$DRY_RUN" != 1 && ! -f "$WORK/stage1.parquet" ]]; then
  gta-verl synth --kb "$WORK/kb" --out "$WORK/stage1.parquet" --generator template --n "$N_TRAJ" --seed 0 --no-progress
fi

GTA_CONFIG_DIR=${GTA_CONFIG_DIR:-$("$PYTHON" -c 'from gta_verl.bundled import CONFIG_DIR; print(CONFIG_DIR)')}
SMOKE_ARGS=(
  actor_rollout_ref.model.path="$WORK/tiny_qwen2"
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
  actor_rollout_ref.rollout.gpu_memory_utilization=0.3
  actor_rollout_ref.rollout.max_model_len=2048
  actor_rollout_ref.rollout.agent.num_workers=1
  actor_rollout_ref.model.use_remove_padding=false
  actor_rollout_ref.model.enable_gradient_checkpointing=false
  reward.num_workers=1
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  trainer.total_training_steps="$STEPS"
  trainer.save_freq=-1
  trainer.test_freq=-1
  trainer.val_before_train=false
  trainer.experiment_name=gpu_smoke
  trainer.default_local_dir="$WORK/ckpt"
  gta.retriever.kb_dir="$WORK/kb"
  gta.retriever.num_cpus=2
)
CMD=("$PYTHON" -m verl.trainer.main_ppo --config-path "$GTA_CONFIG_DIR" --config-name gta_grpo "${SMOKE_ARGS[@]}" "$@")
if [[ "$DRY_RUN" == 1 ]]; then
  printf '%s\n' "${CMD[@]}"
  echo "----"
  exit 0
fi

# 4. Train; the console logger prints one "step:N" line per step.
"${CMD[@]}" 2>&1 | tee "$WORK/main_ppo.log"
if ! grep -q "step:$STEPS" "$WORK/main_ppo.log"; then
  echo "gpu_smoke: FAILED — no 'step:$STEPS' line in $WORK/main_ppo.log" >&2
  exit 1
fi
echo "gpu_smoke: OK — $STEPS steps of the Stage-I recipe ran (log: $WORK/main_ppo.log)"
