"""Offline template generator: multi-hop questions from the bridge triples of a path.

No LLM, CPU only, deterministic. It is **lower quality** than the LLM
generators — questions are mechanical relative clauses over OpenIE relation
phrases, e.g.::

    What is the entity that (the entity that Barack Obama born in) capital of?

— but it is real: every trajectory goes through the same retriever validation,
and its queries are built to be executable by the deployed graph retriever.
The query of turn ``t`` is the triple of document ``t`` minus its unknown end
(``"Honolulu capital of"``): it names the entity and the relation of one of
document ``t``'s triples, which is what the triple-embedding seeding of
R(q) (eq. 6) matches, and the entity is one the reasoning already knows
(the question's topic entity at turn 1, the bridge revealed by document
``t − 1`` afterwards).

Composition along ``P = (d_1 … d_H)`` with links ``b_1 … b_{H−1}``:

* ``d_1``: a triple ``T_1`` with the outgoing bridge ``b_1`` at one end and a
  topic entity ``x`` at the other; ``b_1`` = "the entity that x r_1".
* ``d_t`` (``1 < t < H``): a triple ``T_t`` relating the incoming bridge and the
  outgoing one (failure ``template:no_chain_triple`` if none);
* ``d_H``: a triple ``T_H`` from the incoming bridge to a new entity ``y*``
  (the answer, written as in the document).
* A relation link ``e – e′`` adds one clause from its relation triple, and
  only when that triple comes from the previous document, so the reasoning
  never uses a fact not yet revealed.

Comparison questions (opt-in, ``TemplateConfig.comparison_share``): a share of
the 2-document paths linked by a shared entity ``b`` becomes "Is <the entity
that x r_1> the same as <the entity that y r_2>?" — two sub-questions that need
no answer of each other, so τ* looks both up in **one** search action
(``TrajectoryTurn.with_previous``; ``<search> x r_1 ## y r_2 </search>`` with
``gta.agent.max_queries_per_turn`` > 1). ``d_1`` phrases ``b`` from its topic
entity; ``d_2`` either phrases ``b`` too (answer "yes") or phrases an entity of
another of its triples that mentions neither ``b`` nor ``x`` (answer "no").
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gta_verl.data.types import Trajectory, TrajectoryTurn, Triple
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.synth.generators.base import GenerationOutcome
from gta_verl.synth.paths import GraphPath
from gta_verl.synth.text import contains_phrase, surface_form

GENERATOR_NAME = "template"
GENERIC_RELATIONS = (
    "is",
    "was",
    "are",
    "were",
    "is a",
    "is an",
    "was a",
    "was an",
    "be",
    "has",
    "have",
    "had",
    "include",
    "includes",
    "included",
    "contains",
    "is in the",
    "is one of",
)


class TemplateFailure(Exception):
    """The path has no triples that phrase a chain; ``args[0]`` is the reason code."""


@dataclass(frozen=True)
class TemplateConfig:
    """Knobs of the template generator.

    Attributes:
        seed: Mixed with each path's document ids to pick among candidate
            triples, so the output of a path does not depend on batch order.
        max_answer_words: Answers (the unknown end of ``T_H``) longer than this
            are skipped as candidates: long OpenIE objects are clauses, not answers.
        skip_relations: Relation phrases too generic to identify an entity
            ("the entity that is waterfall" has many answers); triples with them
            are not used for clauses.
        comparison_share: Share of 2-document paths phrased as a yes/no comparison
            with both sub-questions in one search action (module docstring); a path
            with no such phrasing keeps its chain question. Default 0: chains only.
    """

    seed: int = 0
    max_answer_words: int = 6
    skip_relations: tuple[str, ...] = GENERIC_RELATIONS
    comparison_share: float = 0.0

    def __post_init__(self) -> None:
        if self.max_answer_words < 1:
            raise ValueError("TemplateConfig.max_answer_words must be >= 1")
        if not 0.0 <= self.comparison_share <= 1.0:
            raise ValueError(f"TemplateConfig.comparison_share={self.comparison_share} must be in [0, 1]")


@dataclass(frozen=True)
class _Clause:
    """One hop phrased from a triple whose ``known`` end is already resolved."""

    triple: Triple
    known: str  # normalized entity name of the resolved end
    unknown: str  # normalized entity name of the end the hop finds

    @property
    def forward(self) -> bool:
        return self.triple.subject == self.known

    def noun_phrase(self, known_text: str) -> str:
        """ "the entity that <known> <rel>" or "the entity that <rel> <known>"."""
        r = self.triple.relation
        return f"the entity that {known_text} {r}" if self.forward else f"the entity that {r} {known_text}"

    def query(self, known_text: str) -> str:
        """The triple minus its unknown end, in triple order."""
        r = self.triple.relation
        return f"{known_text} {r}" if self.forward else f"{r} {known_text}"


def _other_end(t: Triple, entity: str) -> str | None:
    if t.subject == t.object:
        return None
    if t.subject == entity:
        return t.object
    if t.object == entity:
        return t.subject
    return None


def _overlaps(name: str, used: set[str]) -> bool:
    """``name`` is, contains or is contained in an entity already on the chain ("obama" ~ "barack obama")."""
    return any(contains_phrase(u, name) or contains_phrase(name, u) for u in used)


def _pick(rng: np.random.Generator, items: Sequence):
    return items[int(rng.integers(len(items)))]


class TemplateGenerator:
    """Compose (x, y*, τ*) from the bridge triples along a path; see the module docstring."""

    name = GENERATOR_NAME

    def __init__(self, config: TemplateConfig | None = None) -> None:
        self.config = config or TemplateConfig()
        self._by_doc: tuple[int, dict[str, list[Triple]]] | None = None

    def _doc_triples(self, kb: KnowledgeBase) -> dict[str, list[Triple]]:
        """doc_id → its triples, built once per KB (a comparison's "no" side reads d_2's)."""
        if self._by_doc is None or self._by_doc[0] != id(kb):
            by_doc: dict[str, list[Triple]] = {}
            for t in kb.triples:
                by_doc.setdefault(t.doc_id, []).append(t)
            self._by_doc = (id(kb), by_doc)
        return self._by_doc[1]

    def _rng(self, path: GraphPath) -> np.random.Generator:
        digest = hashlib.sha1("|".join(path.doc_ids).encode()).digest()
        return np.random.default_rng([self.config.seed, int.from_bytes(digest[:8], "little")])

    def generate(self, paths: Sequence[GraphPath], kb: KnowledgeBase) -> list[GenerationOutcome]:
        out = []
        for path in paths:
            try:
                out.append(GenerationOutcome(path=path, trajectory=self.compose(path, kb)))
            except TemplateFailure as exc:
                out.append(GenerationOutcome.failure(path, "generate", str(exc.args[0])))
        return out

    def _usable(self, triples: Sequence[Triple]) -> list[Triple]:
        return [t for t in triples if t.relation not in self.config.skip_relations]

    def _chains(self, path: GraphPath, rng: np.random.Generator) -> list[list[_Clause]]:
        """Pick the clauses each path document resolves, in reasoning order.

        ``chains[t]`` lists the clauses whose triples are in document ``t``: its own
        hop triple, plus the relation clause of an adjacent ``e – e′`` link when the
        relation triple was extracted from document ``t``.
        """
        if path.hops < 2:
            raise TemplateFailure("template:single_document_path")
        used = {e for link in path.links for e in link.entities}
        first = path.links[0]
        starts = [
            _Clause(t, known=x, unknown=first.entities[0])
            for t in self._usable(first.src_triples)
            if (x := _other_end(t, first.entities[0])) is not None and x not in used
        ]
        if not starts:
            raise TemplateFailure("template:no_start_triple")
        chains: list[list[_Clause]] = [[_pick(rng, starts)]]
        used.add(chains[0][0].known)
        for h, link in enumerate(path.links):
            chain = chains[-1]
            link_clause, in_src = self._link_clause(path, h, rng)
            if link_clause is not None and in_src:
                chain.append(link_clause)
            chain = [link_clause] if link_clause is not None and not in_src else []
            incoming = link.entities[-1]
            if h + 1 < len(path.links):  # intermediate document: relate in- and out-bridge
                outgoing = path.links[h + 1].entities[0]
                cands = [
                    _Clause(t, incoming, outgoing)
                    for t in self._usable(link.dst_triples)
                    if _other_end(t, incoming) == outgoing
                ]
                if not cands:
                    raise TemplateFailure("template:no_chain_triple")
            else:
                cands = [
                    _Clause(t, incoming, y)
                    for t in self._usable(link.dst_triples)
                    if (y := _other_end(t, incoming)) is not None
                    and not _overlaps(y, used)
                    and len(y.split()) <= self.config.max_answer_words
                ]
                if not cands:
                    raise TemplateFailure("template:no_answer_triple")
            chain.append(_pick(rng, cands))
            chains.append(chain)
        return chains

    def _link_clause(self, path: GraphPath, h: int, rng: np.random.Generator) -> tuple[_Clause | None, bool]:
        """Relation clause of link ``h`` and whether its triple is in the link's source document."""
        link = path.links[h]
        if link.kind != "relation":
            return None, False  # shared entity or synonym: the bridge is the same thing
        e, e2 = link.entities[0], link.entities[-1]
        for doc_id, in_src in ((path.doc_ids[h], True), (path.doc_ids[h + 1], False)):
            cands = [
                _Clause(t, e, e2)
                for t in self._usable(link.link_triples)
                if t.doc_id == doc_id and _other_end(t, e) == e2
            ]
            if cands:
                return _pick(rng, cands), in_src
        raise TemplateFailure("template:link_triple_off_path")

    def compose(self, path: GraphPath, kb: KnowledgeBase) -> Trajectory:
        """Build the trajectory of one path.

        Raises:
            TemplateFailure: when the path's triples cannot phrase a chain.
        """
        if self.config.comparison_share > 0 and path.hops == 2:
            rng = self._rng(path)
            if rng.random() < self.config.comparison_share:
                try:
                    triples = self._doc_triples(kb).get(path.doc_ids[1], ())
                    return compose_comparison(path, kb, triples, self._usable, rng)
                except TemplateFailure:
                    pass  # no comparison phrasing: the path still gives its chain question
        chains = self._chains(path, self._rng(path))
        sf = _surface(kb, path)

        def facts(chain: list[_Clause]) -> str:
            return "; ".join(f"{c.noun_phrase(sf(c.known))} is {sf(c.unknown)}" for c in chain)

        first = chains[0][0]
        nested = first.noun_phrase(sf(first.known))
        turns = []
        for t, chain in enumerate(chains):
            head = chain[0]
            for c in chain if t else chain[1:]:
                nested = c.noun_phrase(f"({nested})")
            seen = (
                "To answer the question I"
                if t == 0
                else f"The documents so far show that {facts(chains[t - 1])}. Next I"
            )
            turns.append(
                TrajectoryTurn(
                    reasoning=f"{seen} need {head.noun_phrase(sf(head.known))}.",
                    query=head.query(sf(head.known)),
                    target_doc_id=path.doc_ids[t],
                )
            )
        answer = sf(chains[-1][-1].unknown)
        return Trajectory(
            question=f"What is {nested}?",
            answer=answer,
            turns=tuple(turns),
            path_doc_ids=path.doc_ids,
            bridge_entities=path.bridge_entities,
            generator=GENERATOR_NAME,
            final_reasoning=f"The last document shows that {facts(chains[-1])}. So the answer is {answer}.",
        )


