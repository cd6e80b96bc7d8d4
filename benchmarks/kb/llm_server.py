"""The LLM paths for real: ``kb build --openie openai`` and ``synth --generator openai`` via vLLM's server.

    python -m benchmarks.kb.llm_server [--passages 20] [--model gemma-3-270m] [--synth-paths 8]
        [--vllm-python .venv-vllm/bin/python] [--server-url URL] [--work DIR] [--fresh] [--no-worked-example]

Starts vLLM's OpenAI-compatible server on this machine (:mod:`gta_verl.llm.vllm_server`: CPU, fp32,
loopback; a base model gets the transcript chat template and its stop string), then, through the CLI as a
user runs it:

1. ``kb build --openie openai`` on the first ``--passages`` passages of the bundled MuSiQue corpus (the
   first question's 20 paragraphs come first), and again (every passage served from the OpenIE cache);
2. ``kb build --openie precomputed:<bundled GPT-3.5 triples>`` on the same slice, the reference;
3. ``synth --generator openai`` on both KBs (the LLM KB's paths, and the reference KB's: the generator
   measured apart from its own KB's quality), at most ``--synth-paths`` paths each;

and stops the server. Prints and writes (``--out``) triples per passage, the share of passages with a
parsed triple, the statuses and JSON repairs of the triple replies, agreement with the GPT-3.5 triples of
the same passages (precision / recall of normalized triples and of triple entities) and each synthesis
funnel. ``--server-url`` uses a running server instead (its chat template is then the caller's business).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_OPENIE
from gta_verl.kb.normalize import normalize_entity, normalize_relation
from gta_verl.llm.vllm_server import (
    TRANSCRIPT_CHAT_TEMPLATE,
    TRANSCRIPT_STOP,
    VLLMServer,
    VLLMServerConfig,
)

REPO = Path(__file__).resolve().parents[2]
Triple = tuple[str, str, str]


# ----------------------------------------------------------------------------- agreement (pure)
def norm_triple(t: Sequence[str]) -> Triple:
    """A triple as the graph builder keys it: entities and relation normalized."""
    return normalize_entity(t[0]), normalize_relation(t[1]), normalize_entity(t[2])


def agreement(
    predicted: Mapping[str, Iterable[Sequence[str]]], reference: Mapping[str, Iterable[Sequence[str]]]
) -> dict[str, float | int]:
    """Micro precision / recall of normalized triples and of triple entities, per passage, over
    ``reference``'s passages (a passage missing from ``predicted`` predicts nothing).

    >>> ref = {"d": [("Lake Baikal", "located in", "Siberia"), ("Siberia", "part of", "Russia")]}
    >>> pred = {"d": [("lake baikal", "Located in", "Siberia!"), ("Baikal", "is", "deep")]}
    >>> a = agreement(pred, ref)
    >>> (a["triple_precision"], a["triple_recall"], a["entity_precision"], a["entity_recall"])
    (0.5, 0.5, 0.5, 0.6666666666666666)
    """
    counts = {"tp_t": 0, "np_t": 0, "nr_t": 0, "tp_e": 0, "np_e": 0, "nr_e": 0}
    for doc_id, ref in reference.items():
        rt = {norm_triple(t) for t in ref}
        pt = {norm_triple(t) for t in predicted.get(doc_id, ())}
        re_ = {e for s, _, o in rt for e in (s, o) if e}
        pe = {e for s, _, o in pt for e in (s, o) if e}
        counts["tp_t"] += len(rt & pt)
        counts["np_t"] += len(pt)
        counts["nr_t"] += len(rt)
        counts["tp_e"] += len(re_ & pe)
        counts["np_e"] += len(pe)
        counts["nr_e"] += len(re_)

    def ratio(a: int, b: int) -> float:
        return a / b if b else 0.0

    return {
        "triple_precision": ratio(counts["tp_t"], counts["np_t"]),
        "triple_recall": ratio(counts["tp_t"], counts["nr_t"]),
        "entity_precision": ratio(counts["tp_e"], counts["np_e"]),
        "entity_recall": ratio(counts["tp_e"], counts["nr_e"]),
        "n_triples_predicted": counts["np_t"],
        "n_triples_reference": counts["nr_t"],
        "n_triples_shared": counts["tp_t"],
    }


def ner_agreement(
    predicted: Mapping[str, Iterable[str]], reference: Mapping[str, Iterable[str]]
) -> dict[str, float]:
    """Micro precision / recall of the NER step's normalized entities over ``reference``'s passages (the
    NER reply is parsed on its own: a model can name entities and still write no usable triple).

    >>> ner_agreement({"d": ["Lake Baikal", "Baikal"]}, {"d": ["lake baikal", "Siberia", "Russia"]})
    {'ner_precision': 0.5, 'ner_recall': 0.3333333333333333}
    """
    tp = n_pred = n_ref = 0
    for doc_id, ref in reference.items():
        r = {normalize_entity(e) for e in ref} - {""}
        p = {normalize_entity(e) for e in predicted.get(doc_id, ())} - {""}
        tp, n_pred, n_ref = tp + len(r & p), n_pred + len(p), n_ref + len(r)
    return {"ner_precision": tp / n_pred if n_pred else 0.0, "ner_recall": tp / n_ref if n_ref else 0.0}


def yield_summary(funnel: Mapping[str, Any]) -> dict[str, Any]:
    """Counts per funnel stage, the kept share of sampled paths, and each stage's rejection reasons.

    >>> f = {"stages": [{"name": "sampled", "count": 4, "reasons": {}},
    ...                 {"name": "generated", "count": 4, "reasons": {}},
    ...                 {"name": "parsed", "count": 1, "reasons": {"parse:no_json": 3}},
    ...                 {"name": "validated", "count": 1, "reasons": {}}]}
    >>> s = yield_summary(f)
    >>> s["counts"]["parsed"], s["yield"], s["rejected"]
    (1, 0.25, {'parse:no_json': 3})
    """
    stages = funnel.get("stages", [])
    counts = {s["name"]: int(s["count"]) for s in stages}
    rejected: dict[str, int] = {}
    for s in stages:
        rejected.update(s.get("reasons", {}))
    sampled = counts.get("sampled", 0)
    return {
        "counts": counts,
        "yield": counts.get("validated", 0) / sampled if sampled else 0.0,
        "rejected": rejected,
    }


# ----------------------------------------------------------------------------- the runs
def gta(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m gta_verl ARGS`` in this interpreter (the CLI as a user runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "gta_verl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def checked(proc: subprocess.CompletedProcess[str], what: str, ok: Sequence[int] = (0,)) -> str:
    if proc.returncode not in ok:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def write_slice(n: int, out: Path) -> Path:
    """The first ``n`` passages of the bundled corpus, as a HippoRAG corpus file."""
    records = json.loads(MUSIQUE_CORPUS.read_text(encoding="utf-8"))[:n]
    out.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return out


def llm_build_args(a: argparse.Namespace, corpus: Path, out: Path, base_url: str) -> list[str]:
    args = [
        "kb",
        "build",
        "--corpus",
        str(corpus),
        "--openie",
        "openai",
        "--llm-base-url",
        base_url,
        "--llm-model",
        a.served_name,
        "--llm-max-tokens",
        str(a.openie_max_tokens),
        "--llm-timeout",
        str(a.request_timeout),
        "--allow-empty",  # a small model may find no triple: measured, not refused
        "--no-progress",
        "--out",
        str(out),
    ]
    for stop in a.stop:
        args += ["--llm-stop", stop]
    return args


def synth_args(a: argparse.Namespace, kb: Path, out: Path, base_url: str) -> list[str]:
    args = [
        "synth",
        "--kb",
        str(kb),
        "--out",
        str(out),
        "--generator",
        "openai",
        "--llm-base-url",
        base_url,
        "--llm-model",
        a.served_name,
        "--max-tokens",
        str(a.synth_max_tokens),
        "--llm-timeout",
        str(a.request_timeout),
        "--n",
        "1",
        "--batch-size",
        str(a.synth_paths),
        "--max-paths-factor",
        str(a.synth_paths),  # n = 1: exactly one batch of --synth-paths paths
        "--hops",
        "2",
        "--json",
        "--no-progress",
    ]
    for stop in a.stop:
        args += ["--llm-stop", stop]
    if a.no_worked_example:
        args.append("--no-worked-example")
    return args


def openie_cache_file(a: argparse.Namespace, base_url: str) -> Path:
    """Where ``kb build --openie openai`` caches this model's extractions (``--fresh`` deletes it)."""
    from gta_verl.kb.openie.cache import ExtractionCache
    from gta_verl.kb.openie.openai_backend import OpenAIOpenIE
    from gta_verl.llm.openai_chat import stop_strings

    identity = OpenAIOpenIE(base_url, a.served_name, stop=stop_strings(a.stop)).identity
    return ExtractionCache(identity, path=None).path


