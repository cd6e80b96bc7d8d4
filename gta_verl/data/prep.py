"""Dataset → parquet: corpus parquet (``doc_id, title, text``) and verl-format QA parquet.

Pure functions turn loader reports into rows; thin writers save them atomically;
every run returns a :class:`PrepResult` whose counts reconcile
(rows in = written + rejected-with-reason) and prints them. The per-dataset
scripts in ``data_prep/`` are argument parsing around these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gta_verl.data.io import write_table_atomic
from gta_verl.data.loaders import (
    LoadReport,
    Rejection,
    read_corpus,
    read_flashrag_qa,
    read_musique_qa,
    read_nq_open,
    read_react_hotpot,
    read_supporting_facts_qa,
    reason_counts,
)
from gta_verl.data.schema import DEFAULT_AGENT_NAME, make_verl_row
from gta_verl.data.types import Passage, QAExample


@dataclass
class PrepResult:
    """What one prep step read, wrote and rejected (``n_in == n_written + len(rejected)``)."""

    name: str
    path: Path
    n_in: int
    n_written: int
    rejected: list[Rejection] = field(default_factory=list)

    def reconciles(self) -> bool:
        return self.n_in == self.n_written + len(self.rejected)

    def summary(self) -> str:
        why = "".join(f"\n    rejected {n} × {k}" for k, n in reason_counts(self.rejected).items())
        ok = "ok" if self.reconciles() else "DOES NOT RECONCILE"
        return (
            f"{self.name}: {self.n_in} rows in, {self.n_written} written, {len(self.rejected)} rejected "
            f"[{ok}] → {self.path}{why}"
        )


def corpus_rows(passages: Sequence[Passage]) -> list[dict[str, str]]:
    """Corpus parquet rows: ``doc_id`` (= make_doc_id(title, text)), ``title``, ``text``."""
    return [{"doc_id": p.doc_id, "title": p.title, "text": p.text} for p in passages]


def qa_rows(
    examples: Sequence[QAExample], agent_name: str = DEFAULT_AGENT_NAME, max_queries_per_turn: int = 1
) -> list[dict[str, Any]]:
    """verl parquet rows (``data_source, prompt, ability, reward_model, extra_info``), index = position.

    ``max_queries_per_turn``: the loop's K (``gta.agent.max_queries_per_turn``) the prompts describe.
    """
    return [
        make_verl_row(ex, i, agent_name=agent_name, max_queries_per_turn=max_queries_per_turn)
        for i, ex in enumerate(examples)
    ]


def write_parquet_atomic(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows to ``path`` via a temp file + rename (never a half-written parquet)."""
    import pandas as pd
    import pyarrow as pa

    return write_table_atomic(pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False), path)


def _result(name: str, report: LoadReport[Any], path: Path, n_written: int, verbose: bool) -> PrepResult:
    res = PrepResult(name, path, report.n_in, n_written, list(report.rejected))
    if verbose:
        print(res.summary())
    return res


def prepare_corpus(
    input_path: str | Path,
    out_path: str | Path,
    fmt: str | None = None,
    strict: bool = False,
    verbose: bool = True,
) -> tuple[list[Passage], PrepResult]:
    """Read a corpus (HippoRAG JSON / FlashRAG jsonl / parquet) and write the corpus parquet."""
    rep = read_corpus(input_path, fmt, strict=strict)
    path = write_parquet_atomic(corpus_rows(rep.records), out_path)
    return rep.records, _result(f"corpus {Path(input_path).name}", rep, path, rep.n_ok, verbose)


def prepare_qa(
    report: LoadReport[QAExample],
    out_path: str | Path,
    agent_name: str = DEFAULT_AGENT_NAME,
    verbose: bool = True,
    max_queries_per_turn: int = 1,
) -> PrepResult:
    """Write a QA loader report as verl parquet (prompts for K = ``max_queries_per_turn``)."""
    path = write_parquet_atomic(qa_rows(report.records, agent_name, max_queries_per_turn), out_path)
    return _result(f"qa {Path(report.path).name}", report, path, report.n_ok, verbose)


def prepare_hipporag_style(
    corpus_in: str | Path,
    qa_in: str | Path,
    out_dir: str | Path,
    name: str,
    split: str = "train",
    strict: bool = False,
    verbose: bool = True,
) -> dict[str, Path]:
    """HippoRAG-format corpus + MuSiQue-style question file → ``<name>_corpus.parquet``,
    ``<name>_<split>.parquet``."""
    out_dir = Path(out_dir)
    passages, c = prepare_corpus(corpus_in, out_dir / f"{name}_corpus.parquet", "hipporag", strict, verbose)
    qa = read_musique_qa(
        qa_in, corpus_ids={p.doc_id: p for p in passages}, data_source=name, split=split, strict=strict
    )
    q = prepare_qa(qa, out_dir / f"{name}_{split}.parquet", verbose=verbose)
    return {"corpus": c.path, "qa": q.path}


