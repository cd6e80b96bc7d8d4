"""Run a CPU recipe (``recipes/cpu/run.sh``) from Python and read verl's step metrics back.

Used by the quickstart's ``verl`` stage: the same shell entry point a user runs, so the quickstart
proves exactly that command. verl's file logger (``METRICS_JSONL``) writes one JSON object per
step ``{"step": s, "data": {metric: value}}``; :func:`read_step_metrics` parses it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gta_verl.bundled import CPU_RUN_SH, require

#: verl step metrics shown in the quickstart table (name, column title).
TABLE_METRICS = (
    ("critic/score/mean", "score"),
    ("critic/advantages/min", "adv min"),
    ("critic/advantages/max", "adv max"),
    ("response_length/mean", "response tokens"),
    ("actor/pg_loss", "pg loss"),
    ("actor/grad_norm", "grad norm"),
    ("training/rollout_probs_diff_max", "rollout vs actor log-prob diff"),
    ("timing_s/gen", "gen s"),
    ("timing_s/step", "step s"),
)


@dataclass(frozen=True)
class RecipeRun:
    """Result of one ``run.sh`` invocation."""

    recipe: str
    returncode: int
    seconds: float
    steps: dict[int, dict[str, float]]
    log: Path

    def markdown(self) -> str:
        """A table of verl's step metrics (plus the ``gta/*`` ones) and the exact command."""
        gta_keys = sorted({k for m in self.steps.values() for k in m if k.startswith("gta/")})
        cols = list(TABLE_METRICS) + [(k, k) for k in gta_keys]
        head = "| step | " + " | ".join(t for _, t in cols) + " |"
        rows = [head, "|---|" + "---:|" * len(cols)]
        for step in sorted(self.steps):
            vals = [_fmt(self.steps[step].get(k)) for k, _ in cols]
            rows.append(f"| {step} | " + " | ".join(vals) + " |")
        cmd = f"bash recipes/cpu/run.sh {self.recipe}"
        return (
            f"`{cmd}` → exit {self.returncode} in {self.seconds:.0f} s (log: `{self.log}`)\n\n"
            + "\n".join(rows)
        )


def _fmt(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def read_step_metrics(path: Path) -> dict[int, dict[str, float]]:
    """``{step: metrics}`` from verl's file-logger JSONL (missing file → empty)."""
    steps: dict[int, dict[str, float]] = {}
    if not path.is_file():
        return steps
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            steps[int(row["step"])] = dict(row["data"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a verl file-logger row: {exc}") from exc
    return steps


def run_cpu_recipe(
    recipe: str,
    out_dir: Path,
    env: dict[str, str] | None = None,
    overrides: tuple[str, ...] = (),
    timeout_s: float = 1800,
) -> RecipeRun:
    """``bash recipes/cpu/run.sh <recipe> <overrides>`` with its output in ``out_dir``.

    Args:
        recipe: gta_stage1 | gta_stage2 | path_router | gta_path_router | turn_grpo.
        out_dir: Receives ``run.log``, ``metrics.jsonl`` and verl's outputs.
        env: Extra environment (``MODEL_PATH``, ``KB_DIR``, ``STAGE1_TRAIN``, ``QA_FILES`` …).
        overrides: Extra Hydra overrides.
        timeout_s: Kill the run after this long.
    """
    run_sh = require(CPU_RUN_SH, "the CPU recipe script")
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = out_dir / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    full_env = {
        **os.environ,
        "PYTHON": sys.executable,
        "METRICS_JSONL": str(metrics),
        "OUT_DIR": str(out_dir / "verl"),
        **(env or {}),
    }
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env.get('PATH', '')}"
    log = out_dir / "run.log"
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run(
            ["bash", str(run_sh), recipe, *overrides],
            env=full_env,
            cwd=out_dir,
            stdout=fh,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    return RecipeRun(recipe, proc.returncode, time.perf_counter() - t0, read_step_metrics(metrics), log)
