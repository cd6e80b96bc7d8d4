"""Retrieval evaluation: recall@k of gold supporting documents, per mode or backend and hop count.

Recall@k of one question = |top-k ∩ gold| / |gold|; reported as the mean over
questions with at least one gold document (questions without gold are counted and
skipped). The same definition as the recall anchors quoted in ``docs/retrieval.md``.
:func:`evaluate_retrieval` compares the graph backend's modes on one KB and encoder;
:func:`evaluate_backends` compares backends (``graph``, ``dense``, ``bm25``) on one KB.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gta_verl.data.types import QAExample
from gta_verl.retrieval.config import BACKENDS, MODES, RetrieverConfig, as_mode

logger = logging.getLogger(__name__)

DEFAULT_KS = (1, 2, 5, 10)


def recall_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Share of ``gold`` ids among the first ``k`` of ``ranked``.

    >>> recall_at_k(["a", "b", "c"], ["c", "x"], 2), recall_at_k(["a", "b", "c"], ["c", "x"], 3)
    (0.0, 0.5)
    """
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("recall@k is undefined without gold documents")
    return len(gold_set.intersection(ranked[:k])) / len(gold_set)


def load_qa(path: str | Path, passages: Sequence[Any]) -> list[QAExample]:
    """Read questions with gold documents matched to the KB's ``doc_id`` s.

    Formats (by content): a data-prep / synthesis parquet (verl rows whose
    ``reward_model.ground_truth`` holds ``target_doc_ids``), a MuSiQue/HippoRAG
    question JSON (``paragraphs`` with ``is_supporting``), a 2Wiki/HotpotQA JSON
    (``supporting_facts`` titles), or a FlashRAG jsonl.
    """
    from gta_verl.data import loaders

    path = Path(path)
    if not path.is_file():
        from gta_verl.data.loaders import DataFormatError

        raise DataFormatError(f"{path}: QA file not found")
    corpus = {p.doc_id: p for p in passages}
    if path.suffix == ".parquet":
        return _load_parquet_qa(path, corpus)
    if path.suffix == ".jsonl":
        report = loaders.read_flashrag_qa(path)
    else:
        first = json.loads(path.read_text(encoding="utf-8"))
        sample = first[0] if isinstance(first, list) and first else {}
        if isinstance(sample, dict) and "supporting_facts" in sample:
            report = loaders.read_supporting_facts_qa(path, list(passages))
        else:
            report = loaders.read_musique_qa(path, corpus_ids=corpus)
    logger.info("%s", report.summary())
    return list(report.records)