def prepare_musique(
    out_dir: str | Path, assets_dir: str | Path | None = None, verbose: bool = True
) -> dict[str, Path]:
    """The bundled MuSiQue subset → ``musique_corpus.parquet`` (1,890) + ``musique_train.parquet`` (100).

    Args:
        out_dir: Output directory.
        assets_dir: A directory holding ``musique/`` with the same two files, instead of the bundled copy.
        verbose: Print each step's counts.
    """
    from gta_verl.bundled import MUSIQUE_DIR

    a = Path(assets_dir) / "musique" if assets_dir else MUSIQUE_DIR
    return prepare_hipporag_style(
        a / "musique_train_corpus.json",
        a / "musique_train.json",
        out_dir,
        "musique",
        "train",
        verbose=verbose,
    )


def prepare_supporting_facts(
    corpus_in: str | Path,
    qa_in: str | Path,
    out_dir: str | Path,
    name: str,
    split: str = "dev",
    verbose: bool = True,
) -> dict[str, Path]:
    """2Wiki/HotpotQA (HippoRAG files with ``supporting_facts``) → corpus + QA parquet."""
    out_dir = Path(out_dir)
    passages, c = prepare_corpus(corpus_in, out_dir / f"{name}_corpus.parquet", None, False, verbose)
    q = prepare_qa(
        read_supporting_facts_qa(qa_in, passages, data_source=name, split=split),
        out_dir / f"{name}_{split}.parquet",
        verbose=verbose,
    )
    return {"corpus": c.path, "qa": q.path}


def prepare_hotpot_context(
    qa_in: str | Path,
    out_dir: str | Path,
    name: str = "hotpotqa",
    split: str = "train",
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    strict: bool = False,
    verbose: bool = True,
    paragraphs: str = "all",
) -> dict[str, Path]:
    """HotpotQA records → ``<name>_<split>.parquet`` (QA) + ``<name>_<split>_corpus.parquet`` (paragraphs).

    The corpus holds the kept questions' context paragraphs, deduplicated by (title, text): Stage II's
    retrieval corpus, ready for ``gta-verl kb build --corpus``; ``paragraphs`` picks gold +
    distractors (``all``) or the gold paragraphs alone (``gold``, the paper's corpus size; see
    :mod:`gta_verl.data.hotpot_context`). Each question's gold ids are its supporting-fact
    paragraphs' doc ids in that corpus.

    Args:
        qa_in: HotpotQA-format JSON list (see :mod:`gta_verl.data.hotpot_context`).
        out_dir: Output directory.
        name: ``data_source`` and file-name prefix.
        split: ``extra_info.split`` and file-name part.
        sample: Keep a seeded uniform sample of this many questions (file order).
        seed: Seed of ``sample``.
        limit: Keep the first this many questions instead (``sample`` wins when both are given).
        strict: Fail on the first malformed record.
        verbose: Print the counts, the rejection reasons and any title with several texts.
        paragraphs: ``all`` or ``gold`` (:data:`gta_verl.data.hotpot_context.CORPUS_PARAGRAPHS`).
    """
    from gta_verl.data import hotpot_context as hc

    rep = hc.read_hotpot_context(qa_in, strict=strict)
    if sample is not None:
        rep = hc.sample_report(rep, sample, seed)
    elif limit is not None:
        rep = hc.head_report(rep, limit)
    corpus = hc.build_context_corpus(rep.records, rep.path, paragraphs)
    out_dir = Path(out_dir)
    c_path = write_parquet_atomic(corpus_rows(corpus.passages), out_dir / f"{name}_{split}_corpus.parquet")
    kind = "gold paragraphs" if paragraphs == "gold" else "context paragraphs, gold + distractors,"
    c = PrepResult(
        f"corpus ({kind} of {rep.n_ok} questions)",
        c_path,
        corpus.n_paragraphs,
        len(corpus.passages),
        list(corpus.rejected),
    )
    q = prepare_qa(
        hc.qa_report(rep, hc.context_examples(rep.records, corpus, name, split)),
        out_dir / f"{name}_{split}.parquet",
        verbose=verbose,
    )
    if verbose:
        print(c.summary())
        for conflict in corpus.title_conflicts:
            print(f"    warning: {conflict}")
    return {"corpus": c.path, "qa": q.path}


QA_READERS: dict[str, Callable[..., LoadReport[QAExample]]] = {
    "nq_open": read_nq_open,
    "react_hotpot": read_react_hotpot,
    "flashrag": read_flashrag_qa,
}


def prepare_answers_only(
    kind: str,
    qa_in: str | Path,
    out_path: str | Path,
    data_source: str,
    split: str,
    limit: int | None = None,
    verbose: bool = True,
) -> PrepResult:
    """QA without gold passages (NQ-open, HotpotQA-simplified, FlashRAG jsonl) → verl parquet.

    ``limit`` keeps the first N questions; the rest count as rejected ("over limit").
    """
    rep = QA_READERS[kind](qa_in, data_source=data_source, split=split)
    if limit is not None and rep.n_ok > limit:
        over = rep.records[limit:]
        rep.records = rep.records[:limit]
        rep.rejected += [Rejection(rep.path, -1, f"over limit: --limit {limit}") for _ in over]
    return prepare_qa(rep, out_path, verbose=verbose)
