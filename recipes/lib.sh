# Shell helpers shared by every recipe folder (sourced, not run).

# Run a command, or print it (one argument per line, then "----") when DRY_RUN=1.
run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '%s\n' "$@"
    echo "----"
  else
    "$@"
  fi
}

# Fail early, with the fix, when an input file is missing (skipped in DRY_RUN).
require_file() {
  if [[ "${DRY_RUN:-0}" != 1 && ! -e "$1" ]]; then
    echo "error: $2 not found at $1 — $3" >&2
    exit 2
  fi
}

# submit_ray_job RECIPE_DIR SCRIPT KNOB... -- HYDRA_OVERRIDE...
# `ray job submit` of recipes/RECIPE_DIR/SCRIPT with the repo as working dir and every listed knob
# that is set here forwarded to the job's environment; prints the command instead when DRY_RUN=1.
submit_ray_job() {
  local recipe=$1 script=$2
  shift 2
  local knobs=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do knobs+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  local repo_root runtime_env
  repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  runtime_env=$(REPO_ROOT="$repo_root" "${PYTHON:-python3}" - "${knobs[@]}" <<'PY'
import json, os, sys
env = {k: os.environ[k] for k in sys.argv[1:] if k in os.environ}
print(json.dumps({"working_dir": os.environ.get("REPO_ROOT", "."),
                  "excludes": [".git", ".venv", "assets", "runs", "checkpoints"],
                  "env_vars": env}))
PY
)
  local cmd=(ray job submit --address "${RAY_ADDRESS:-http://127.0.0.1:8265}" --runtime-env-json "$runtime_env"
             -- bash "recipes/$recipe/$script" "$@")
  run "${cmd[@]}"
}
