"""Graph path sampling for trajectory augmentation (GTA-RAG §3.4, eq. 13).

A path ``P = (d*_1, …, d*_H)`` is a sequence of ``H`` distinct document nodes
of the KB graph in which every two consecutive documents are connected through
at most two entity nodes:

* ``doc – e – doc``: both documents mention entity ``e`` (two doc_entity edges);
* ``doc – e – e′ – doc``: ``e`` is in the first document, ``e′`` in the next one,
  and ``e – e′`` is a relation or synonymy edge.

The walk starts at a uniformly random document and moves node by node without
revisiting any node (documents *or* entities), as in the paper. Each link keeps
the bridge entities and the triples that justify it (triples of the source
document that mention the first bridge entity, triples of the target document
that mention the last one, and the relation triple for an ``e – e′`` relation
edge), so that generators can phrase the hop and readers can audit it.

Everything here is a pure function of the KB and a ``numpy.random.Generator``:
the same seed gives the same paths.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gta_verl.data.types import Triple
from gta_verl.kb.knowledge_base import KnowledgeBase

#: Our default sampling mix (the paper gives none): Table 4 reports only the *validated* result,
#: 1,899 / 93 / 8 of 2,000 trajectories 2/3/4-hop (95 / 4.7 / 0.4 %); we sample more long paths.
DEFAULT_HOP_MIX: tuple[tuple[int, float], ...] = ((2, 0.8), (3, 0.15), (4, 0.05))

LINK_SHARED = "shared"  # doc – e – doc
LINK_KINDS = (LINK_SHARED, "relation", "synonymy")


@dataclass(frozen=True)
class PathSamplerConfig:
    """Knobs of the random-walk path sampler.

    Attributes:
        hop_mix: ``(H, weight)`` pairs; each path draws its hop count ``H`` with
            probability ``weight / sum(weights)``. Default 0.8 / 0.15 / 0.05 is our
            default (mostly 2-hop, some 3- and 4-hop); the paper reports only the
            validated counts (Table 4), not a sampling mix.
        max_sampled_docs: Cap on document nodes the walk may land on while
            building one path, dead ends included (paper Table 4: 10). A walk that
            reaches the cap before ``H`` documents is abandoned.
        max_bridge_docs: Entities mentioned by more documents than this are not
            used as bridges (hubs such as "united states" link unrelated
            documents). ``None`` disables the filter.
        skip_numeric_bridges: Do not bridge through numbers and dates (entities made
            of digits, punctuation and month names): two passages sharing "1963" or
            "december 26 1982" are rarely about the same thing.
        two_entity_links: Allow ``doc – e – e′ – doc`` links (the paper's "at most
            two entity nodes"); ``False`` keeps only shared-entity links.
        max_attempts_factor: ``sample_paths`` gives up after
            ``max_attempts_factor * n`` walks (duplicates and dead ends included).
    """

    hop_mix: tuple[tuple[int, float], ...] = DEFAULT_HOP_MIX
    max_sampled_docs: int = 10
    max_bridge_docs: int | None = 50
    skip_numeric_bridges: bool = True
    two_entity_links: bool = True
    max_attempts_factor: int = 30

    def __post_init__(self) -> None:
        if not self.hop_mix:
            raise ValueError("PathSamplerConfig.hop_mix is empty; give at least one (H, weight) pair")
        for h, w in self.hop_mix:
            if int(h) != h or h < 1:
                raise ValueError(f"PathSamplerConfig.hop_mix: hop count {h!r} must be an integer >= 1")
            if not w >= 0:
                raise ValueError(f"PathSamplerConfig.hop_mix: weight {w!r} of H={h} must be >= 0")
        if sum(w for _, w in self.hop_mix) <= 0:
            raise ValueError("PathSamplerConfig.hop_mix: weights sum to 0; give one positive weight")
        if max(h for h, _ in self.hop_mix) > self.max_sampled_docs:
            raise ValueError(
                f"PathSamplerConfig: max_sampled_docs={self.max_sampled_docs} is below the largest "
                f"hop count {max(h for h, _ in self.hop_mix)}; raise it (paper: 10)"
            )
        if self.max_bridge_docs is not None and self.max_bridge_docs < 2:
            raise ValueError("PathSamplerConfig.max_bridge_docs must be >= 2 (or None to disable)")
        if self.max_attempts_factor < 1:
            raise ValueError("PathSamplerConfig.max_attempts_factor must be >= 1")

    @property
    def hops(self) -> tuple[int, ...]:
        return tuple(int(h) for h, _ in self.hop_mix)

    @property
    def hop_probs(self) -> np.ndarray:
        """``float64 [len(hop_mix)]`` normalized hop probabilities."""
        w = np.array([float(w) for _, w in self.hop_mix])
        return w / w.sum()


def hop_mix_for(hops: Sequence[int], base: Sequence[tuple[int, float]] = DEFAULT_HOP_MIX) -> tuple:
    """Restrict ``base`` to ``hops``; hop counts absent from ``base`` get the smallest base weight."""
    weights = dict(base)
    floor = min(weights.values())
    return tuple((int(h), float(weights.get(int(h), floor))) for h in hops)


@dataclass(frozen=True)
class HopLink:
    """How path document ``src_doc`` reaches the next one, ``dst_doc``.

    Attributes:
        src_doc, dst_doc: Document indices (= node ids) of the two documents.
        entities: Normalized names of the 1 or 2 bridge entity nodes, in walk order.
        entity_ids: Their entity indices (into ``kb.entities``).
        kind: ``"shared"`` (doc–e–doc) or the kind of the ``e–e′`` edge
            (``"relation"`` / ``"synonymy"``).
        src_triples: Triples of ``src_doc`` mentioning ``entities[0]``.
        dst_triples: Triples of ``dst_doc`` mentioning ``entities[-1]``.
        link_triples: Relation triples between ``entities[0]`` and ``entities[1]``.
    """

    src_doc: int
    dst_doc: int
    entities: tuple[str, ...]
    entity_ids: tuple[int, ...]
    kind: str
    src_triples: tuple[Triple, ...] = ()
    dst_triples: tuple[Triple, ...] = ()
    link_triples: tuple[Triple, ...] = ()


@dataclass(frozen=True)
class GraphPath:
    """A sampled document path ``P = (d*_1 … d*_H)`` with its ``H − 1`` links."""

    doc_indices: tuple[int, ...]
    doc_ids: tuple[str, ...]
    links: tuple[HopLink, ...]
    sampled_docs: int = 0
    """Document nodes the walk landed on (≥ H; dead ends count)."""

    @property
    def hops(self) -> int:
        return len(self.doc_indices)

    @property
    def key(self) -> tuple[str, ...]:
        """Identity used for de-duplication (ordered document ids)."""
        return self.doc_ids

    @property
    def bridge_entities(self) -> tuple[tuple[str, ...], ...]:
        return tuple(link.entities for link in self.links)


@dataclass
class PathIndex:
    """Adjacency lists of the KB graph, split by edge role, for fast walks.

    Built once per KB by :func:`build_path_index`; read-only afterwards.
    """

    kb: KnowledgeBase
    doc_entities: list[np.ndarray]
    """Per document, ``int64 [k]`` entity indices it mentions (doc_entity edges)."""
    entity_docs: list[np.ndarray]
    """Per entity, ``int64 [m]`` document indices that mention it."""
    entity_links: list[list[tuple[int, str]]]
    """Per entity, ``(other entity index, "relation"|"synonymy")`` neighbours."""
    bridge_ok: np.ndarray
    """``bool [n_entities]``: entity may be used as a bridge (hub / numeric filters)."""
    doc_entity_triples: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    """``(doc index, entity index)`` → indices into ``kb.triples`` mentioning that entity."""
    pair_triples: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    """Sorted ``(entity, entity)`` → indices of triples relating them."""

    def triples_of(self, doc: int, entity: int) -> tuple[Triple, ...]:
        return tuple(self.kb.triples[i] for i in self.doc_entity_triples.get((doc, entity), ()))


_MONTHS = frozenset(
    [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)


def _is_numeric(name: str) -> bool:
    """Only digits, punctuation and month names: a number, year or date ("26 december 1982")."""
    words = name.split()
    only_dates = all(w in _MONTHS or not any(ch.isalpha() for ch in w) for w in words)
    return bool(words) and only_dates and any(ch.isdigit() for ch in name)


def build_path_index(kb: KnowledgeBase, config: PathSamplerConfig | None = None) -> PathIndex:
    """Split the KB graph's adjacency by edge kind and index triples by (doc, entity).

    Args:
        kb: Loaded knowledge base (node numbering: docs then entities).
        config: Sampler config for the bridge filters (default config if ``None``).

    Returns:
        A :class:`PathIndex` over ``kb``.
    """
    config = config or PathSamplerConfig()
    n_docs, n_ent = kb.n_docs, kb.n_entities
    doc_ents: list[list[int]] = [[] for _ in range(n_docs)]
    ent_docs: list[list[int]] = [[] for _ in range(n_ent)]
    ent_links: list[list[tuple[int, str]]] = [[] for _ in range(n_ent)]
    kinds = kb.graph.es["kind"] if kb.graph.ecount() else []
    for (a, b), kind in zip(kb.graph.get_edgelist(), kinds, strict=True):
        if a > b:
            a, b = b, a
        if kind == "doc_entity":
            if a >= n_docs or b < n_docs:
                continue  # malformed edge; the KB loader validates, so only defensive
            doc_ents[a].append(b - n_docs)
            ent_docs[b - n_docs].append(a)
        elif a >= n_docs:  # relation / synonymy between two entities
            ent_links[a - n_docs].append((b - n_docs, kind))
            ent_links[b - n_docs].append((a - n_docs, kind))
    bridge_ok = np.ones(n_ent, dtype=bool)
    for j, name in enumerate(kb.entities):
        if config.skip_numeric_bridges and _is_numeric(name):
            bridge_ok[j] = False
        if config.max_bridge_docs is not None and len(ent_docs[j]) > config.max_bridge_docs:
            bridge_ok[j] = False
    doc_index = kb.doc_index_by_id()
    det: dict[tuple[int, int], list[int]] = defaultdict(list)
    pair: dict[tuple[int, int], list[int]] = defaultdict(list)
    for t, (triple, (s, o)) in enumerate(
        zip(kb.triples, np.asarray(kb.triple_entity_ids).tolist(), strict=True)
    ):
        d = doc_index.get(triple.doc_id)
        if d is not None:
            det[(d, s)].append(t)
            if o != s:
                det[(d, o)].append(t)
        pair[(min(s, o), max(s, o))].append(t)
    return PathIndex(
        kb=kb,
        doc_entities=[np.array(sorted(set(e)), dtype=np.int64) for e in doc_ents],
        entity_docs=[np.array(sorted(set(d)), dtype=np.int64) for d in ent_docs],
        entity_links=[sorted(set(links)) for links in ent_links],
        bridge_ok=bridge_ok,
        doc_entity_triples=dict(det),
        pair_triples=dict(pair),
    )


def _step(
    index: PathIndex,
    doc: int,
    seen_docs: set[int],
    seen_ents: set[int],
    rng: np.random.Generator,
    two_entity: bool,
) -> tuple[int, tuple[int, ...], str] | None:
    """One hop of the walk: ``doc`` → entity → (entity′ →) new document.

    The walk picks a uniformly random usable entity of ``doc``, then a uniformly
    random unvisited neighbour of it among documents and (if allowed) linked
    entities; from a linked entity it picks a random unvisited document. Only
    neighbours that lead to a new document are candidates, so a hop fails only
    when ``doc`` has no onward link at all.

    Returns:
        ``(next doc, bridge entity indices, link kind)`` or ``None`` at a dead end.
    """
    ents = [int(e) for e in index.doc_entities[doc] if index.bridge_ok[e] and int(e) not in seen_ents]
    for e in rng.permutation(len(ents)).tolist() if ents else []:
        ent = ents[e]
        docs = [int(d) for d in index.entity_docs[ent] if int(d) not in seen_docs]
        options: list[tuple[int, tuple[int, ...], str]] = [(d, (ent,), LINK_SHARED) for d in docs]
        if two_entity:
            for other, kind in index.entity_links[ent]:
                if other in seen_ents or other == ent or not index.bridge_ok[other]:
                    continue
                nxt = [int(d) for d in index.entity_docs[other] if int(d) not in seen_docs]
                if nxt:
                    # one option per linked entity: the walk reaches e′ first, then a doc
                    options.append((nxt[int(rng.integers(len(nxt)))], (ent, other), kind))
        if options:
            return options[int(rng.integers(len(options)))]
    return None


def _make_link(index: PathIndex, src: int, dst: int, ents: tuple[int, ...], kind: str) -> HopLink:
    kb = index.kb
    link_triples: tuple[Triple, ...] = ()
    if len(ents) == 2:
        key = (min(ents), max(ents))
        link_triples = tuple(kb.triples[i] for i in index.pair_triples.get(key, ()))
    return HopLink(
        src_doc=src,
        dst_doc=dst,
        entities=tuple(kb.entities[e] for e in ents),
        entity_ids=ents,
        kind=kind,
        src_triples=index.triples_of(src, ents[0]),
        dst_triples=index.triples_of(dst, ents[-1]),
        link_triples=link_triples,
    )


def sample_path(
    index: PathIndex, hops: int, rng: np.random.Generator, config: PathSamplerConfig
) -> GraphPath | None:
    """Sample one ``hops``-document path by a without-replacement random walk.

    On a dead end the walk drops the last document (keeping it visited) and
    continues from the previous one; it stops once ``config.max_sampled_docs``
    documents have been landed on.

    Returns:
        The path, or ``None`` when the cap was reached first.
    """
    kb = index.kb
    start = int(rng.integers(kb.n_docs))
    docs, links = [start], []
    seen_docs, seen_ents = {start}, set()
    landed = 1
    while len(docs) < hops:
        step = _step(index, docs[-1], seen_docs, seen_ents, rng, config.two_entity_links)
        if step is None:
            if len(docs) == 1 or landed >= config.max_sampled_docs:
                return None
            docs.pop()  # backtrack: the dead-end document stays visited
            links.pop()
            continue
        if landed >= config.max_sampled_docs:
            return None
        nxt, ents, kind = step
        landed += 1
        seen_docs.add(nxt)
        seen_ents.update(ents)
        links.append(_make_link(index, docs[-1], nxt, ents, kind))
        docs.append(nxt)
    return GraphPath(
        doc_indices=tuple(docs),
        doc_ids=tuple(kb.passages[d].doc_id for d in docs),
        links=tuple(links),
        sampled_docs=landed,
    )


@dataclass
class SamplingStats:
    """Counts of one sampling run: ``attempts = paths + dead_ends + duplicates``."""

    attempts: int = 0
    paths: int = 0
    dead_ends: int = 0
    duplicates: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(vars(self))


class PathSampler:
    """Stateful wrapper: one RNG stream and one de-duplication set across batches."""

    def __init__(self, index: PathIndex, config: PathSamplerConfig | None = None, seed: int = 0) -> None:
        self.index = index
        self.config = config or PathSamplerConfig()
        self.rng = np.random.default_rng(seed)
        self.seen: set[tuple[str, ...]] = set()
        self.stats = SamplingStats()

    def sample(self, n: int) -> list[GraphPath]:
        """Return up to ``n`` new unique paths (fewer if the attempt budget runs out)."""
        out: list[GraphPath] = []
        budget = self.config.max_attempts_factor * max(n, 1)
        hops, probs = self.config.hops, self.config.hop_probs
        while len(out) < n and budget > 0:
            budget -= 1
            self.stats.attempts += 1
            h = hops[int(self.rng.choice(len(hops), p=probs))]
            path = sample_path(self.index, h, self.rng, self.config)
            if path is None:
                self.stats.dead_ends += 1
            elif path.key in self.seen:
                self.stats.duplicates += 1
            else:
                self.seen.add(path.key)
                self.stats.paths += 1
                out.append(path)
        return out


def sample_paths(
    kb: KnowledgeBase | PathIndex, n: int, config: PathSamplerConfig | None = None, seed: int = 0
) -> list[GraphPath]:
    """Sample up to ``n`` unique paths; same ``seed`` and KB → same paths.

    Args:
        kb: A knowledge base or a prebuilt :class:`PathIndex`.
        n: Number of unique paths wanted.
        config: Sampler config (paper defaults if ``None``).
        seed: Seed of the ``numpy.random.Generator``.
    """
    config = config or PathSamplerConfig()
    index = kb if isinstance(kb, PathIndex) else build_path_index(kb, config)
    return PathSampler(index, config, seed).sample(n)


def build_path(index: PathIndex, doc_indices: Sequence[int], bridges: Sequence[Sequence[str]]) -> GraphPath:
    """Build a :class:`GraphPath` from chosen documents and bridge entity names (tests, hand-made paths).

    Raises:
        ValueError: when a bridge is not connected the way a sampled link would be.
    """
    kb = index.kb
    if len(bridges) != len(doc_indices) - 1:
        raise ValueError(f"build_path: {len(doc_indices)} documents need {len(doc_indices) - 1} bridges")
    ent_id = {e: j for j, e in enumerate(kb.entities)}
    links = []
    for h, names in enumerate(bridges):
        ents = tuple(ent_id[n] for n in names)
        src, dst = doc_indices[h], doc_indices[h + 1]
        if not (
            1 <= len(ents) <= 2 and ents[0] in index.doc_entities[src] and ents[-1] in index.doc_entities[dst]
        ):
            raise ValueError(f"build_path: bridge {names} does not link documents {src} and {dst}")
        kind = LINK_SHARED
        if len(ents) == 2:
            kinds = [k for other, k in index.entity_links[ents[0]] if other == ents[1]]
            if not kinds:
                raise ValueError(
                    f"build_path: no relation/synonymy edge between {names[0]!r} and {names[1]!r}"
                )
            kind = kinds[0]
        links.append(_make_link(index, src, dst, ents, kind))
    return GraphPath(
        doc_indices=tuple(doc_indices),
        doc_ids=tuple(kb.passages[d].doc_id for d in doc_indices),
        links=tuple(links),
        sampled_docs=len(doc_indices),
    )
