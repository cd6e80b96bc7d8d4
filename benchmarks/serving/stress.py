"""Reliability suite: hostile input, stall, load, actor kills, fuzzed generations, bad KBs/corpora.

Prints markdown tables (recorded in docs/benchmarks/stress.md). Sections (``--sections``, comma-separated):

* ``corpus``: malformed-corpus matrix (MuSiQue records, JSON and JSONL): in = loaded + rejected.
* ``kb``: corrupted-KB matrix on copies of the MuSiQue KB: each case a KBLoadError naming the file.
* ``hostile``: HTTP on 127.0.0.1 with the MuSiQue KB: every hostile request case
  (chunked oversize body, lying Content-Length, lone surrogates, strict ``topk``, empty/NUL queries).
* ``stall``: one caller sends 400 queries of 2,300 characters (as the largest requests the
  character cap admits, all at once) while agents keep sending single queries with the agent
  loop's 30 s timeout; the agents' latency alone is the reference.
* ``http``: N one-query requests from C concurrent clients, results compared with in-process
  retrieval (the reference, one batch), p50/p95 latency.
* ``actor``: the Ray retriever killed three ways (``ray.kill`` with and without restart, SIGKILL
  of its process), first a replica, then the service actor, during concurrent calls through
  the client the agent loop uses; every call returns within its timeout, the service recovers,
  later results equal earlier ones.
* ``fuzz``: fuzzed generations through the real agent loop (scripted policy, real Qwen2.5
  tokenizer, toy retriever) and the three registered reward managers: exceptions, and masks
  checked against the loop's own turn spans.

Run: ``nice -n 10 .venv/bin/python -m benchmarks.serving.stress`` (every section, < 10 minutes on the
2-core development machine); ``--sections hostile,actor`` for some; ``--fuzz 10000`` for the
issue's full fuzz count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.serving.stress_actor import section_actor
from benchmarks.serving.stress_musique import musique_kb_dir, stop_musique_server
from benchmarks.serving.stress_serving import section_hostile, section_http, section_stall

SECTIONS = ("corpus", "kb", "hostile", "stall", "http", "actor", "fuzz")


# ------------------------------------------------------------------------------------------ fuzz
_FRAGMENTS = [
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<info>",
    "</info>",
    "<think>",
    "</think>",
    "<search><search>",
    "</answer></answer>",
    "< search>",
    "<SEARCH>",
    "<answer/>",
    "\n",
    " ",
    "\t",
    "Paris",
    "capital of France",
    "Emmanuel Macron",
    "",
    "\u0000",
    "\u202e",
    "🙂",
    "ß",
    "日本",
    "\\",
    '"',
    "{",
    "}",
    "<|im_end|>",
    "<|endoftext|>",
    "\r\n",
    "x" * 300,
]


def fuzz_turn(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:
        return f"{rng.choice(['', 'think. '])}<search> {rng.choice(_FRAGMENTS[16:])} </search>"
    if kind < 0.4:
        return (
            f"so <answer> {rng.choice(_FRAGMENTS[16:])} </answer>"
            f"{rng.choice(['', ' trailing <search> q </search>'])}"
        )
    return "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 12)))


def _fuzz_managers(tok: Any) -> dict[str, Any]:
    """The three registered gta reward managers, each built as verl builds it."""
    from omegaconf import OmegaConf

    import gta_verl.rewards.managers  # registers trajectory_guided, exact_match
    import gta_verl.rewards.path_router_manager  # noqa: F401 - registers path_router
    from gta_verl.verl_compat import get_reward_manager_cls

    mcfg = OmegaConf.create({"gta": {}, "reward": {}})
    return {
        name: get_reward_manager_cls(name)(
            config=mcfg,
            tokenizer=tok,
            compute_score=None,
            reward_router_address=None,
            reward_model_tokenizer=None,
        )
        for name in ("trajectory_guided", "exact_match", "path_router")
    }


def _fuzz_rollouts(n: int, rng: random.Random, tok: Any, errors: dict[str, int]) -> tuple[list[Any], float]:
    """``n`` fuzzed scripted generations through the agent loop on the toy KB (loop exceptions counted).

    Returns:
        The rollouts and the seconds the loop took.
    """
    from gta_verl.agent.backends import ScriptedServerManager
    from gta_verl.agent.retriever_access import in_process_client
    from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
    from gta_verl.data.schema import make_verl_row
    from gta_verl.data.types import QAExample
    from gta_verl.retrieval.backends import open_kb_retriever
    from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb

    emb = HashEmbedder()
    client = in_process_client(open_kb_retriever(make_toy_kb(emb), None, emb))
    scripts = [[fuzz_turn(rng) for _ in range(rng.randint(1, 6))] for _ in range(n)]
    ex = QAExample("f", "Where was the president of France born?", ("Amiens",), (), 2, "toy")
    rows = [make_verl_row(ex, i) for i in range(n)]
    cfg = make_trainer_config(prompt_length=1024, response_length=768)
    rollouts: list[Any] = []
    t0 = time.perf_counter()
    for s in range(0, n, 500):  # chunks: a loop exception costs one chunk, and is counted
        try:
            rollouts += run_agent_rollouts(
                rows[s : s + 500],
                ScriptedServerManager(tok, scripts[s : s + 500]),
                tok,
                client,
                cfg,
                concurrency=32,
            )
        except Exception as exc:  # counted, reported
            errors["loop"] += 1
            print(f"loop exception: {type(exc).__name__}: {exc}", file=sys.stderr)
    return rollouts, time.perf_counter() - t0


def _bad_masks(rollouts: list[Any]) -> int:
    """Rollouts whose turn spans do not tile the response or whose mask differs from the spans'."""
    from gta_verl.agent.spans import response_mask_from_spans
    from gta_verl.data import schema

    bad = 0
    for r in rollouts:
        spans = r.extra_fields[schema.EF_TURN_SPANS]
        n_tok = len(r.response_ids)
        tiles = (
            bool(spans)
            and spans[0][1] == 0
            and spans[-1][2] == n_tok
            and all(a[2] == b[1] for a, b in zip(spans, spans[1:], strict=False))
        )
        if (
            not tiles
            or r.response_mask != response_mask_from_spans(n_tok, spans)
            or len(r.response_mask) != n_tok
        ):
            bad += 1
    return bad