def measure_openie(a: argparse.Namespace, work: Path, corpus: Path, base_url: str) -> dict[str, Any]:
    from gta_verl.kb.store import load_extractions, read_manifest

    if a.fresh:
        openie_cache_file(a, base_url).unlink(missing_ok=True)
    t0 = time.perf_counter()
    checked(gta(llm_build_args(a, corpus, work / "kb_llm", base_url), a.timeout), "kb build --openie openai")
    build_s = time.perf_counter() - t0
    first = read_manifest(work / "kb_llm")["openie"]
    t0 = time.perf_counter()
    checked(gta(llm_build_args(a, corpus, work / "kb_llm", base_url), a.timeout), "kb build (cached)")
    rebuild_s = time.perf_counter() - t0
    second = read_manifest(work / "kb_llm")["openie"]
    ref_build = ["kb", "build", "--corpus", str(corpus), "--openie", f"precomputed:{MUSIQUE_OPENIE}"]
    checked(
        gta([*ref_build, "--no-progress", "--out", str(work / "kb_ref")], a.timeout), "reference kb build"
    )
    llm = load_extractions(work / "kb_llm")
    ref = load_extractions(work / "kb_ref")
    n = len(llm)
    return {
        "build_s": build_s,
        "rebuild_from_cache_s": rebuild_s,
        "first_run": first,
        "second_run": {k: second[k] for k in ("n_from_cache", "n_extracted")},
        "triples_per_passage": sum(len(e.triples) for e in llm.values()) / n if n else 0.0,
        "share_with_triple": sum(1 for e in llm.values() if e.triples) / n if n else 0.0,
        "reference_triples_per_passage": sum(len(e.triples) for e in ref.values()) / len(ref) if ref else 0.0,
        "agreement": {
            **agreement({d: e.triples for d, e in llm.items()}, {d: e.triples for d, e in ref.items()}),
            **ner_agreement({d: e.entities for d, e in llm.items()}, {d: e.entities for d, e in ref.items()}),
        },
        "share_with_entities": sum(1 for e in llm.values() if e.entities) / n if n else 0.0,
        "examples": {
            d: {"llm": [list(t) for t in llm[d].triples[:5]], "gpt35": [list(t) for t in ref[d].triples[:5]]}
            for d in list(ref)[:3]
            if d in llm
        },
    }