def _surface(kb: KnowledgeBase, path: GraphPath):
    """``entity -> its surface form as first written in the path's documents, in path order``."""
    texts = [kb.passages[d].contents for d in path.doc_indices]

    def sf(entity: str) -> str:
        for text in texts:
            found = surface_form(entity, text)
            if found != entity:
                return found
        return entity

    return sf


def _comparison_clauses(
    path: GraphPath, doc_triples: Sequence[Triple], usable, rng: np.random.Generator
) -> tuple[_Clause, _Clause, str]:
    """(clause of d_1 → b, clause of d_2, "yes" | "no") for a 2-document path."""
    link = path.links[0]
    if link.kind == "relation":
        raise TemplateFailure("template:comparison_needs_shared_entity")
    b1, b2 = link.entities[0], link.entities[-1]
    bridge = set(link.entities)
    firsts = [
        _Clause(t, known=x, unknown=b1)
        for t in usable(link.src_triples)
        if (x := _other_end(t, b1)) is not None and not _overlaps(x, bridge)
    ]
    if not firsts:
        raise TemplateFailure("template:no_start_triple")
    first = _pick(rng, firsts)
    used = bridge | {first.known}
    same = [
        _Clause(t, known=y, unknown=b2)
        for t in usable(link.dst_triples)
        if (y := _other_end(t, b2)) is not None and not _overlaps(y, used)
    ]
    other = [
        _Clause(t, known=t.subject, unknown=t.object)
        for t in usable(doc_triples)
        if t.subject != t.object and not _overlaps(t.subject, used) and not _overlaps(t.object, used)
    ]
    if not same and not other:
        raise TemplateFailure("template:no_comparison_triple")
    yes = bool(same) and (not other or rng.random() < 0.5)
    return first, _pick(rng, same if yes else other), "yes" if yes else "no"