async def _score_all(rollouts: list[Any], managers: dict[str, Any], errors: dict[str, int]) -> None:
    """Every rollout through every manager; exceptions and non-finite rewards counted per manager."""
    from gta_verl.agent.runner import rollout_data_proto

    for r in rollouts:
        for name, m in managers.items():
            try:
                res = await m.run_single(rollout_data_proto(r))
                if not np.isfinite(float(res["reward_score"])):
                    raise ValueError("non-finite reward")
            except Exception as exc:  # counted, reported
                errors[name] += 1
                if errors[name] <= 3:
                    print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)


def section_fuzz(n: int, seed: int) -> None:
    from gta_verl.agent.tokenizer import load_qwen_tokenizer
    from gta_verl.data import schema

    rng = random.Random(seed)
    tok = load_qwen_tokenizer()
    managers = _fuzz_managers(tok)
    errors: dict[str, int] = {"loop": 0, **{k: 0 for k in managers}}
    rollouts, t_loop = _fuzz_rollouts(n, rng, tok, errors)
    bad_masks = _bad_masks(rollouts)
    t1 = time.perf_counter()
    asyncio.run(_score_all(rollouts, managers, errors))
    t_score = time.perf_counter() - t1
    kinds = {}
    for r in rollouts:
        for k, _, _ in r.extra_fields[schema.EF_TURN_SPANS]:
            kinds[k] = kinds.get(k, 0) + 1
    print(f"\n### Fuzzed generations through the agent loop and reward managers (seed {seed})\n")
    print(
        "| generations | rollouts | loop exceptions | masks ≠ spans | trajectory_guided exc. "
        "| exact_match exc. | path_router exc. | loop s | scoring s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {n:,} | {len(rollouts):,} | {errors['loop']} | {bad_masks} | {errors['trajectory_guided']} | "
        f"{errors['exact_match']} | {errors['path_router']} | {t_loop:.0f} | {t_score:.0f} |"
    )
    print(f"\nturn spans seen: {dict(sorted(kinds.items()))}")


