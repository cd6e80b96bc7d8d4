"""The README's "What the main job prints" numbers are what the main job writes to ``summary.json``.

The main job's ``retrieval`` and ``synth`` stages run here exactly as ``gta-verl quickstart`` runs
them (same stage functions, the option defaults), on the session's cached MuSiQue KB instead of a
rebuild; the KB table is checked against :func:`gta_verl.kb.stats.kb_stats` of that KB, the function
whose result the ``kb`` stage writes. ``tests/test_wheel_on_cpu.py`` checks the same numbers from a
full ``prep,kb,retrieval,synth`` run of the installed wheel.
"""

from __future__ import annotations

import argparse
import json

from gta_verl import quickstart
from tests.support import readme_numbers


def _defaults(out: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gta-verl")
    quickstart.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["quickstart", "--out", out])


def test_readme_numbers_match_the_main_jobs_summary(tmp_path, musique_kb_dir, musique_kb):
    from gta_verl.kb.stats import kb_stats

    args = _defaults(str(tmp_path))
    ctx = quickstart.QuickstartContext(
        out=tmp_path, n_synth=args.n_synth, eval_questions=args.eval_questions, seed=args.seed
    )
    ctx.paths["kb"] = musique_kb_dir
    quickstart.run_quickstart(ctx, ("prep", "retrieval", "synth"))
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    summary[readme_numbers.KB_TITLE] = {"data": kb_stats(musique_kb)}
    assert readme_numbers.mismatches(summary) == []