def compose_comparison(
    path: GraphPath, kb: KnowledgeBase, doc_triples: Sequence[Triple], usable, rng: np.random.Generator
) -> Trajectory:
    """A yes/no comparison of two independent sub-questions, looked up in one search action.

    Args:
        path: A 2-document path whose link is a shared entity.
        kb: The knowledge base (passage texts for surface forms).
        doc_triples: Every triple of d_2 (the "no" candidates).
        usable: Filter dropping triples with generic relations.
        rng: The path's generator.

    Raises:
        TemplateFailure: when the path has no such phrasing.
    """
    first, second, answer = _comparison_clauses(path, doc_triples, usable, rng)
    sf = _surface(kb, path)
    p1, p2 = first.noun_phrase(sf(first.known)), second.noun_phrase(sf(second.known))
    turns = (
        TrajectoryTurn(
            reasoning=(
                "The two parts of the question do not depend on each other, so I look both up "
                f"at once. I need {p1}"
            ),
            query=first.query(sf(first.known)),
            target_doc_id=path.doc_ids[0],
        ),
        TrajectoryTurn(
            reasoning=f"and {p2}.",
            query=second.query(sf(second.known)),
            target_doc_id=path.doc_ids[1],
            with_previous=True,
        ),
    )
    return Trajectory(
        question=f"Is {p1} the same as {p2}?",
        answer=answer,
        turns=turns,
        path_doc_ids=path.doc_ids,
        bridge_entities=path.bridge_entities,
        generator=GENERATOR_NAME,
        final_reasoning=(
            f"The documents show that {p1} is {sf(first.unknown)} and {p2} is {sf(second.unknown)}. "
            f"So the answer is {answer}."
        ),
    )