# ------------------------------------------------------------------------------------------ KB matrix
def section_kb() -> None:
    from gta_verl.kb.store import KBLoadError
    from gta_verl.testing.kb_corruption import KB_CORRUPTIONS, load_kb_bounded

    src = musique_kb_dir()
    print("\n### Corrupted-KB matrix (copies of the MuSiQue KB)\n")
    print("| corruption | result | names the file | ms |\n|---|---|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for case, (corrupt, _) in KB_CORRUPTIONS.items():
            kb = Path(tmp) / case.replace(" ", "_").replace("/", "_")
            shutil.copytree(src, kb)
            corrupt(kb)
            t = time.perf_counter()
            try:
                load_kb_bounded(kb, timeout_s=60)
                result, named = "LOADED (not detected)", "-"
            except KBLoadError as exc:
                msg = str(exc)
                result = "KBLoadError"
                named = msg.split(": ", 1)[0].replace(str(kb), "KB")
            except Exception as exc:  # reported as a failure of the promise
                result, named = f"{type(exc).__name__} (not a KBLoadError)", "-"
            print(f"| {case} | {result} | `{named}` | {(time.perf_counter() - t) * 1000:.0f} |")
            shutil.rmtree(kb, ignore_errors=True)


# ------------------------------------------------------------------------------------------ corpus matrix
def _corpus_variants(base: list[dict[str, str]]) -> dict[str, tuple[list[Any], list[bytes]]]:
    """case → (JSON records, or raw JSON bytes patches) built from real MuSiQue records."""

    def with_rec(i: int, rec: Any) -> list[Any]:
        out = list(base)
        out[i] = rec
        return out

    return {
        "clean": (list(base), []),
        "byte 0xff in a title": (list(base), [b"\xff"]),
        "lone surrogate escape": (with_rec(7, {"title": "T\ud800", "text": "x y z"}), []),
        "record is a list": (with_rec(7, ["a", "b"]), []),
        "record is a string": (with_rec(7, "text"), []),
        "missing text": (with_rec(7, {"title": "t"}), []),
        "empty text": (with_rec(7, {"title": "t", "text": "  \n"}), []),
        "title not a string": (with_rec(7, {"title": 3, "text": "x"}), []),
        "whitespace-only duplicate": (
            with_rec(7, {"title": f" {base[3]['title']}", "text": base[3]["text"] + "\n"}),
            [],
        ),
        "exact duplicate": (with_rec(7, dict(base[3])), []),
    }


def _write(fmt: str, path: Path, recs: list[Any], patch: list[bytes]) -> None:
    if fmt == "hipporag":
        raw = json.dumps(recs, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if patch:  # first byte of record 7's title → 0xff
            at = raw.index(json.dumps(recs[7]["title"], ensure_ascii=False).encode()) + 1
            raw = raw[:at] + patch[0] + raw[at + 1 :]
        path.write_bytes(raw)
    else:
        lines = [json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass") for r in recs]
        if patch:
            at = lines[7].index(b'"title": "') + 10
            lines[7] = lines[7][:at] + patch[0] + lines[7][at + 1 :]
        lines.insert(12, b"{not json")  # one more malformed line in every JSONL variant
        path.write_bytes(b"\n".join(lines) + b"\n")


def section_corpus(n: int) -> None:
    from gta_verl.bundled import MUSIQUE_CORPUS
    from gta_verl.data.loaders import read_corpus, reason_counts

    base = json.loads(MUSIQUE_CORPUS.read_text())[:n]
    print(f"\n### Malformed-corpus matrix ({n} MuSiQue records; JSONL variants add one invalid JSON line)\n")
    print("| case | format | in | loaded | rejected | in = loaded + rejected | reasons |")
    print("|---|---|---:|---:|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for case, (recs, patch) in _corpus_variants(base).items():
            for fmt, suffix in (("hipporag", ".json"), ("flashrag", ".jsonl")):
                path = Path(tmp) / f"c{suffix}"
                _write(fmt, path, recs, patch)
                try:
                    rep = read_corpus(path, fmt)
                    why = ", ".join(f"{k}: {v}" for k, v in reason_counts(rep.rejected).items())
                    print(
                        f"| {case} | {fmt} | {rep.n_in} | {rep.n_ok} | {len(rep.rejected)} | "
                        f"{'yes' if rep.reconciles() else 'NO'} | {why} |"
                    )
                except Exception as exc:  # reported as a failure of the promise
                    print(f"| {case} | {fmt} | - | - | - | {type(exc).__name__}: {exc} | |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}"
    )
    p.add_argument("--corpus-records", type=int, default=50)
    p.add_argument("--long-queries", type=int, default=400, help="stall: queries the one caller sends")
    p.add_argument("--long-chars", type=int, default=2300, help="stall: characters per long query")
    p.add_argument("--agents", type=int, default=16, help="stall: agents sending single queries meanwhile")
    p.add_argument(
        "--stall-reference",
        action="store_true",
        help="stall: first the same run against a batcher without the character budget",
    )
    p.add_argument("--requests", type=int, default=1000, help="http: one-query requests")
    p.add_argument("--clients", type=int, default=128, help="http: concurrent clients")
    p.add_argument("--kill-calls", type=int, default=256, help="actor: concurrent calls per kill")
    p.add_argument(
        "--actor-kb",
        choices=("toy", "musique"),
        default="toy",
        help="actor: KB the replicas serve (toy: hash encoder, fast restarts)",
    )
    p.add_argument("--kill-targets", default="replica,service")
    p.add_argument("--fuzz", type=int, default=2_000, help="fuzz: generations (the issue asks for 10,000)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sections = args.sections.split(",")
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        p.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    started = time.perf_counter()
    runs = {
        "corpus": lambda: section_corpus(args.corpus_records),
        "kb": section_kb,
        "hostile": section_hostile,
        "stall": lambda: section_stall(args.long_queries, args.long_chars, args.agents, args.stall_reference),
        "http": lambda: section_http(args.requests, args.clients),
        "actor": lambda: section_actor(args.kill_calls, args.actor_kb, args.kill_targets.split(",")),
        "fuzz": lambda: section_fuzz(args.fuzz, args.seed),
    }
    try:
        for name in SECTIONS:
            if name in sections:
                t = time.perf_counter()
                runs[name]()
                print(f"\n({name}: {time.perf_counter() - t:.0f} s)", flush=True)
    finally:
        stop_musique_server()
    print(f"\ntotal: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
