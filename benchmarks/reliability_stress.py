"""Reliability stress table: kills during a KB write, two builds at once, malformed batches.

Every case is repeated ``--trials`` times (fresh directories, fresh processes) and reported as passed / N
with the wall time per trial (median, max), next to the reference behaviour it is checked against. Prints a
markdown table.

* ``kill``: a child writes KB v2 over v1 and is SIGKILLed (a) right between the two renames of the fallback
  swap (exchange forced off; the kill injected after the first ``os.replace``, as
  ``tests/kb/test_store_durability_on_cpu.py`` does), (b) at a random time during the fallback write,
  (c) at a random time during the default exchange write. Then a fresh process loads the KB (must be v1 or
  v2), lists the ``.NAME.tmp-*`` / ``.NAME.old-*`` left, writes v3 (the next write) and lists them again.
* ``builds``: two processes start the same moment and run ``kb build``'s write path (``recover_interrupted``,
  ``check_out_dir``, then ``write_lock`` held over the build and ``save_kb``) into one ``--out``; the toy
  build holds the lock ``--build-s`` seconds (standing in for OpenIE and encoding). Into a missing ``--out``
  and over an existing KB; plus ``--cli-trials`` runs of two real ``gta-verl kb build`` processes (spaCy
  OpenIE, bundled encoder, 2 passages; ~10 s each).
* ``batch``: 64 rows scored by each gta reward manager's real ``run_single``, all awaited in one
  ``asyncio.gather`` without ``return_exceptions`` as verl's agent loop does; k rows replaced by malformed
  variants (cycling through the kinds below, at random positions) and compared with the clean batch.

    nice -n 10 .venv/bin/python -m benchmarks.reliability_stress [--trials 20] [--cases kill,builds,batch]
        [--build-s 0.5] [--cli-trials 3] [--malformed 1,8,32] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- child scripts
_PRELUDE = """
import json, os, signal, sys, time
from dataclasses import replace
from pathlib import Path
from gta_verl.kb import atomic
from gta_verl.kb.store import save_kb
from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb
def toy(marker):
    kb = make_toy_kb(HashEmbedder())
    return replace(kb, manifest={**kb.manifest, "marker": marker})
out = Path(sys.argv[1])
"""

# (a) killed right between the two renames of the fallback (the test's injection).
_KILL_BETWEEN = (
    _PRELUDE
    + """
kb = toy("v2")
real = os.replace
def replace_then_die(a, b):
    real(a, b)
    os.kill(os.getpid(), signal.SIGKILL)
atomic.os.replace = replace_then_die
save_kb(kb, out, exchange=lambda a, b: False)
"""
)

# (b, c) killed by the parent at a random time during the write; two warm-up saves elsewhere first (imports,
# parquet writers) so the kill lands in the write itself; it reports how long the warm one took.
_KILL_RANDOM = (
    _PRELUDE
    + """
kb = toy("v2")
exchange = (lambda a, b: False) if sys.argv[2] == "fallback" else None
save_kb(kb, Path(sys.argv[3]), exchange=exchange)
t = time.perf_counter()
save_kb(kb, Path(sys.argv[3]), exchange=exchange)
print("go", time.perf_counter() - t, flush=True)
save_kb(kb, out, exchange=exchange)
print("done", flush=True)
"""
)

# A fresh process after the kill: load, leftovers, next write, leftovers.
_PROBE = (
    _PRELUDE
    + """
from gta_verl.kb.store import load_kb, read_manifest
def left():
    return sorted(p.name for p in out.parent.glob(f".{out.name}.*-*"))
rec = {}
try:
    load_kb(out)
    rec["loaded"] = read_manifest(out).get("marker")
except Exception as exc:
    rec["loaded"] = "error"
    rec["error"] = f"{type(exc).__name__}: {exc}"
rec["left_after_load"] = left()
try:
    save_kb(toy("v3"), out)
    load_kb(out)
    rec["next_write"] = read_manifest(out).get("marker")
except Exception as exc:
    rec["next_write"] = f"{type(exc).__name__}: {exc}"
