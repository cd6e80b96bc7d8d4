"""Per-passage cost of a KB build, measured, for docs/scale.md's 21M table.

Usage:
    python -m benchmarks.kb.build_cost [--sections tokens,ray-spacy] [--passages N] [--concurrency 2]
        [--rows-out ROWS.json]

Two measurements on the bundled MuSiQue corpus (1,890 passages):

* ``tokens`` — the **LLM OpenIE path's** per-passage work in tokens: the two chat prompts that
  :mod:`gta_verl.kb.openie.prompts` sends per passage (NER, then NER-conditioned triples), counted with the
  Qwen2.5 tokenizer and its ChatML template (the ``vllm:Qwen/Qwen2.5-*`` recipes), and the two replies, taken
  to be the bundled GPT-3.5 OpenIE output for that passage printed as the JSON objects the prompts ask for
  (+1 token for ``<|im_end|>``). Deterministic: no model runs, so the time on an engine is these counts
  divided by that engine's prefill and decode throughput (not measured here).
* ``ray-spacy`` — the **LLM-free path through Ray Data** (``gta-verl kb build --openie spacy --ray``):
  :func:`gta_verl.kb.ray_build.build_kb_ray` on the first ``--passages`` passages with empty OpenIE and
  embedding caches in a temporary directory, ``--concurrency`` actors per pool; the stage seconds its
  summary table reports, divided by the stage's items, and multiplied by the CPUs the stage held
  (core-seconds per item: what a cluster's core count divides). Needs an idle machine.

``--rows-out`` writes the numbers as JSON; ``--passages-target`` (default 21M) multiplies them out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_OPENIE

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
TARGET_PASSAGES = 21_000_000


@dataclass(frozen=True)
class PassageTokens:
    """Tokens one passage costs on the LLM OpenIE path (Qwen2.5 ChatML).

    Attributes:
        ner_prompt: The NER chat prompt, generation prompt included (prefill).
        ner_reply: ``{"named_entities": [...]}`` plus ``<|im_end|>`` (decode).
        triple_prompt: The triple chat prompt with the entities in it (prefill).
        triple_reply: ``{"triples": [[s, r, o], ...]}`` plus ``<|im_end|>`` (decode).
    """

    ner_prompt: int
    ner_reply: int
    triple_prompt: int
    triple_reply: int

    @property
    def prefill(self) -> int:
        return self.ner_prompt + self.triple_prompt

    @property
    def decode(self) -> int:
        return self.ner_reply + self.triple_reply


def reply_texts(entities: Sequence[Any], triples: Sequence[Any]) -> tuple[str, str]:
    """The two replies the prompts ask for, printed from an extraction's raw entities and triples."""
    ner = json.dumps({"named_entities": list(entities)}, ensure_ascii=False)
    tri = json.dumps(
        {"triples": [list(t) if isinstance(t, (list, tuple)) else t for t in triples]}, ensure_ascii=False
    )
    return ner, tri


def passage_tokens(tok: Any, passage: Any, entities: Sequence[Any], triples: Sequence[Any]) -> PassageTokens:
    """Count one passage's prompt and reply tokens with ``tok`` (a chat-template tokenizer)."""
    from gta_verl.kb.openie.prompts import ner_messages, triple_messages

    def prompt(msgs: list[dict[str, str]]) -> int:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return len(tok(text, add_special_tokens=False)["input_ids"])

    ner, tri = reply_texts(entities, triples)
    end = 1  # the <|im_end|> that closes a reply
    ents = [str(e) for e in entities]
    return PassageTokens(
        ner_prompt=prompt(ner_messages(passage)),
        ner_reply=len(tok(ner, add_special_tokens=False)["input_ids"]) + end,
        triple_prompt=prompt(triple_messages(passage, ents)),
        triple_reply=len(tok(tri, add_special_tokens=False)["input_ids"]) + end,
    )


def summarize(counts: Sequence[PassageTokens], target: int = TARGET_PASSAGES) -> dict[str, Any]:
    """Mean / median / p95 per passage of each count, and the totals at ``target`` passages."""
    out: dict[str, Any] = {"passages": len(counts)}
    for name in ("ner_prompt", "ner_reply", "triple_prompt", "triple_reply", "prefill", "decode"):
        vals = sorted(getattr(c, name) for c in counts)
        mean = statistics.fmean(vals)
        out[name] = {
            "mean": mean,
            "median": statistics.median(vals),
            "p95": vals[min(len(vals) - 1, int(0.95 * len(vals)))],
            "at_target": mean * target,
        }
    return out


