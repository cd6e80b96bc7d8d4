"""The KB-write cases of ``benchmarks/kb/reliability_stress.py``: kills during a write, two builds at once.

Each trial runs in a fresh directory with fresh child processes (the scripts below, run with
``python -c``) and returns a record with ``ok``; the ``*_outcome`` functions summarise a case's
records for the table. Run the cases through ``python -m benchmarks.kb.reliability_stress``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

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


def exchange_available(root: Path) -> bool:
    from gta_verl.kb import atomic

    a, b = root / "xa", root / "xb"
    a.mkdir()
    b.mkdir()
    try:
        return atomic.exchange_paths(a, b)
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