def _load_parquet_qa(path: Path, corpus: Mapping[str, Any]) -> list[QAExample]:
    """verl-row parquet → questions; a question none of whose gold documents is in the KB is rejected (logged
    with the count), as the JSON loaders do: its recall would be 0 whatever the retriever does.

    Raises:
        DataFormatError: Not a parquet file, or no ``reward_model`` column (names the file; row for bad rows).
    """
    from gta_verl.data.io import read_parquet_frame
    from gta_verl.data.loaders import DataFormatError
    from gta_verl.data.schema import parse_ground_truth

    df = read_parquet_frame(path)
    if "reward_model" not in df.columns:
        raise DataFormatError(
            f"{path}: not a verl QA parquet (no reward_model column; columns {list(df.columns)})"
        )
    out, not_in_kb = [], 0
    for i, row in df.iterrows():
        try:
            answers, doc_ids, _ = parse_ground_truth((row["reward_model"] or {})["ground_truth"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFormatError(f"{path}: row {i}: bad reward_model.ground_truth ({exc})") from None
        if corpus and not any(d in corpus for d in doc_ids):
            not_in_kb += 1
            continue
        info = row.get("extra_info") or {}
        out.append(
            QAExample(
                qid=str(info.get("qid", i)),
                question=str(info.get("question", "")),
                answers=tuple(answers) or ("",),
                supporting_doc_ids=tuple(doc_ids),  # a gold id missing from the KB still counts as a miss
                hops=int(info.get("hops", 0) or 0),
                data_source=str(row.get("data_source", "")),
            )
        )
    if not_in_kb:
        logger.warning(
            "%s: %d of %d questions rejected: no gold document in the KB (another corpus?)",
            path,
            not_in_kb,
            len(df),
        )
    if not out:
        raise DataFormatError(f"{path}: none of its {len(df)} questions has a gold document in the KB")
    return out


def _mode_recall(retriever: Any, qa: Sequence[QAExample], ks: Sequence[int]) -> dict[str, Any]:
    kmax = max(ks)
    results = retriever.rank([q.question for q in qa], kmax)
    per_k: dict[int, list[float]] = {k: [] for k in ks}
    by_hops: dict[int, dict[int, list[float]]] = {}
    flags: dict[str, int] = {}
    for ex, res in zip(qa, results, strict=True):
        ids = res.doc_ids
        for f in res.flags:
            flags[f] = flags.get(f, 0) + 1
        for k in ks:
            r = recall_at_k(ids, ex.supporting_doc_ids, k)
            per_k[k].append(r)
            by_hops.setdefault(ex.hops, {kk: [] for kk in ks})[k].append(r)

    def mean(v: list[float]) -> float:
        return round(sum(v) / len(v), 4) if v else float("nan")

    return {
        "recall": {f"R@{k}": mean(v) for k, v in per_k.items()},
        "by_hops": {
            str(h): {"n": len(d[ks[0]]), "recall": {f"R@{k}": mean(v) for k, v in d.items()}}
            for h, d in sorted(by_hops.items())
        },
        "flags": flags,
    }


def evaluate_retrieval(
    kb_or_retriever: str | Path | Any,
    qa_examples: Sequence[QAExample],
    modes: Sequence[str] = MODES,
    ks: Sequence[int] = DEFAULT_KS,
    config: RetrieverConfig | None = None,
) -> dict[str, Any]:
    """Recall@k of gold documents for each retrieval mode.

    Args:
        kb_or_retriever: A KB directory, or a ready ``graph`` backend (its KB, encoder and
            graph are shared across modes).
        qa_examples: Questions with ``supporting_doc_ids``; those without are skipped.
        modes: Any of ``dense``, ``graph``, ``hybrid``.
        ks: Cut-offs.
        config: Base config (its ``mode`` is overridden per mode); default = the
            retriever's own config, or the defaults.

    Returns:
        ``{"n_questions", "n_skipped_no_gold", "ks", "config", "modes": {mode:
        {"recall": {"R@k": v}, "by_hops": {hops: {"n", "recall"}}, "flags"}}}``.
    """
    from gta_verl.retrieval.backends import open_retriever

    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"unknown modes {bad}; choose from {MODES}")
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive integers, got {list(ks)}")
    if (config or getattr(kb_or_retriever, "config", None) or RetrieverConfig()).backend != "graph":
        raise ValueError("modes are the graph backend's: compare other backends with evaluate_backends")
    if isinstance(kb_or_retriever, (str, Path)):
        base = open_retriever(kb_or_retriever, config)
    else:
        base = kb_or_retriever
    config = config or base.config
    qa, out = _frame(qa_examples, ks, config)
    ks = out["ks"]
    for mode in modes:
        retriever = base.with_config(dataclasses.replace(config, mode=as_mode(mode)))
        out["modes"][mode] = _mode_recall(retriever, qa, ks)
    return out


def _frame(
    qa_examples: Sequence[QAExample], ks: Sequence[int], config: RetrieverConfig
) -> tuple[list[QAExample], dict[str, Any]]:
    """The questions with gold documents and the result's header fields (``modes`` still empty)."""
    qa = [q for q in qa_examples if q.supporting_doc_ids]
    if not qa:
        raise ValueError("no question has gold supporting documents: cannot compute recall")
    out: dict[str, Any] = {
        "n_questions": len(qa),
        "n_skipped_no_gold": len(qa_examples) - len(qa),
        "ks": sorted({int(k) for k in ks}),
        "config": dataclasses.asdict(config),
        "modes": {},
    }
    return qa, out


def evaluate_backends(
    kb: Any,
    qa_examples: Sequence[QAExample],
    backends: Sequence[str] = BACKENDS,
    ks: Sequence[int] = DEFAULT_KS,
    config: RetrieverConfig | None = None,
    embedder: Any = None,
) -> dict[str, Any]:
    """Recall@k of gold documents for each retriever backend over one loaded KB.

    Each backend ranks with :meth:`rank` (``graph``: its configured mode's full ordering, the
    hybrid one by default), opened by :func:`gta_verl.retrieval.backends.open_kb_retriever`.

    Args:
        kb: The loaded knowledge base every backend serves.
        qa_examples: Questions with ``supporting_doc_ids``; those without are skipped.
        backends: Any of :data:`~gta_verl.retrieval.config.BACKENDS`.
        ks: Cut-offs.
        config: Base config (its ``backend`` is set per row); default the defaults.
        embedder: The query encoder of ``graph`` and ``dense`` (default: the KB's own, loaded once).

    Returns:
        As :func:`evaluate_retrieval`, the rows under ``"modes"`` keyed by backend.

    Raises:
        ValueError: An unknown backend (listing the valid ones), bad ``ks`` or no gold.
    """
    from gta_verl.retrieval.backends import check_backend, open_kb_retriever
    from gta_verl.retrieval.passages import load_query_encoder

    for name in backends:
        check_backend(name)
    if not backends or not ks or min(ks) < 1:
        raise ValueError(f"need a backend and positive ks, got {list(backends)}, {list(ks)}")
    config = config or RetrieverConfig()
    qa, out = _frame(qa_examples, ks, config)
    if embedder is None and set(backends) - {"bm25"}:
        embedder = load_query_encoder(kb, config)
    for name in backends:
        cfg = dataclasses.replace(config, backend=check_backend(name))
        retriever = open_kb_retriever(kb, cfg, embedder)
        out["modes"][name] = _mode_recall(retriever, qa, out["ks"])
    return out


def format_recall_table(result: dict[str, Any], label: str = "mode") -> str:
    """Markdown table of :func:`evaluate_retrieval` / :func:`evaluate_backends` output.

    Overall, then per hop count; ``label`` heads the first column (``mode`` or ``backend``).
    """
    ks = result["ks"]
    head = f"| {label} | " + " | ".join(f"R@{k}" for k in ks) + " |"
    sep = "|---|" + "---|" * len(ks)
    lines = [f"Recall@k over {result['n_questions']} questions", "", head, sep]
    for mode, r in result["modes"].items():
        lines.append(f"| {mode} | " + " | ".join(f"{r['recall'][f'R@{k}']:.3f}" for k in ks) + " |")
    lines += [
        "",
        f"| {label} | hops (n) | " + " | ".join(f"R@{k}" for k in ks) + " |",
        "|---|---|" + "---|" * len(ks),
    ]
    for mode, r in result["modes"].items():
        for hops, d in r["by_hops"].items():
            vals = " | ".join(f"{d['recall'][f'R@{k}']:.3f}" for k in ks)
            lines.append(f"| {mode} | {hops} ({d['n']}) | {vals} |")
    return "\n".join(lines)