def tokens_section(n: int | None, target: int) -> dict[str, Any]:
    from gta_verl.agent.tokenizer import load_qwen_tokenizer
    from gta_verl.data.loaders import read_corpus
    from gta_verl.kb.openie.precomputed import PrecomputedOpenIE

    tok = load_qwen_tokenizer()
    passages = list(read_corpus(MUSIQUE_CORPUS).records)[:n]
    pre = PrecomputedOpenIE(MUSIQUE_OPENIE)
    counts, missing = [], 0
    for p in passages:
        doc = pre.record(p)
        if doc is None:
            missing += 1
            continue
        counts.append(
            passage_tokens(tok, p, doc.get("extracted_entities") or (), doc.get("extracted_triples") or ())
        )
    return {**summarize(counts, target), "not_in_openie_file": missing, "tokenizer": "Qwen2.5 (ChatML)"}


def stage_rows(
    stats: Sequence[Any], n_passages: int, cpus: dict[str, float], target: int
) -> list[dict[str, Any]]:
    """Per stage: seconds, items, items/s, core-seconds per passage and core-hours at ``target`` passages.

    ``cpus`` maps a stage-name prefix to the CPUs the stage held (actors × CPUs each; the driver's 1 else).
    """
    rows = []
    for s in stats:
        held = next((c for k, c in cpus.items() if s.stage.startswith(k)), 1.0)
        per_passage = s.seconds * held / max(n_passages, 1)
        rows.append(
            {
                "stage": s.stage,
                "items": s.items,
                "seconds": s.seconds,
                "items_per_s": s.items / s.seconds if s.seconds > 0 else None,
                "cpus": held,
                "core_s_per_passage": per_passage,
                "core_hours_at_target": per_passage * target / 3600,
            }
        )
    return rows


def ray_spacy_section(n: int | None, concurrency: int, target: int) -> dict[str, Any]:
    from gta_verl.kb.build import KBConfig
    from gta_verl.kb.ray_build import build_kb_ray
    from gta_verl.kb.ray_shards import RayOptions, summary_table

    docs = json.loads(Path(MUSIQUE_CORPUS).read_text())[:n]
    with tempfile.TemporaryDirectory(prefix="gta_build_cost_") as tmp:
        corpus = Path(tmp) / "corpus.json"
        corpus.write_text(json.dumps(docs))
        # An empty cache directory: every passage is extracted and every text encoded.
        opts = RayOptions(
            concurrency=concurrency, work_dir=str(Path(tmp) / "work"), cache_dir=str(Path(tmp) / "cache")
        )
        t0 = time.perf_counter()
        _, stats = build_kb_ray(
            corpus, "hipporag", "spacy", Path(tmp) / "kb", KBConfig(), opts, progress=False
        )
        wall = time.perf_counter() - t0
    print(summary_table(stats))
    cpus = {"OpenIE": float(concurrency), "embeddings": concurrency * opts.encoder_num_cpus}
    return {
        "passages": len(docs),
        "concurrency": concurrency,
        "wall_s": wall,
        "cpu_count": os.cpu_count(),
        "stages": stage_rows(stats, len(docs), cpus, target),
    }


def tokens_markdown(res: dict[str, Any]) -> str:
    lines = [
        f"LLM OpenIE tokens per passage ({res['passages']:,} MuSiQue passages, {res['tokenizer']}; "
        "replies = the bundled GPT-3.5 output as the prompts' JSON):",
        "",
        "| count | mean | median | p95 | at 21M passages |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("ner_prompt", "ner_reply", "triple_prompt", "triple_reply", "prefill", "decode"):
        r = res[name]
        lines.append(
            f"| {name} | {r['mean']:.1f} | {r['median']:.0f} | {r['p95']} | {r['at_target'] / 1e9:.1f} B |"
        )
    return "\n".join(lines)


def stages_markdown(res: dict[str, Any]) -> str:
    lines = [
        "Ray Data build, spaCy OpenIE, cold caches "
        f"({res['passages']:,} passages, {res['concurrency']} actors per pool, "
        f"{res['cpu_count']} CPUs; wall {res['wall_s']:.0f} s):",
        "",
        "| stage | items | s | items/s | CPUs | core-s / passage | core-hours at 21M |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["stages"]:
        rate = "" if r["items_per_s"] is None else f"{r['items_per_s']:.1f}"
        lines.append(
            f"| {r['stage']} | {r['items']:,} | {r['seconds']:.1f} | {rate} | {r['cpus']:g} | "
            f"{r['core_s_per_passage']:.4f} | {r['core_hours_at_target']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sections", default="tokens,ray-spacy")
    p.add_argument("--passages", type=int, default=None, help="first N passages (default: all 1,890)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--passages-target", type=int, default=TARGET_PASSAGES)
    p.add_argument("--rows-out", type=Path, default=None)
    args = p.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - {"tokens", "ray-spacy"}
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; valid: tokens, ray-spacy")
    out: dict[str, Any] = {"target_passages": args.passages_target}
    if "tokens" in sections:
        out["tokens"] = tokens_section(args.passages, args.passages_target)
        print(tokens_markdown(out["tokens"]), end="\n\n")
    if "ray-spacy" in sections:
        out["ray_spacy"] = ray_spacy_section(args.passages, args.concurrency, args.passages_target)
        print(stages_markdown(out["ray_spacy"]))
    if args.rows_out:
        args.rows_out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