rec["left_after_write"] = left()
print(json.dumps(rec), flush=True)
"""
)

# One of two simultaneous builds: kb build's write path (gta_verl/kb/cli.py:cmd_build) on the toy KB.
_BUILDER = (
    _PRELUDE
    + """
from gta_verl.kb.atomic import KBWriteError, write_lock
from gta_verl.kb.store import check_out_dir, recover_interrupted
name, build_s = sys.argv[2], float(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
try:
    recover_interrupted(out)
    check_out_dir(out, False)
    with write_lock(out):
        kb = toy(name)
        time.sleep(build_s)
        save_kb(kb, out)
    print(json.dumps({"ok": True}), flush=True)
except KBWriteError as exc:
    print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
"""
)


def _py(script: str, *args: str, **kw: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.glob(f".{out.name}.*-*"))


def _toy(marker: str):
    from dataclasses import replace

    from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb

    kb = make_toy_kb(HashEmbedder())
    return replace(kb, manifest={**kb.manifest, "marker": marker})


def _marker(out: Path) -> str:
    from gta_verl.kb.store import load_kb, read_manifest

    try:
        load_kb(out)
        return str(read_manifest(out).get("marker"))
    except Exception as exc:  # recorded, fails the trial
        return f"error: {type(exc).__name__}: {exc}"


def _exchange_available(root: Path) -> bool:
    from gta_verl.kb import atomic

    a, b = root / "xa", root / "xb"
    a.mkdir()
    b.mkdir()
    try:
        return atomic._exchange(a, b)
    except OSError:
        return False


# ----------------------------------------------------------------------------- case 1: kills during a write
def kill_trial(root: Path, mode: str, rng: random.Random) -> dict[str, Any]:
    """mode: between (fallback, kill between renames) | fallback | exchange (random kill time)."""
    from gta_verl.kb.store import save_kb

    out = root / "kb"
    save_kb(_toy("v1"), out)
    rec: dict[str, Any] = {}
    if mode == "between":
        proc = _py(_KILL_BETWEEN, str(out))
        _, err = proc.communicate(timeout=120)
        rec["killed_in_write"] = proc.returncode == -9
        if proc.returncode != -9:
            rec["child_error"] = err[-500:]
    else:
        proc = _py(_KILL_RANDOM, str(out), mode, str(root / "warm"))
        line = proc.stdout.readline().split()
        if not line or line[0] != "go":
            proc.kill()
            return {"ok": False, "child_error": proc.communicate()[1][-500:]}
        time.sleep(rng.uniform(0.0, 1.25 * float(line[1])))
        proc.kill()
        rest, _ = proc.communicate(timeout=60)
        rec["killed_in_write"] = "done" not in rest
    rec["out_missing_after_kill"] = not out.exists()
    probe = _py(_PROBE, str(out))
    text, err = probe.communicate(timeout=120)
    try:
        rec.update(json.loads(text.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        rec["loaded"], rec["error"] = "error", err[-500:]
    rec["ok"] = (
        rec.get("loaded") in ("v1", "v2")
        and rec.get("next_write") == "v3"
        and rec.get("left_after_write") == []
        and rec.get("left_after_load") == []
        and (mode != "between" or rec.get("killed_in_write", False))
    )
    return rec


def kill_outcome(recs: list[dict[str, Any]], mode: str) -> str:
    loaded = Counter(r.get("loaded") for r in recs)
    parts = [", ".join(f"loaded {k}: {v}" for k, v in sorted(loaded.items(), key=str))]
    if mode != "between":
        parts.append(
            f"killed during the write: {sum(r.get('killed_in_write', False) for r in recs)} "
            f"(the rest after it finished)"
        )
    parts.append(
        f"`--out` missing right after the kill: {sum(r.get('out_missing_after_kill', False) for r in recs)}"
    )
    parts.append(
        "leftovers after the load: "
        f"{sum(bool(r.get('left_after_load')) for r in recs)}, after the next write: "
        f"{sum(bool(r.get('left_after_write')) for r in recs)}"
    )
    errors = sorted({r["error"][:160] for r in recs if r.get("error")})
    if errors:
        parts.append("errors: " + "; ".join(errors))
    return "; ".join(parts)


# ----------------------------------------------------------------------------- case 2: two builds at once
def builds_trial(root: Path, existing: bool, build_s: float) -> dict[str, Any]:
    from gta_verl.kb.store import save_kb

    out = root / "kb"
    if existing:
        save_kb(_toy("v1"), out)
    procs = [_py(_BUILDER, str(out), name, str(build_s), stdin=subprocess.PIPE) for name in ("A", "B")]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.communicate()[1][-500:]
    for p in procs:  # release both at once
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        text, err = p.communicate(timeout=120)
        try:
            results.append(json.loads(text.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            results.append({"ok": False, "error": f"crashed: {err.strip().splitlines()[-1:]}"})
    winners = [n for n, r in zip("AB", results, strict=True) if r["ok"]]
    errors = [r["error"] for r in results if not r["ok"]]
    marker = _marker(out)
    return {
        "winners": winners,
        "errors": errors,
        "marker": marker,
        "left": _leftovers(out),
        "ok": (
            len(winners) == 1
            and len(errors) == 1
            and "\n" not in errors[0]
            and "is writing this KB" in errors[0]
            and marker == winners[0]
            and not _leftovers(out)
        ),
    }


def cli_builds_trial(root: Path, existing: bool) -> dict[str, Any]:
    corpus = json.loads((REPO / "assets/hipporag_sample/sample_corpus.json").read_text())
    (root / "a.json").write_text(json.dumps(corpus[:2]))
    out = root / "kb"
    if existing:
        from gta_verl.kb.store import save_kb

        save_kb(_toy("v1"), out)
    from gta_verl.testing.kb_argv import spacy_build_argv

    cmd = [str(Path(sys.executable).with_name("gta-verl")), *spacy_build_argv(root / "a.json", out)]
    procs = [
        subprocess.Popen(cmd, cwd=root, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    rcs = [p.returncode for p in procs]
    errors = [e.strip() for (_, e), rc in zip(outs, rcs, strict=True) if rc != 0]
    marker = _marker(out)
    loads = not marker.startswith("error")
    return {
        "rcs": rcs,
        "errors": errors,
        "marker": marker,
        "left": _leftovers(out),
        "ok": (
            sorted(rcs) == [0, 2]
            and len(errors) == 1
            and len(errors[0].splitlines()) == 1
            and "is writing this KB" in errors[0]
            and loads
            and not _leftovers(out)
        ),
    }


def builds_outcome(recs: list[dict[str, Any]]) -> str:
    if "rcs" in recs[0]:
        won = Counter(tuple(r["rcs"]) for r in recs)
        parts = ["exit codes " + ", ".join(f"{list(k)}: {v}" for k, v in sorted(won.items()))]
    else:
        won = Counter(len(r["winners"]) for r in recs)
        parts = [", ".join(f"{k} succeeded: {v}" for k, v in sorted(won.items()))]
    loads = sum(not r["marker"].startswith("error") for r in recs)
    parts.append(f"`--out` loads after: {loads}, leftovers: {sum(bool(r['left']) for r in recs)}")
    texts = Counter(_generic(e) for r in recs for e in r["errors"])
    parts.append("loser's error: " + "; ".join(f"{t} (×{n})" for t, n in texts.most_common()))
    return "; ".join(parts)


def _generic(error: str) -> str:
    import re

    error = re.sub(r"/\S*/kb\b", "OUT", error)
    return "`` " + re.sub(r"pid \d+", "pid N", error) + " ``"  # the text holds backticks


# ----------------------------------------------------------------------------- case 3: malformed batch
# name -> (gt override or None, tool_extra_fields patch, extra_info patch, drop reward_model / ground_truth,
#          expected: "error" (scores 0, reward_error 1) or "clean" (scores as its clean row), or the managers
#          that read the field (error there, clean elsewhere: a NaN nobody reads changes nothing))
GTA = ("trajectory_guided", "exact_match")
KINDS: dict[str, tuple[Any, dict | None, dict | None, str | None, str | tuple[str, ...]]] = {
    "NaN scalar gold": (float("nan"), None, None, None, "error"),
    "NaN gold in the dict": ({"target": [float("nan")], "target_doc_ids": ["d1"]}, None, None, None, "error"),
    "dict gold answer": ({"target": {"nested": "dict"}}, None, None, None, "error"),
    "string id list": ({"target": ["Paris"], "target_doc_ids": "d1"}, None, None, None, "error"),
    "string support texts": ({"target": ["Paris"], "support_texts": "some text"}, None, None, None, "error"),
    "no ground_truth": (None, None, None, "ground_truth", "error"),
    "no reward_model": (None, None, None, "reward_model", "error"),
    "NaN `gta/invalid_actions`": (None, {"gta/invalid_actions": float("nan")}, None, None, GTA),
    "NaN `gta/num_searches`": (None, {"gta/num_searches": float("nan")}, None, None, ("path_router",)),
    "NaN in the row's `extra_info`": (None, None, {"index": float("nan")}, None, "clean"),
}


def _malformed_row(tok, prompt_ids, case, kind: str):
    import numpy as np

    from gta_verl.testing.reward_data import make_reward_data

    gt, fields, extra, drop, _ = KINDS[kind]
    data = make_reward_data(tok, prompt_ids, case)
    ntb = data.non_tensor_batch
    if gt is not None:
        ntb["reward_model"] = np.array([{"style": "rule", "ground_truth": gt}], dtype=object)
    if drop == "ground_truth":
        ntb["reward_model"] = np.array([{"style": "rule"}], dtype=object)
    elif drop == "reward_model":
        ntb.pop("reward_model")
    if fields:
        ntb["tool_extra_fields"][0].update(fields)
    if extra:
        ntb["extra_info"] = np.array([{**ntb["extra_info"][0], **extra}], dtype=object)
    return data


def _expected(kind: str, manager: str) -> str:
    exp = KINDS[kind][4]
    return exp if isinstance(exp, str) else ("error" if manager in exp else "clean")


def _describe(kind: str) -> str:
    exp = KINDS[kind][4]
    if isinstance(exp, str):
        return f"{kind} → {'error' if exp == 'error' else 'scored as the clean row (no reward reads it)'}"
    return f"{kind} → error in {', '.join(exp)} (which read it), scored as the clean row in the others"


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def eq(x: Any, y: Any) -> bool:
        return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))

    ai, bi = a["reward_extra_info"], b["reward_extra_info"]
    return (
        eq(a["reward_score"], b["reward_score"])
        and ai.keys() == bi.keys()
        and all(eq(v, bi[k]) for k, v in ai.items())
    )


class BatchCase:
    """Clean 64-row batch scored once per manager; each trial swaps k random rows for malformed ones."""

    def __init__(self, rows: int) -> None:
        import gta_verl.rewards.managers  # registers trajectory_guided, exact_match
        import gta_verl.rewards.path_router_manager  # registers path_router
        import gta_verl.verl_compat  # noqa: F401 - verl first, as the tests import it
        from gta_verl.agent.tokenizer import load_qwen_tokenizer
        from gta_verl.protocol import build_messages
        from gta_verl.testing.reward_cases import CASES
        from gta_verl.testing.reward_data import make_reward_data, make_reward_manager

        logging.getLogger("gta_verl.rewards.managers").setLevel(logging.ERROR)  # one warning per bad row
        self.tok = load_qwen_tokenizer()
        text = self.tok.apply_chat_template(
            build_messages("Which city?"), add_generation_prompt=True, tokenize=False
        )
        self.prompt_ids = self.tok.encode(text, add_special_tokens=False)
        self.cases = [CASES[i % len(CASES)] for i in range(rows)]
        self.clean_rows = [make_reward_data(self.tok, self.prompt_ids, c) for c in self.cases]
        self.managers = {
            n: make_reward_manager(n, self.tok) for n in ("trajectory_guided", "exact_match", "path_router")
        }
        self.clean = {n: asyncio.run(self._score(m, self.clean_rows)) for n, m in self.managers.items()}

    @staticmethod
    async def _score(mgr, rows) -> list[dict[str, Any]]:
        return await asyncio.gather(*(mgr.run_single(r) for r in rows))  # one raise fails all, as in verl

    def trial(self, k: int, rng: random.Random) -> dict[str, Any]:
        """One batch with k malformed rows, through each manager."""
        recs = [self.trial_one(name, k, rng) for name in self.managers]
        return {
            "ok": all(r["ok"] for r in recs),
            "returned": sum(r["returned"] for r in recs),
            "rows": sum(len(self.cases) for _ in recs),
            "raised": [r["raised"] for r in recs if "raised" in r],
            **{
                key: sum(r.get(key, 0) for r in recs)
                for key in ("errors", "expected_errors", "good_equal", "n_good")
            },
            "wrong": [w for r in recs for w in r.get("wrong", [])],
        }

    def trial_one(self, name: str, k: int, rng: random.Random) -> dict[str, Any]:
        positions = rng.sample(range(len(self.cases)), k)
        kinds = list(KINDS)
        offset = rng.randrange(len(kinds))
        bad = {p: kinds[(offset + i) % len(kinds)] for i, p in enumerate(positions)}
        rows = [
            (_malformed_row(self.tok, self.prompt_ids, self.cases[i], bad[i]) if i in bad else r)
            for i, r in enumerate(self.clean_rows)
        ]
        try:
            got = asyncio.run(self._score(self.managers[name], rows))
        except Exception as exc:  # the failure this case looks for
            return {"ok": False, "raised": f"{type(exc).__name__}: {exc}"[:200], "returned": 0}
        clean = self.clean[name]
        errors, good_equal, wrong = 0, 0, []
        for i, (g, c) in enumerate(zip(got, clean, strict=False)):
            err = g["reward_extra_info"].get("reward_error") == 1.0
            errors += err
            expected = _expected(bad[i], name) if i in bad else "clean"
            if expected == "error":
                ok = (
                    err
                    and g["reward_score"] == 0.0
                    and g["reward_extra_info"].keys() == c["reward_extra_info"].keys()
                )
            else:
                ok = _same(g, c)
                good_equal += ok and i not in bad
            if not ok:
                wrong.append(f"{bad.get(i, 'good row')} ({name})")
        n_good = len(clean) - k
        return {
            "ok": not wrong and len(got) == len(clean),
            "returned": len(got),
            "errors": errors,
            "expected_errors": sum(_expected(b, name) == "error" for b in bad.values()),
            "good_equal": good_equal,
            "n_good": n_good,
            "wrong": wrong,
            "kinds": Counter(bad.values()),
        }


def batch_outcome(recs: list[dict[str, Any]]) -> str:
    raised = sorted({x for r in recs for x in r["raised"]})
    parts = [
        f"rows returned: {sum(r['returned'] for r in recs):,}/{sum(r['rows'] for r in recs):,}",
        f"`reward_error` = 1: {sum(r['errors'] for r in recs):,} (expected "
        f"{sum(r['expected_errors'] for r in recs):,}); good rows equal to the clean batch: "
        f"{sum(r['good_equal'] for r in recs):,}/{sum(r['n_good'] for r in recs):,}",
    ]
    wrong = Counter(w for r in recs for w in r.get("wrong", []))
    if wrong:
        parts.append("wrong: " + ", ".join(f"{w} ×{n}" for w, n in wrong.most_common()))
    if raised:
        parts.append("raised: " + "; ".join(raised))
    return "; ".join(parts)


# ----------------------------------------------------------------------------- driver
def run_case(
    label: str,
    reference: str,
    trials: int,
    trial: Callable[[int], dict[str, Any]],
    outcome: Callable[[list[dict[str, Any]]], str],
) -> dict[str, Any]:
    recs, walls = [], []
    for i in range(trials):
        t0 = time.perf_counter()
        recs.append(trial(i))
        walls.append(time.perf_counter() - t0)
    row = {
        "case": label,
        "reference": reference,
        "passed": sum(bool(r["ok"]) for r in recs),
        "n": trials,
        "median": statistics.median(walls),
        "max": max(walls),
        "outcome": outcome(recs),
    }
    print(
        f"{label}: {row['passed']}/{trials} in {sum(walls):.1f} s — {row['outcome']}",
        file=sys.stderr,
        flush=True,
    )
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | reference behaviour | passed / N | measured | s per trial (median / max) |",
        "|---|---|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['reference']} | {r['passed']} / {r['n']} | {r['outcome']} | "
            f"{r['median']:.2f} / {r['max']:.2f} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--trials", type=int, default=20, help="repetitions of each case (default 20)")
    p.add_argument("--cases", default="kill,builds,batch", help="comma list of kill, builds, batch")
    p.add_argument(
        "--build-s", type=float, default=0.5, help="seconds the toy build holds the lock (default 0.5)"
    )
    p.add_argument(
        "--cli-trials", type=int, default=3, help="runs of two real `gta-verl kb build` (default 3)"
    )
    p.add_argument("--malformed", default="1,8,32", help="malformed rows per 64-row batch (default 1,8,32)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    cases = set(args.cases.split(","))
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()

    def fresh(fn: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
        root = Path(tempfile.mkdtemp(prefix="gta-relstress-"))
        try:
            return fn(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    root = Path(tempfile.mkdtemp(prefix="gta-relstress-"))
    has_exchange = _exchange_available(root)
    shutil.rmtree(root, ignore_errors=True)
    print(
        f"renameat2(RENAME_EXCHANGE) on {tempfile.gettempdir()}: {'yes' if has_exchange else 'no'}",
        file=sys.stderr,
    )

    if "kill" in cases:
        for mode, label, ref in (
            (
                "between",
                "SIGKILL between the two renames (fallback swap, exchange forced off)",
                "`--out` is missing until the next load/write; a load in a fresh process moves the complete "
                "new KB back (v2: its manifest was written last); no `.tmp-*`/`.old-*` after that load or "
                "the next write",
            ),
            (
                "fallback",
                "SIGKILL at a random time during the write (fallback swap)",
                "a fresh load gets v1 or v2, never an error; no `.tmp-*`/`.old-*` after the load or the "
                "next write",
            ),
            (
                "exchange",
                "SIGKILL at a random time during the write (default exchange swap"
                + ("" if has_exchange else "; unavailable here, so the fallback ran")
                + ")",
                "`--out` is a complete KB at every instant: a fresh load gets v1 or v2; no leftovers after "
                "the load or the next write",
            ),
        ):
            rows.append(
                run_case(
                    label,
                    ref,
                    args.trials,
                    lambda i, mode=mode: fresh(lambda r: kill_trial(r, mode, rng)),
                    lambda recs, mode=mode: kill_outcome(recs, mode),
                )
            )
    if "builds" in cases:
        for existing in (False, True):
            where = "over an existing KB" if existing else "into a missing `--out`"
            rows.append(
                run_case(
                    f"two builds at once {where} (library write path, lock held {args.build_s:g} s)",
                    "exactly one writes; the other fails at once with the one-line `KBWriteError` naming the "
                    "holder's pid; `--out` then loads the winner's KB; no leftovers",
                    args.trials,
                    lambda i, e=existing: fresh(lambda r: builds_trial(r, e, args.build_s)),
                    builds_outcome,
                )
            )
        if args.cli_trials:
            rows.append(
                run_case(
                    "two `gta-verl kb build` at once over an existing KB (spaCy, 2 passages)",
                    "one exits 0, the other exits 2 with one stderr line; `--out` loads; no leftovers",
                    args.cli_trials,
                    lambda i: fresh(lambda r: cli_builds_trial(r, True)),
                    builds_outcome,
                )
            )
    if "batch" in cases:
        bc = BatchCase(64)
        for k in (int(x) for x in args.malformed.split(",")):
            rows.append(
                run_case(
                    f"64-row batch, {k} malformed, through `{'`, `'.join(bc.managers)}`",
                    "every row returns (no raise out of the gathered `run_single`); each malformed row a "
                    "manager reads scores 0 with `reward_error` = 1 and the same keys; every other row "
                    "equals the clean batch exactly",
                    args.trials,
                    lambda i, k=k: bc.trial(k, rng),
                    batch_outcome,
                )
            )
    print(
        f"\n{args.trials} trials per case (CLI builds: {args.cli_trials}), seed {args.seed}, "
        f"{time.perf_counter() - t_start:.0f} s in all\n"
    )
    print(table(rows))
    if "batch" in cases:
        print(
            "\nmalformed kinds (cycled over the k rows, random positions): "
            + "; ".join(_describe(k) for k in KINDS)
        )
    return 0 if all(r["passed"] == r["n"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