def measure_synth(a: argparse.Namespace, work: Path, base_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("kb_llm", "kb_ref"):
        t0 = time.perf_counter()
        proc = gta(synth_args(a, work / name, work / f"{name}.stage1.parquet", base_url), a.timeout)
        stdout = checked(proc, f"synth on {name}", ok=(0, 1))  # 1: no trajectory kept (the funnel says why)
        start = stdout.find("{")
        report = json.loads(stdout[start:]) if start >= 0 else {}
        out[name] = {
            "seconds": time.perf_counter() - t0,
            **yield_summary(report.get("funnel", {})),
            "stats": report.get("stats", {}),
        }
    return out


def server_config(a: argparse.Namespace) -> VLLMServerConfig:
    from gta_verl.policies import resolve_model

    return VLLMServerConfig(
        model=resolve_model(a.model),
        served_model_name=a.served_name,
        port=a.port,
        max_model_len=a.max_model_len,
        max_num_seqs=a.max_num_seqs,
        chat_template=None if a.native_template else TRANSCRIPT_CHAT_TEMPLATE,
        python=a.vllm_python,
    )


def render(r: Mapping[str, Any]) -> str:
    o, ag = r["openie"], r["openie"]["agreement"]
    first = o["first_run"]
    lines = [
        f"## {r['model']} through vLLM's OpenAI server: {r['passages']} passages of the bundled MuSiQue",
        "",
        f"server start {r.get('server_start_s') or 0:.0f} s; kb build {o['build_s']:.0f} s, "
        f"rebuilt from the cache {o['rebuild_from_cache_s']:.0f} s "
        f"({o['second_run']['n_from_cache']} of {first['n_passages']} passages from cache)",
        "",
        "| OpenIE | value |",
        "|---|---|",
        f"| triples per passage (GPT-3.5: {o['reference_triples_per_passage']:.2f}) | "
        f"{o['triples_per_passage']:.2f} |",
        f"| passages with ≥ 1 triple | {o['share_with_triple']:.0%} |",
        f"| passage statuses | {first['by_status']} |",
        f"| JSON repairs of the triple replies | {first.get('by_json_repair', {})} |",
        f"| malformed triples skipped | {first['n_malformed_triples']} |",
        f"| triple precision / recall vs GPT-3.5 | {ag['triple_precision']:.3f} / {ag['triple_recall']:.3f} "
        f"({ag['n_triples_shared']} shared of {ag['n_triples_predicted']} / {ag['n_triples_reference']}) |",
        f"| triple-entity precision / recall vs GPT-3.5 | {ag['entity_precision']:.3f} / "
        f"{ag['entity_recall']:.3f} |",
        f"| passages with ≥ 1 NER entity | {o['share_with_entities']:.0%} |",
        f"| NER entity precision / recall vs GPT-3.5 | {ag['ner_precision']:.3f} / {ag['ner_recall']:.3f} |",
        "",
        "| synthesis on | sampled | generated | parsed | rules passed | validated | yield | rejections | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in r["synth"].items():
        c = s["counts"]
        lines.append(
            f"| {name} | {c.get('sampled', 0)} | {c.get('generated', 0)} | {c.get('parsed', 0)} | "
            f"{c.get('rules_passed', 0)} | {c.get('validated', 0)} | {s['yield']:.0%} | "
            f"{json.dumps(s['rejected'])} | {s['seconds']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    venv_vllm = REPO / ".venv-vllm" / "bin" / "python"
    ap.add_argument("--passages", type=int, default=20, help="first N bundled passages (default 20)")
    ap.add_argument("--model", default="gemma-3-270m", help="model name or directory (default gemma-3-270m)")
    ap.add_argument("--served-name", default="gemma-3-270m")
    ap.add_argument("--native-template", action="store_true", help="keep the model's own chat template")
    ap.add_argument(
        "--stop",
        action="append",
        default=None,
        help="stop strings (default: the transcript template's '\\nInput:')",
    )
    ap.add_argument("--vllm-python", default=str(venv_vllm if venv_vllm.exists() else sys.executable))
    ap.add_argument("--server-url", default=None, help="use this running server instead of starting one")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--openie-max-tokens", type=int, default=160, help="reply budget of an OpenIE call")
    ap.add_argument("--synth-max-tokens", type=int, default=384, help="reply budget of a synthesis call")
    ap.add_argument("--synth-paths", type=int, default=8, help="paths generated per KB (default 8)")
    ap.add_argument(
        "--no-worked-example",
        action="store_true",
        help="synth without the prompt's worked example (the request alone, as before it existed)",
    )
    ap.add_argument("--request-timeout", type=float, default=1800.0, help="seconds per HTTP request")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per CLI run")
    ap.add_argument("--fresh", action="store_true", help="delete this model's OpenIE cache first")
    ap.add_argument("--work", default=None, help="working directory (default: a new temporary one)")
    ap.add_argument("--out", default=None, help="also write the report here (JSON, and .md beside it)")
    a = ap.parse_args(argv)
    if a.stop is None:
        a.stop = [] if a.native_template else [s.replace("\n", "\\n") for s in TRANSCRIPT_STOP]
    return a


def main(argv: Sequence[str] | None = None) -> int:
    import tempfile

    a = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(a.work or tempfile.mkdtemp(prefix="llm_server_"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = write_slice(a.passages, work / "slice.json")
    server = None
    report: dict[str, Any] = {"model": a.model, "passages": a.passages, "work": str(work)}
    try:
        if a.server_url:
            base_url = a.server_url
        else:
            server = VLLMServer(server_config(a), work / "server.log", nice=19)
            server.start()
            report["server_start_s"] = server.wait_ready(timeout=900)
            base_url = server.config.base_url
        report["openie"] = measure_openie(a, work, corpus, base_url)
        report["synth"] = measure_synth(a, work, base_url)
    finally:
        if server is not None:
            server.stop()
    text = render(report)
    print(text)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        Path(a.out).with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
