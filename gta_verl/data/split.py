"""Train/held-out split of synthetic questions that share no target document across the split.

Two questions are linked when their target sets S(x) intersect; every connected component of that graph goes
wholly to one side, so no held-out question can be answered by recalling a document seen in training.
Components are shuffled with ``seed`` and taken into the held-out side until it reaches ``heldout_fraction``
of the rows. When that graph is one giant component (many questions over a small corpus),
:func:`split_by_document_communities` partitions the documents instead and drops the questions that straddle
two sides.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations


def _components(targets: Sequence[Sequence[str]]) -> list[list[int]]:
    parent = list(range(len(targets)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, docs in enumerate(targets):
        for d in docs:
            if d in first:
                parent[find(i)] = find(first[d])
            else:
                first[d] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(targets)):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values())


def split_disjoint_targets(
    targets: Sequence[Sequence[str]], heldout_fraction: float = 0.2, seed: int = 0
) -> tuple[list[int], list[int]]:
    """Row indices ``(train, heldout)`` with no target document in both.

    Args:
        targets: Per question, its target document ids S(x).
        heldout_fraction: Share of rows wanted on the held-out side (reached or just passed).
        seed: Shuffle of the components.

    Returns:
        Two sorted index lists partitioning ``range(len(targets))``.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    comps = _components(targets)
    random.Random(seed).shuffle(comps)
    want = heldout_fraction * len(targets)
    held: list[int] = []
    for comp in comps:
        if len(held) >= want:
            break
        held.extend(comp)
    held_set = set(held)
    return [i for i in range(len(targets)) if i not in held_set], sorted(held)


def split_sft_rl_heldout(
    targets: Sequence[Sequence[str]], heldout_fraction: float = 0.2, rl_fraction: float = 0.0, seed: int = 0
) -> tuple[list[int], list[int], list[int]]:
    """Row indices ``(sft, rl, heldout)``, no target document on two sides.

    The held-out side is cut first (:func:`split_disjoint_targets`), then ``rl_fraction`` of the rest is cut
    the same way for RL prompts that the SFT data never showed; ``rl_fraction = 0`` leaves ``rl`` empty and
    ``sft`` equal to the two-way split's training side.
    """
    train, held = split_disjoint_targets(targets, heldout_fraction, seed)
    if rl_fraction <= 0:
        return train, [], held
    sft_part, rl_part = split_disjoint_targets([targets[i] for i in train], rl_fraction, seed)
    return [train[i] for i in sft_part], [train[i] for i in rl_part], held


@dataclass(frozen=True)
class DocumentSplit:
    """Row indices per side of a document-partition split; ``dropped`` rows straddle two sides."""

    sft: list[int]
    rl: list[int]
    heldout: list[int]
    dropped: list[int]

    def counts(self) -> dict[str, int]:
        return {
            "sft": len(self.sft),
            "rl": len(self.rl),
            "heldout": len(self.heldout),
            "dropped_straddling_sides": len(self.dropped),
        }


def _document_communities(targets: Sequence[Sequence[str]], seed: int) -> list[list[str]]:
    """Leiden (modularity) communities of the graph "two documents are targets of one question"."""
    import igraph as ig

    docs = sorted({d for t in targets for d in t})
    index = {d: i for i, d in enumerate(docs)}
    weight: Counter[tuple[int, int]] = Counter()
    for t in targets:
        ids = sorted({index[d] for d in t})
        for a, b in combinations(ids, 2):
            weight[(a, b)] += 1
    graph = ig.Graph(n=len(docs), edges=list(weight), edge_attrs={"weight": list(weight.values())})
    # Leiden draws from igraph's global RNG; a seeded one makes the split a function of ``seed``.
    ig.set_random_number_generator(random.Random(seed))
    try:
        parts = graph.community_leiden(objective_function="modularity", weights="weight", n_iterations=-1)
    finally:
        ig.set_random_number_generator(random)
    return sorted(sorted(docs[i] for i in comm) for comm in parts)


def split_by_document_communities(
    targets: Sequence[Sequence[str]], heldout_fraction: float = 0.12, rl_fraction: float = 0.12, seed: int = 0
) -> DocumentSplit:
    """Partition the *documents*, then keep each question on the side that holds all its targets.

    When questions are many relative to the corpus, "shares a target document" links almost all of them into
    one component and :func:`split_disjoint_targets` can only put that component on one side. Here the target
    documents are cut into communities of the co-target graph (documents that are targets of a common
    question), communities are shuffled with ``seed`` and given to the held-out side, then the RL side, until
    each holds its fraction of the documents; the rest are SFT documents. A question whose targets lie on two
    sides is dropped (and counted), so no target document is shared between any two sides.

    Args:
        targets: Per question, its target document ids S(x).
        heldout_fraction: Share of the target documents given to the held-out side.
        rl_fraction: Share given to the RL side (0 leaves it empty).
        seed: Community detection and shuffle.

    Returns:
        The four sorted index lists; together they partition ``range(len(targets))``.
    """
    if not 0.0 < heldout_fraction < 1.0 or not 0.0 <= rl_fraction < 1.0 - heldout_fraction:
        raise ValueError(
            f"need 0 < heldout_fraction < 1 and 0 <= rl_fraction < 1 - heldout_fraction, got "
            f"{heldout_fraction}, {rl_fraction}"
        )
    comms = _document_communities(targets, seed)
    random.Random(seed).shuffle(comms)
    n_docs = sum(len(c) for c in comms)
    quota = {"heldout": heldout_fraction * n_docs, "rl": rl_fraction * n_docs}
    taken = {"heldout": 0, "rl": 0}
    side_of: dict[str, str] = {}
    for comm in comms:
        side = next((s for s in ("heldout", "rl") if taken[s] < quota[s]), "sft")
        if side != "sft":
            taken[side] += len(comm)
        side_of.update(dict.fromkeys(comm, side))
    rows: dict[str, list[int]] = {"sft": [], "rl": [], "heldout": [], "dropped": []}
    for i, t in enumerate(targets):
        sides = {side_of[d] for d in t}
        rows[sides.pop() if len(sides) == 1 else "dropped"].append(i)
    return DocumentSplit(**rows)


def split_by_seen_documents(
    gold: Sequence[Sequence[str]], seen: Sequence[Sequence[str]]
) -> tuple[list[int], list[int]]:
    """Row indices ``(disjoint, shared)`` of evaluation questions: no gold document in ``seen`` vs some.

    A held-out question whose gold documents were training targets can be answered by recalling a document
    the policy was rewarded for finding; report the two sides apart (e.g. real MuSiQue questions against
    the synthetic training targets over the same paragraphs).

    Args:
        gold: Per evaluation question, its gold (supporting) document ids.
        seen: Per training question, its target document ids S(x).

    >>> split_by_seen_documents([["d1", "d2"], ["d3"], []], [["d2", "d9"]])
    ([1, 2], [0])
    """
    known = {d for docs in seen for d in docs}
    shared = [i for i, docs in enumerate(gold) if any(d in known for d in docs)]
    taken = set(shared)
    return [i for i in range(len(gold)) if i not in taken], shared
