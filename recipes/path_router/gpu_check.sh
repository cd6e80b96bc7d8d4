#!/usr/bin/env bash
# GPU smoke check of the PathRouter plumbing: 2 training steps of a tiny model, rollouts from our
# Hugging Face replica `hf` on the GPU (no vLLM needed; ROLLOUT=vllm uses vLLM instead).
#
# GPUS=2 (default): the actor on 1 GPU and its frozen gold-evidence teacher (served by the same
# rollout backend) on 1 more GPU: verl's teacher pool is separate from the training pool. Asserts,
# from verl's file logger (one JSON line per step):
#   * path_router/route_share/{C+P+,C+P-,C-P+,C-P-} are logged and sum to 1, with mean_route_weight;
#   * the selective KL is non-zero only when evidence-poor samples exist:
#     actor/distillation/loss > 0 iff path_router/kl_select_frac > 0 (constant lambda, so lambda > 0).
# GPUS=1: what one GPU can cover — routing (PathRouter reward manager: C, P, route ids), route
# weights on the advantages and the route metrics, with the teacher KL off (verl's distillation
# pool needs a GPU of its own: gta.path_router.kl.enabled=false, the no_kl ablation). Asserts the
# route shares as above and that no distillation loss was logged. The selective KL loss itself is
# covered on CPU (tests/algos) and by recipes/cpu/run.sh path_router.
#
# Exact command (offline is fine: the default model is a random tiny Qwen2 built locally):
#   bash recipes/path_router/gpu_check.sh            # 2 GPUs
#   GPUS=1 bash recipes/path_router/gpu_check.sh     # 1 GPU
# MODEL_PATH=/path/to/Qwen2.5-0.5B-Instruct uses a real small model instead; WORK=<dir> keeps outputs.
# The last line says whether it passed ("PathRouter GPU check passed (...)").
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
WORK=${WORK:-$PWD/runs/path_router_gpu_check}
DRY_RUN=${DRY_RUN:-0}
GPUS=${GPUS:-2}
ROLLOUT=${ROLLOUT:-hf}
case "$GPUS" in
  1|2) ;;
  *) echo "GPUS=$GPUS: expected 1 (no teacher) or 2 (actor + teacher)" >&2; exit 2 ;;
esac
[[ "$DRY_RUN" == 1 ]] || mkdir -p "$WORK"
export HF_HUB_OFFLINE=1

# 1. data + KB from the bundled MuSiQue subset (rows carry support_texts = gold paragraphs).
if [[ "$DRY_RUN" != 1 && ! -e "$WORK/kb_musique" ]]; then
  "$PYTHON" -m gta_verl quickstart --out "$WORK" --stages prep,kb
fi
if [[ "$DRY_RUN" == 1 ]]; then
  QA_PARQUET=${TRAIN_FILES:-$WORK/data/qa.parquet}
else
  QA_PARQUET=${TRAIN_FILES:-$("$PYTHON" -c "from gta_verl.data.prep import prepare_musique; print(prepare_musique('$WORK/data').paths['qa'])")}
fi

# 2. a random tiny Qwen2 + the real Qwen2.5 tokenizer, unless MODEL_PATH is given.
if [[ -z "${MODEL_PATH:-}" ]]; then
  MODEL_PATH=$WORK/tiny_qwen2
  if [[ "$DRY_RUN" != 1 && ! -e "$MODEL_PATH/config.json" ]]; then
    "$PYTHON" - "$MODEL_PATH" <<'PY'
import sys
from gta_verl.agent.tokenizer import load_qwen_tokenizer, tiny_qwen2
tiny_qwen2().save_pretrained(sys.argv[1])
load_qwen_tokenizer().save_pretrained(sys.argv[1])
PY
  fi
fi

export VERL_FILE_LOGGER_PATH=$WORK/metrics.jsonl
[[ "$DRY_RUN" == 1 ]] || rm -f "$VERL_FILE_LOGGER_PATH"
export MODEL=$MODEL_PATH TRAIN_FILES=$QA_PARQUET VAL_FILES=$QA_PARQUET KB_DIR=$WORK/kb_musique
export NNODES=1 GPUS_PER_NODE=1 TEACHER_GPUS_PER_NODE=1 TEACHER_NNODES=1 TRAIN_BATCH=4 ROLLOUT_N=2 STEPS=2
export MICRO=2 TP=1 TEACHER_TP=1 LOGGER='[console,file]' RUN_NAME=path_router_gpu_check CKPT_DIR=$WORK/ckpt
export DRY_RUN
# shellcheck source=common.sh
source "$HERE/common.sh"

CHECK_ARGS=(
  gta.path_router.kl.schedule=constant
  data.max_prompt_length=1024 data.max_response_length=512
  actor_rollout_ref.rollout.name="$ROLLOUT"
  distillation.teacher_models.teacher_model.inference.name="$ROLLOUT"
  actor_rollout_ref.rollout.gpu_memory_utilization=0.3
  actor_rollout_ref.rollout.max_model_len=2048
  distillation.teacher_models.teacher_model.inference.max_model_len=4096
  distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.3
  trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1
)
if [[ "$ROLLOUT" == hf ]]; then
  # What the hf replica needs (docs/gpu.md): rollout log-probs, FSDP2, sdpa, one TQ storage unit.
  CHECK_ARGS+=(
    actor_rollout_ref.rollout.calculate_log_probs=true
    actor_rollout_ref.actor.strategy=fsdp2
    actor_rollout_ref.actor.use_torch_compile=false
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa
    transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  )
fi
[[ "$GPUS" == 1 ]] && CHECK_ARGS+=(gta.path_router.kl.enabled=false)

run "${LAUNCH[@]}" "${COMMON_ARGS[@]}" "${CHECK_ARGS[@]}" "$@"

[[ "$DRY_RUN" == 1 ]] && exit 0
"$PYTHON" - "$VERL_FILE_LOGGER_PATH" "$GPUS" <<'PY'
import json, sys
with_teacher = sys.argv[2] != "1"
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r.get("data", r) for r in rows]
steps = [s for s in steps if any(k.startswith("path_router/") for k in s)]
assert len(steps) >= 2, f"expected 2 logged training steps with path_router metrics, got {len(steps)}"
names = ("C+P+", "C+P-", "C-P+", "C-P-")
for i, s in enumerate(steps):
    shares = [s[f"path_router/route_share/{n}"] for n in names]
    assert abs(sum(shares) - 1.0) < 1e-6, (i, shares)
    assert "path_router/mean_route_weight" in s, i
    sel, loss = s.get("path_router/kl_select_frac", 0.0), s.get("actor/distillation/loss", 0.0)
    if with_teacher:
        assert s["path_router/kl_lambda"] > 0, i
        assert (loss > 0) == (sel > 0), f"step {i}: KL loss {loss} but selected share {sel}"
    else:
        assert loss == 0, f"step {i}: a distillation loss {loss} with the teacher off"
    print(f"step {i}: shares={dict(zip(names, shares))} select={sel:.3f} kl_loss={loss:.5f}")
print(f"PathRouter GPU check passed ({'actor + teacher, 2 GPUs' if with_teacher else 'routing only, 1 GPU'})")
PY
