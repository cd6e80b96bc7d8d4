"""Typed data contracts shared by every stage of gta-verl.

These frozen dataclasses are the only objects that cross stage boundaries
(KB → retrieval → synthesis → agent loop → rewards → evaluation). They hold
plain Python data so that they pickle cheaply across Ray and can be written
to parquet with :meth:`to_dict`.

Conventions:
    * ``doc_id`` is :func:`gta_verl.data.ids.make_doc_id` of (title, text): a
      stable content hash, so the same passage gets the same id in every KB,
      parquet file and reward, whatever order the corpus was read in.
    * Entity names are stored normalized (:func:`gta_verl.kb.normalize.normalize_entity`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

HitSource = Literal["graph", "dense", "both", "bm25"]


def _as_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


@dataclass(frozen=True)
class Passage:
    """One corpus passage; becomes one document node of the KB graph."""

    doc_id: str
    """Stable content hash of (title, text), see ``make_doc_id``."""
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The ``"title\\ntext"`` string that dense encoders and Search-R1 servers use."""
        return f"{self.title}\n{self.text}"

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class Triple:
    """One OpenIE triple (subject, relation, object) with document provenance."""

    subject: str
    """Normalized head entity."""
    relation: str
    """Relation phrase as extracted (lower-cased, whitespace-collapsed)."""
    object: str
    """Normalized tail entity."""
    doc_id: str
    """Passage the triple was extracted from."""

    @property
    def text(self) -> str:
        """Text that the triple encoder embeds (HippoRAG 2 fact format)."""
        return f"({self.subject}, {self.relation}, {self.object})"

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class QAExample:
    """A question with gold answers and (optionally) gold supporting documents."""

    qid: str
    question: str
    answers: tuple[str, ...]
    """Gold answer followed by its aliases; never empty."""
    supporting_doc_ids: tuple[str, ...] = ()
    """Gold evidence ``doc_id`` s in reasoning order (empty for NQ/HotpotQA-simplified)."""
    hops: int = 0
    """Number of reasoning hops (0 when unknown)."""
    data_source: str = ""
    split: str = "train"
    supporting_texts: tuple[str, ...] = ()
    """Gold evidence passage texts (``"title\\ntext"``), aligned with ``supporting_doc_ids``."""

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class RetrievalHit:
    """One retrieved document for one query."""

    doc_id: str
    title: str
    text: str
    score: float
    """PPR probability for graph hits, cosine for dense-only hits (see ``source``)."""
    source: HitSource
    """Which retriever found it: ``graph``, ``dense`` or ``both`` (graph backend), ``bm25``."""

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class RetrievalResult:
    """The answer of the retrieval environment R(q) to one query.

    A failed call (timeout, actor crash, HTTP error) is *not* an exception: it
    is a result with ``error`` set and no hits, which the agent loop shows to
    the policy as an observation and counts as a metric.
    """

    query: str
    hits: tuple[RetrievalHit, ...] = ()
    flags: tuple[str, ...] = ()
    """Non-fatal conditions, e.g. ``"no_entities_dense_only"``, ``"query_truncated"``."""
    error: str | None = None
    """Why the call failed, or ``None`` on success."""
    latency_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def doc_ids(self) -> list[str]:
        return [h.doc_id for h in self.hits]

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RetrievalResult:
        hits = tuple(RetrievalHit(**h) for h in d.get("hits", ()))
        return cls(
            query=d["query"],
            hits=hits,
            flags=tuple(d.get("flags", ())),
            error=d.get("error"),
            latency_ms=float(d.get("latency_ms", 0.0)),
        )


@dataclass(frozen=True)
class TrajectoryTurn:
    """One search turn of a reference (synthetic) trajectory τ*."""

    reasoning: str
    query: str
    target_doc_id: str
    """The document this turn's query must retrieve (an element of S(x))."""
    with_previous: bool = False
    """Issued in the same search action as the previous turn's query (an independent
    sub-question, e.g. of a comparison; the loop needs ``gta.agent.max_queries_per_turn`` > 1)."""


@dataclass(frozen=True)
class Trajectory:
    """A synthesized multi-hop example (x, y*, S(x), τ*) from trajectory augmentation."""

    question: str
    answer: str
    turns: tuple[TrajectoryTurn, ...]
    path_doc_ids: tuple[str, ...]
    """Documents d*_1..d*_H of the sampled graph path = target set S(x), in order."""
    bridge_entities: tuple[tuple[str, ...], ...] = ()
    """Entity nodes linking path document h to h+1 (1 or 2 per hop)."""
    generator: str = ""
    final_reasoning: str = ""
    answer_aliases: tuple[str, ...] = ()

    @property
    def hops(self) -> int:
        return len(self.path_doc_ids)

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class RolloutRecord:
    """What one agent rollout did; input of rewards and evaluation metrics."""

    question: str
    gold_answers: tuple[str, ...]
    target_doc_ids: tuple[str, ...]
    """S(x): gold evidence documents (may be empty for natural QA without gold)."""
    turn_queries: tuple[str, ...] = ()
    turn_doc_ids: tuple[tuple[str, ...], ...] = ()
    """Per search turn, the ids R(q_t) returned (in rank order)."""
    answer: str | None = None
    """Final ``<answer>`` text, or ``None`` if the rollout never answered."""
    retrieval_errors: int = 0
    invalid_actions: int = 0
    response_tokens: int = 0
    data_source: str = ""
    hops: int = 0
    qid: str = ""
    sample_idx: int = 0
    retrieved_texts: tuple[str, ...] = field(default=())
    """Texts of all retrieved documents (for PathRouter's path overlap P)."""
    gold_texts: tuple[str, ...] = field(default=())
    """Texts of gold evidence passages (for P)."""
    turn_query_doc_ids: tuple[tuple[tuple[str, ...], ...], ...] = ()
    """Per search turn, the ids shown for each of its queries (several queries per search only;
    empty: one query per turn, showing ``turn_doc_ids``)."""

    @property
    def num_searches(self) -> int:
        return len(self.turn_queries)

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)
