"""The OpenIE interface shared by the four backends, and the driver that runs one.

A backend turns passages into :class:`Extraction` s (raw entity strings and
(subject, relation, object) triples, not yet normalized) with a per-passage
status. :func:`run_openie` adds the cache (resume after a crash), a progress
bar and totals (:class:`OpenIEReport`).

Statuses:
    * ``ok``: at least one well-formed triple;
    * ``empty``: the extractor ran and found no triple (it may still list entities);
    * ``unparseable``: the LLM replied but no triples could be parsed;
    * ``error``: the call failed (after retries) or the passage is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from gta_verl.data.types import Passage

Status = Literal["ok", "empty", "unparseable", "error"]
STATUSES: tuple[str, ...] = ("ok", "empty", "unparseable", "error")
RawTriple = tuple[str, str, str]


@dataclass(frozen=True)
class Extraction:
    """OpenIE output for one passage (raw strings; the graph builder normalizes)."""

    doc_id: str
    entities: tuple[str, ...] = ()
    triples: tuple[RawTriple, ...] = ()
    status: Status = "ok"
    n_malformed: int = 0
    """Triples dropped because they were not 3 non-empty strings."""
    error: str = ""
    json_repair: str = ""
    """LLM backends: what the triple reply's JSON needed (``gta_verl.kb.openie.parse.REPAIRS``); "" else."""

    def to_json(self) -> dict[str, Any]:
        out = {
            "doc_id": self.doc_id,
            "entities": list(self.entities),
            "triples": [list(t) for t in self.triples],
            "status": self.status,
            "n_malformed": self.n_malformed,
            "error": self.error,
        }
        if self.json_repair:  # only LLM extractions carry it (cache lines of the others stay as they were)
            out["json_repair"] = self.json_repair
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Extraction:
        return cls(
            doc_id=d["doc_id"],
            entities=tuple(d.get("entities", ())),
            triples=tuple(tuple(t) for t in d.get("triples", ())),  # type: ignore[misc]
            status=d.get("status", "ok"),
            n_malformed=int(d.get("n_malformed", 0)),
            error=d.get("error", ""),
            json_repair=d.get("json_repair", ""),
        )


def clean_triples(raw: Iterable[Any]) -> tuple[tuple[RawTriple, ...], int]:
    """Keep triples that are exactly 3 non-blank strings; return (kept, n_malformed).

    HippoRAG's GPT-3.5 file holds 2- and 4-element lists and nested junk; those are
    counted and skipped, never fatal.
    """
    kept: list[RawTriple] = []
    bad = 0
    for t in raw or ():
        if isinstance(t, (list, tuple)) and len(t) == 3 and all(isinstance(x, str) and x.strip() for x in t):
            kept.append((t[0].strip(), t[1].strip(), t[2].strip()))
        else:
            bad += 1
    return tuple(kept), bad


def make_extraction(
    doc_id: str,
    entities: Iterable[Any],
    triples: Iterable[Any],
    error: str = "",
    parsed: bool = True,
    json_repair: str = "",
) -> Extraction:
    """Build an :class:`Extraction`, cleaning triples and deriving the status."""
    clean, bad = clean_triples(triples)
    ents = tuple(dict.fromkeys(str(e).strip() for e in entities or () if isinstance(e, str) and e.strip()))
    if error:
        status: Status = "error"
    elif not parsed:
        status = "unparseable"
    else:
        status = "ok" if clean else "empty"  # entities alone add no relation edge
    return Extraction(doc_id, ents, clean, status, bad, error, json_repair)


@runtime_checkable
class OpenIEBackend(Protocol):
    """One extractor. ``identity`` changes whenever its output could change (model, prompts)."""

    identity: str

    def extract(self, passages: Sequence[Passage]) -> Iterator[Extraction]:
        """Yield one :class:`Extraction` per passage, in any order, as each finishes."""
        ...


@dataclass
class OpenIEReport:
    """Totals of one OpenIE run."""

    backend: str
    n_passages: int = 0
    by_status: dict[str, int] = field(default_factory=lambda: {s: 0 for s in STATUSES})
    n_triples: int = 0
    n_malformed: int = 0
    n_from_cache: int = 0
    n_extracted: int = 0
    by_json_repair: dict[str, int] = field(default_factory=dict)
    """LLM backends: passages per repair their triple reply needed (``none`` … ``failed``)."""

    def add(self, ex: Extraction, cached: bool) -> None:
        self.n_passages += 1
        if ex.json_repair:
            self.by_json_repair[ex.json_repair] = self.by_json_repair.get(ex.json_repair, 0) + 1
        self.by_status[ex.status] = self.by_status.get(ex.status, 0) + 1
        self.n_triples += len(ex.triples)
        self.n_malformed += ex.n_malformed
        if cached:
            self.n_from_cache += 1
        else:
            self.n_extracted += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "n_passages": self.n_passages,
            "by_status": dict(self.by_status),
            "n_triples": self.n_triples,
            "n_malformed_triples": self.n_malformed,
            "n_from_cache": self.n_from_cache,
            "n_extracted": self.n_extracted,
            **({"by_json_repair": dict(self.by_json_repair)} if self.by_json_repair else {}),
        }

    def summary(self) -> str:
        st = ", ".join(f"{k} {v}" for k, v in self.by_status.items())
        return (
            f"OpenIE [{self.backend}]: {self.n_passages} passages ({st}); {self.n_triples} triples, "
            f"{self.n_malformed} malformed skipped; {self.n_from_cache} from cache"
        )

    def __str__(self) -> str:
        return json.dumps(self.to_dict())


def run_openie(
    backend: OpenIEBackend, passages: Sequence[Passage], cache: Any = None, progress: bool = True
) -> tuple[dict[str, Extraction], OpenIEReport]:
    """Extract every passage not already in ``cache``; return {doc_id: Extraction} + totals.

    Args:
        backend: The extractor.
        passages: Passages to extract (duplicates by ``doc_id`` are extracted once).
        cache: Optional :class:`gta_verl.kb.openie.cache.ExtractionCache`; each
            finished passage is appended (and fsynced) before the next is counted,
            so a killed run resumes where it stopped.
        progress: Show a tqdm bar.
    """
    report = OpenIEReport(backend.identity)
    unique = list({p.doc_id: p for p in passages}.values())
    out: dict[str, Extraction] = {}
    todo: list[Passage] = []
    for p in unique:
        hit = cache.get(p) if cache is not None else None
        if hit is not None:
            out[p.doc_id] = hit
            report.add(hit, cached=True)
        else:
            todo.append(p)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=f"OpenIE {backend.identity}", unit="passage")
    wanted = {p.doc_id: p for p in todo}
    for ex in backend.extract(todo):
        if ex.doc_id not in wanted or ex.doc_id in out:
            continue
        if cache is not None and ex.status != "error":  # errors are retried on the next run
            cache.put(wanted[ex.doc_id], ex)
        out[ex.doc_id] = ex
        report.add(ex, cached=False)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    for p in todo:  # a backend that silently skipped a passage must not shrink the KB
        if p.doc_id not in out:
            ex = Extraction(p.doc_id, status="error", error="backend returned no result")
            out[p.doc_id] = ex
            report.add(ex, cached=False)
    return out, report
