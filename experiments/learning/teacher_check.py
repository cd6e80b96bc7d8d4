"""PathRouter's teacher check alone: a policy greedy on its training prompts, as the student reads them and
with the gold passages S_gt before the question (what ``experiments.learning.pretrained`` runs before (c)).

Usage:
    python -m experiments.learning.teacher_check --policy runs/lp/fp32_sft_r64_e4_lr3e-05/model \
        --data experiments/learning/results/signal/pool64/pool.parquet --questions 48 \
        --out runs/lp/eval/teacher_fp32_iii

Writes ``<out>/{student,teacher}/`` (each evaluation's records) and ``<out>/teacher.json`` (both summaries
with their wall seconds), and prints :func:`experiments.learning.pretrained.teacher_table`. The KB is the
bundled MuSiQue one the learning runs retrieve from; budgets are the runs' (prompt 768, response 512 tokens).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from experiments.learning.pretrained import TEACHER_VIEWS, evaluate, teacher_table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="the GRPO start (an HF model directory)")
    p.add_argument("--data", required=True, help="its training prompts (verl parquet with gold passages)")
    p.add_argument("--questions", type=int, default=48, help="first N rows")
    p.add_argument("--kb", default=None, help="KB directory (default: the bundled MuSiQue KB)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from gta_verl.cpu.prepare import default_root, ensure_kb

    kb = Path(args.kb) if args.kb else ensure_kb(default_root() / "kb_musique")
    out = Path(args.out)
    res: dict[str, dict] = {}
    for view in TEACHER_VIEWS:
        t0 = time.perf_counter()
        res[view] = evaluate(
            args.policy, Path(args.data), kb, out / view, args.questions, f"{view}_view", view == "teacher"
        )
        res[view]["seconds"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    (out / "teacher.json").write_text(json.dumps(res, indent=2))
    print(teacher_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
